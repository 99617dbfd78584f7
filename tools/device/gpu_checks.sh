#!/bin/bash
# Runs the GPU checks of a change in one go, in the order given, while a time budget lasts, and prints a
# table of what each gave: for a GPU machine lent by the call, where a call that runs out of time must
# still bring back what finished.
#
#   bash tools/device/gpu_checks.sh [--budget SECONDS] [--build DIR] [--logs DIR] STEP...
#
# Steps (each with its own time limit, cut to what the budget has left; one that would get under 20 s is
# skipped):
#   tests=SPEC     opsnn-tests SPEC, e.g. tests='[pool]' for the cases of the code that has not run yet
#   cuda           every [cuda] case in one process (its own convolution search, no saved choices)
#   memcheck=SPEC  SPEC's cases under compute-sanitizer memcheck, one process per case
#                  (tools/sanitize_gpu_tests.py)
#   batchnorm      opsnn-bench batchnorm --dtype bf16 (the batch-norm kernels, the stem's fused tail)
#   resnet-bf16, resnet-tf32
#                  opsnn-bench resnet50 with the whole step in a CUDA graph
#   torch-bf16, torch-tf32
#                  tools/bench_resnet50_torch.py: torch.compile's default and reduce-overhead modes and
#                  opsnn's graph step in the same call, with their ratio and peak memory
#   profile-bf16, profile-tf32
#                  one ResNet-50 step under Nsight Compute (no cache flush, clocks as they run), its
#                  kernel time per op category (tools/profile_categories.py); the CSV stays in the logs
# --budget: seconds for all the steps (540, a device call's 600 less the start); --build: the build
# directory with tests/opsnn-tests and opsnn-bench (build-gpu, or build-dev after prebuilt.sh unpack);
# --logs: where each step's log goes ($OUT when set, else gpu-checks-logs). The table is also written to
# LOGS/summary.md. The exit code is 0 only when every step ran and passed.
set -uo pipefail

budget=540
build=build-gpu
logs=${OUT:-gpu-checks-logs}
steps=()
while (($#)); do
  case "$1" in
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --logs) logs=${2:?--logs needs a directory}; shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "gpu_checks.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) steps+=("$1"); shift ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_checks.sh: --budget must be whole seconds, not '$budget'" >&2; exit 2; }
((${#steps[@]})) || { echo "gpu_checks.sh: name at least one step (see --help)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)  # the repository, for the Python tools
[[ $build == /* ]] || build=$PWD/$build
tests="$build/tests/opsnn-tests"
bench="$build/opsnn-bench"
export OPSNN_BINARY_DIR=${OPSNN_BINARY_DIR:-$build}

# Each step's time limit, its command and how its result line is found in its log.
declare -A limit=([tests]=120 [cuda]=200 [memcheck]=150 [batchnorm]=40 [resnet-bf16]=60 [resnet-tf32]=80
                  [torch-bf16]=260 [torch-tf32]=300 [profile-bf16]=300 [profile-tf32]=300)
command_for() {  # step, argument: sets `words`, the step's command line
  case "$1" in
    tests) words=("$tests" "$2") ;;
    cuda) words=("$tests" "[cuda]") ;;
    memcheck) words=(python3 "$root/tools/sanitize_gpu_tests.py" --tests "$tests" --tool memcheck --select "$2"
                     --jobs 8 --timeout 120 --logs "$logs/sanitizer") ;;
    batchnorm) words=("$bench" batchnorm --dtype bf16) ;;
    resnet-bf16 | resnet-tf32) words=("$bench" resnet50 --precision "${1#resnet-}" --steps 30 --warmup 5 --cuda-graph) ;;
    torch-bf16 | torch-tf32)
      local precision=bf16
      [[ $1 == torch-tf32 ]] && precision=fp32
      words=(python3 "$root/tools/bench_resnet50_torch.py" --precision "$precision" --steps 30 --no-eager
             --compile default,reduce-overhead --opsnn-graph --opsnn "$bench") ;;
    profile-bf16 | profile-tf32)
      words=(bash -c 'ncu --profile-from-start off --cache-control none --clock-control none \
                        --metrics gpu__time_duration.sum --csv --page raw \
                        "$1" resnet50 --precision "$2" --steps 3 --warmup 3 --profile > "$3" &&
                      python3 "$4" "$3"' profile "$bench" "${1#profile-}" "$logs/ncu-${1#profile-}.csv"
             "$root/tools/profile_categories.py") ;;
  esac
}
result_of() {  # step, log: the line that says how it went
  case "$1" in
    tests | cuda) grep -E "^(All tests passed|test cases:)" "$2" | tail -1 ;;
    memcheck) tail -1 "$2" ;;
    batchnorm) grep -E "^  (unfused|fused) " "$2" | tr -s ' ' | paste -sd ';' ;;
    resnet-*) grep -i "images/s" "$2" | tail -1 ;;
    torch-*) grep -E "^opsnn .*/ PyTorch's fastest" "$2" | tail -1 ;;
    profile-*) grep -E "^\| total \|" "$2" | tail -1 ;;
  esac
}

for step in "${steps[@]}"; do
  name=${step%%=*}
  [[ -n ${limit[$name]:-} ]] || { echo "gpu_checks.sh: unknown step '$step' (see --help)" >&2; exit 2; }
  if [[ $name == tests || $name == memcheck ]] && [[ $step != *=?* ]]; then
    echo "gpu_checks.sh: step '$name' needs a test spec: $name=SPEC" >&2
    exit 2
  fi
done
for f in "$tests" "$bench"; do
  [[ -x $f ]] || { echo "gpu_checks.sh: no $f (build first, or give --build)" >&2; exit 2; }
done

mkdir -p "$logs"
summary="$logs/summary.md"
printf '| step | exit | seconds | result |\n|---|---|---|---|\n' > "$summary"
deadline=$(($(date +%s) + budget))
status=0
index=0
for step in "${steps[@]}"; do
  index=$((index + 1))
  name=${step%%=*}
  argument=${step#*=}
  log="$logs/$index-$name.log"
  left=$((deadline - $(date +%s)))
  if ((left < 20)); then
    printf '| %s | - | - | skipped: %s s left of the budget |\n' "$step" "$left" >> "$summary"
    status=1
    continue
  fi
  seconds=${limit[$name]}
  ((seconds > left)) && seconds=$left
  start=$(date +%s)
  command_for "$name" "$argument"
  timeout "$seconds" "${words[@]}" > "$log" 2>&1
  rc=$?
  ((rc == 0)) || status=1
  result=$(result_of "$name" "$log" | sed 's/^ *//')
  [[ -n $result ]] || result="no result; the log ends: $(tail -1 "$log")"
  ((rc == 124)) && result="timed out after $seconds s; $result"
  printf '| %s | %s | %s | %s |\n' "$step" "$rc" "$(($(date +%s) - start))" "${result//|/\\|}" >> "$summary"
done
cat "$summary"
exit $status
