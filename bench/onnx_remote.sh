#!/usr/bin/env bash
# Imported ONNX models on a remote device against the local CPU device.
#   1. builds tensorwire-cli and tensorwire-server (Release, in $BUILD, default build/),
#   2. exports the ResNet-style network and the transformer LM at their --large sizes
#      (scripts/onnx_models.py, torch.onnx.export),
#   3. starts a tensorwire-server on 127.0.0.1 (port 0) and, per model, runs `tensorwire onnx run`
#      for $ROUNDS rounds alternating cpu and the server, $REPEAT inferences a round (the first of
#      each round, which registers the graph, is left out),
#   4. counts the frames the server receives per inference (the difference between a run of
#      $REPEAT inferences and one of 1, from `tensorwire info`),
#   5. prints the table and writes it to bench/results/onnx_remote.md: median inference time
#      local and remote, remote / local (target <= 1.05), frames per inference (target 1).
# Run on an idle machine: the table records the load average. Both processes run OpenMP with
# OMP_WAIT_POLICY=passive unless the environment sets it (spinning threads of two processes on
# few cores otherwise take turns at the scheduler's pace).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
REPEAT=${REPEAT:-10}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

scripts/bootstrap.sh python3-torch
source bench/build_release.sh
build_release onnx_remote tensorwire-cli
build_release onnx_remote tensorwire-server

out=$(mktemp -d)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
/usr/bin/python3 scripts/onnx_models.py "$out" --large 2>/dev/null | grep -v digits_cnn

"$BUILD/apps/tensorwire-server" --listen tcp://127.0.0.1:0 >"$out/server.log" 2>&1 &
server_pid=$!
url=
while [[ -z $url ]]; do  # its first line names the address it bound
  kill -0 "$server_pid" || { cat "$out/server.log" >&2; exit 1; }
  url=$(sed -n 's/^listening on \(tcp:[^ ]*\).*/\1/p' "$out/server.log" | head -1)
  [[ -n $url ]] || sleep 0.05
done

cli=$BUILD/apps/tensorwire
# The median of the inference times (ms) a `tensorwire onnx run` printed, all rounds together.
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
times() { awk '/^ran / {for (i = 1; i <= NF; ++i) if ($i == "in") print $(i + 1)}' | tail -n +2; }
frames_in() { "$cli" info "$url" | sed -n 's/.* \([0-9]*\) frames in .*/\1/p'; }

table="| model | input | local ms | remote ms | remote / local | frames per inference |
|---|---|---|---|---|---|"
for model in resnet transformer_lm; do
  path=$out/$model.onnx
  : >"$out/local" && : >"$out/remote"
  for ((r = 0; r < ROUNDS; ++r)); do
    "$cli" onnx run "$path" --device cpu --repeat "$REPEAT" | times >>"$out/local"
    "$cli" onnx run "$path" --device "$url" --repeat "$REPEAT" | times >>"$out/remote"
  done
  a=$(frames_in); "$cli" onnx run "$path" --device "$url" --repeat 1 >/dev/null
  b=$(frames_in); "$cli" onnx run "$path" --device "$url" --repeat "$REPEAT" >/dev/null
  c=$(frames_in)
  local_ms=$(median <"$out/local")
  remote_ms=$(median <"$out/remote")
  input=$("$cli" onnx show "$path" | sed -n "s/^input 0 '[^']*': //p")
  row=$(awk -v l="$local_ms" -v r="$remote_ms" -v f1=$((b - a)) -v f2=$((c - b)) -v n="$REPEAT" \
    'BEGIN {printf "%.2f | %.2f | %.3f | %.2f", l, r, r / l, (f2 - f1) / (n - 1)}')
  table+=$'\n'"| $model | $input | $row |"
done

report="# Imported ONNX models: remote against local

\`bench/onnx_remote.sh\` ($ROUNDS rounds x $REPEAT inferences, OMP_WAIT_POLICY=$OMP_WAIT_POLICY,
$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end). Models from
\`scripts/onnx_models.py --large\` (torch.onnx.export, opset 13), imported with tw::onnx::load;
the server is a tensorwire-server over loopback TCP, each inference one registered-graph run.

$table"
echo "$report"
mkdir -p bench/results
echo "$report" >bench/results/onnx_remote.md
