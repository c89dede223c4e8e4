#!/usr/bin/env bash
# Instructions per small op (valgrind's callgrind: the same count for the same binary and inputs
# however loaded the machine is): a 1-element add on the local CPU device, and a round trip of a
# 1-element add and its read on a remote device, counted in the client and in the server.
# Each figure is (count at N2 - count at N1) / (N2 - N1), so start-up and connecting cancel out.
#   bench/op_cost.sh [BUILD]        (default build/, configured by `make build`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${1:-build}
scripts/bootstrap.sh valgrind bc >/dev/null
N1=${N1:-200}
N2=${N2:-2200}
cmake --build "$BUILD" --target tw_bench_op_cost tensorwire-server >/dev/null
bin=$BUILD/bench/tw_bench_op_cost
server=$BUILD/apps/tensorwire-server
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# Instructions counted in one callgrind run of the command.
count() { valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$@" 2>&1 >/dev/null |
  sed -n 's/.*refs: *//p' | tr -d ','; }

per_op() { echo "scale=0; ($2 - $1) / ($N2 - $N1)" | bc; }

# A server on loopback TCP (port 0: the one it bound is read from its "listening on" line, which
# is also what is waited for), not spinning (the spin is polling, not work per op).
start_server() {  # $1: wrapper ("" or valgrind ...), sets url and spid
  $1 "$server" --listen tcp://127.0.0.1:0 --spin-us 0 --workers 1 >"$work/server.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do grep -q "listening on" "$work/server.log" && break; sleep 0.1; done
  url=$(sed -n 's/^listening on //p' "$work/server.log" | head -1)
  [ -n "$url" ] || { echo "op_cost: the server did not start:" >&2; cat "$work/server.log" >&2; exit 1; }
}

l1=$(count "$bin" local "$N1"); l2=$(count "$bin" local "$N2")
start_server ""
c1=$(TW_SPIN_US=0 count "$bin" remote "$url" "$N1"); c2=$(TW_SPIN_US=0 count "$bin" remote "$url" "$N2")
kill "$spid"; wait "$spid" 2>/dev/null || true
server_count() {  # $1: round trips; the server's instructions from start to a clean stop
  start_server "valgrind --tool=callgrind --callgrind-out-file=$work/cgs.out"
  TW_SPIN_US=0 "$bin" remote "$url" "$1" >/dev/null
  kill -INT "$spid"; wait "$spid" 2>/dev/null || true
  sed -n 's/.*refs: *//p' "$work/server.log" | tr -d ','
}
s1=$(server_count "$N1"); s2=$(server_count "$N2")
echo "instructions per op (callgrind, N = $N1 and $N2):"
echo "  local CPU device, 1-element add:        $(per_op "$l1" "$l2")"
echo "  remote round trip (add + read), client: $(per_op "$c1" "$c2")"
echo "  remote round trip (add + read), server: $(per_op "$s1" "$s2")"
