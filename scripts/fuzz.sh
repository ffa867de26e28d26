#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer,
# leak detection on) in their own build folder and runs each on its corpus for a given time.
# Usage: scripts/fuzz.sh [seconds per target (60)] [build folder (build-fuzz)] [jobs] [targets...]
# Inputs that find new coverage go to <build>/corpus/<target>/ (the committed seeds in fuzz/corpus/
# stay as they are); a crash, leak, timeout (10 s) or out-of-memory (2 GB) leaves its input in
# <build>/findings/<target>/ and fails the script. The last line per target gives its executions.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${2:-build-fuzz}
jobs=${3:-$(nproc)}
shift $(( $# < 3 ? $# : 3 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config checkpoint image)
cxx=${FUZZ_CXX:-clang++-19}

cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTNN_CUDA=OFF -DTNN_HIP=OFF -DTNN_TESTS=OFF -DTNN_PYTHON=OFF -DTNN_FUZZ=ON -DTNN_SANITIZE=address,undefined >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

# Longest inputs tried: configs and images well past their seeds; checkpoints past the largest seed.
declare -A max_len=([config]=16384 [checkpoint]=65536 [image]=65536)
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  log="$build/fuzz_$t.log"
  if ! "$build/fuzz/fuzz_$t" "$build/corpus/$t" "fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len="${max_len[$t]}" -print_final_stats=1 \
       -artifact_prefix="$build/findings/$t/" >"$log" 2>&1; then
    status=1
    echo "fuzz_$t: FINDING (see $log and $build/findings/$t/)"
    grep -E "^==[0-9]+==ERROR|runtime error|Test unit written" "$log" | head -n 5 || true
  fi
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  echo "fuzz_$t: ${runs:-?} executions in ${seconds} s, peak RSS ${rss:-?} MB, corpus $(ls "$build/corpus/$t" | wc -l) new + $(ls "fuzz/corpus/$t" | wc -l) seeds"
done
exit "$status"
