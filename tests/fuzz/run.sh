#!/usr/bin/env bash
# Runs every fuzz target of a TW_FUZZ build (tests/fuzz/README.md): first replays its saved
# regressions (tests/fuzz/regress/<target>/), then fuzzes it for SECONDS from the seed corpus
# (tw_fuzz_seeds) and the corpus earlier runs kept. Fails on the first crash, printing the
# target, the crashing input's path, the sanitizer's report and the command that reproduces it.
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]     (targets: frame hello batch ...)
# FUZZ_FLAGS adds libFuzzer flags, e.g. FUZZ_FLAGS=-runs=10000000 to stop after 10 M inputs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
bin=$build/tests/fuzz
work=$build/fuzz
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/fuzz_*.cc; do
    name=${src##*/fuzz_}
    targets+=("${name%.cc}")
  done
fi

rm -rf "$work/seeds"
"$bin/tw_fuzz_seeds" "$work/seeds" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Stack traces with function names and lines: the sanitizers find no symbolizer through
# Debian's /usr/bin/llvm-symbolizer link by themselves, only given its real path.
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]] && command -v llvm-symbolizer >/dev/null; then
  ASAN_SYMBOLIZER_PATH=$(readlink -f "$(command -v llvm-symbolizer)")
  export ASAN_SYMBOLIZER_PATH
fi

report() {  # target log what
  echo "fuzz: $1: $3" >&2
  echo "----- last lines of $2 -----" >&2
  tail -n 40 "$2" >&2
  echo "-----" >&2
}

for t in "${targets[@]}"; do
  exe=$bin/tw_fuzz_$t
  log=$work/logs/$t.log
  mkdir -p "$work/logs" "$work/corpus/$t" "$work/crashes/$t"
  regress=(tests/fuzz/regress/"$t"/*)
  if [[ -e ${regress[0]} ]]; then
    if ! "$exe" "${regress[@]}" >"$log" 2>&1; then
      report "$t" "$log" "a saved regression input crashes again (tests/fuzz/regress/$t/)"
      exit 1
    fi
  fi
  # -timeout: an input that takes seconds is a denial of service, so a finding too.
  start=$SECONDS
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  if ! "$exe" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 ${FUZZ_FLAGS:-} \
         -artifact_prefix="$work/crashes/$t/" "$work/corpus/$t" "$work/seeds/$t" >"$log" 2>&1; then
    crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    report "$t" "$log" "CRASH; input saved as ${crash:-(none written: see the log)}"
    echo "fuzz: reproduce with: $exe ${crash:-}" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  corpus=$(find "$work/corpus/$t" -type f | wc -l)
  echo "fuzz: $t: ok, ${execs:-?} inputs in $((SECONDS - start)) s, corpus $corpus files"
done
