#!/bin/bash
# Runs every libFuzzer target of a fuzzing build (-DOPSNN_FUZZ=ON, see tests/fuzz/README.md) for SECONDS
# each, one after another, from its committed corpus (tests/fuzz/corpus/<reader>/) plus what earlier runs
# of this build found (BUILD_DIR/fuzz-work/<reader>/). A target fails on a crash, a sanitizer report, an
# input taking more than 1 s, or more than 2 GB of memory; the input is saved under BUILD_DIR/fuzz-artifacts/.
# Prints executions and coverage per target; exits 1 when any target failed, 2 on a usage error.
# Usage: tools/run_fuzz.sh SECONDS [BUILD_DIR]   (BUILD_DIR defaults to build-fuzz)
set -uo pipefail
usage() { echo "usage: tools/run_fuzz.sh SECONDS [BUILD_DIR]: $1" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage "expected one or two arguments, got $#"
seconds=$1
build=${2:-build-fuzz}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || usage "SECONDS must be a positive whole number, got '$seconds'"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shopt -s nullglob
targets=("$build"/tests/fuzz/fuzz_*)
[[ ${#targets[@]} -gt 0 ]] || usage "no fuzz_* programs under $build/tests/fuzz (configure with -DOPSNN_FUZZ=ON and build)"
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
failed=()
printf '%-18s %10s %8s %8s %s\n' target executions cov ft result
for program in "${targets[@]}"; do
  [[ -x $program && -f $program ]] || continue
  reader=${program##*/fuzz_}
  work="$build/fuzz-work/$reader"
  mkdir -p "$work"
  inputs=("$work" "$root/tests/fuzz/corpus/$reader")
  [[ -d $root/tests/fuzz/regressions/$reader ]] && inputs+=("$root/tests/fuzz/regressions/$reader")
  options=(-max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1
           -artifact_prefix="$build/fuzz-artifacts/$reader-")
  [[ -f $root/tests/fuzz/$reader.dict ]] && options+=(-dict="$root/tests/fuzz/$reader.dict")
  log="$build/fuzz-logs/$reader.log"
  "$program" "${options[@]}" "${inputs[@]}" >"$log" 2>&1
  status=$?
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  features=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  result=ok
  if [[ $status -ne 0 ]]; then
    result="FAILED (exit $status; log $log)"
    failed+=("$reader")
  fi
  printf '%-18s %10s %8s %8s %s\n' "$reader" "${executions:-?}" "${coverage:-?}" "${features:-?}" "$result"
  [[ $status -ne 0 ]] && grep -m 20 -E 'ERROR|SUMMARY|==[0-9]+==|runtime error|Test unit written|accepted input' "$log" >&2
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run_fuzz: findings in ${failed[*]} (inputs under $build/fuzz-artifacts/)" >&2
  exit 1
fi
echo "run_fuzz: ${#targets[@]} targets, ${seconds} s each, no finding"
