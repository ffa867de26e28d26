#!/usr/bin/env bash
# BlasLtMLP on an NVIDIA GPU in one go (issue #7): build (Release, sm_90a), run the BlasLtMLP GPU tests,
# then the report: fp16 / bf16 against fp32, BlasLtMLP against PortableMLP, FullyFusedMLP against
# BlasLtMLP; one fresh process per case (bench/bench_blaslt.cpp), aggregated by
# bench/bench_blaslt_report.py into JSON, markdown and PNG. Everything it keeps goes to $OUT/blaslt;
# the last lines printed are the summary. Under 7 minutes on one H200 with a fresh build, also as an
# extra step of bench/device_run.sh (which builds first and gives a step 420 s).
#
# Environment: OUT (default out), BUILD (default build-blaslt; a configured BUILD, such as
# device_run.sh's build-gpu, is reused as it is), FROM_HEAD (default 1: build a clean export of HEAD
# unless BUILD is already configured), JOBS (default: all cores), CUDA_ARCH (default 90a), SKIP_TESTS=1,
# SKIP_BENCH=1, ROUNDS (default 5), BENCH_BUDGET_S (default 200: cases that would start later are
# skipped with a note, so that the report part stays under 5 minutes).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# Build a clean export of HEAD, so that colleagues' uncommitted files in a shared checkout cannot break
# the build (as bench/run_mlp_bench.sh does); a BUILD that is already configured is used as it is.
[ -n "${BUILD:-}" ] && [ -f "$BUILD/CMakeCache.txt" ] && FROM_HEAD=0
if [ "${FROM_HEAD:-1}" = 1 ] && { [ -d .export ] || git rev-parse HEAD >/dev/null 2>&1; }; then
  export_dir=/tmp/tnn-blaslt-src
  rm -rf "$export_dir" && mkdir -p "$export_dir"
  if [ -d .export ]; then
    cp -a .export/. "$export_dir/"
    echo "run_blaslt_report: carried export of HEAD $(cat .export/.head 2>/dev/null) in $export_dir"
  else
    git archive HEAD | tar -x -C "$export_dir"
    echo "run_blaslt_report: HEAD $(git rev-parse --short HEAD), exported to $export_dir"
  fi
  [ -d .deps ] && cp -a .deps "$export_dir/"
  [ -d "$export_dir/.deps/stb" ] && export STB_INCLUDE_DIR="$export_dir/.deps/stb/usr/include/stb"
  BUILD=${BUILD:-$PWD/build-blaslt}
  mkdir -p "$BUILD" && BUILD=$(cd "$BUILD" && pwd)
  OUT="$OUT" BUILD="$BUILD" FROM_HEAD=0 exec bash "$export_dir/bench/run_blaslt_report.sh"
fi
BUILD=${BUILD:-$PWD/build-blaslt}
mkdir -p "$BUILD" && BUILD=$(cd "$BUILD" && pwd)
OUT="$OUT/blaslt"
mkdir -p "$OUT"
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90a}
BENCH_BUDGET_S=${BENCH_BUDGET_S:-200}
ROUNDS=${ROUNDS:-5}
start=$(date +%s)
status=0
summary=()

# gcc-13 where the machine has it (as scripts/gpu_check.sh).
if [ -x /usr/bin/gcc-13 ] && [ -x /usr/bin/g++-13 ]; then
  export CC=/usr/bin/gcc-13 CXX=/usr/bin/g++-13 CUDAHOSTCXX=/usr/bin/g++-13
fi
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || NVCC=/usr/local/cuda/bin/nvcc

echo "== build ($BUILD, sm_$CUDA_ARCH, $JOBS jobs)"
configure_ok=1
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=ON -DTNN_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DTNN_TESTS=ON -DTNN_PYTHON=OFF >"$OUT/build.log" 2>&1 || configure_ok=0
fi
if [ $configure_ok = 1 ] && cmake --build "$BUILD" -j "$JOBS" --target tnn_gpu_tests >>"$OUT/build.log" 2>&1; then
  summary+=("build            ok       $(( $(date +%s) - start )) s")
else
  tail -n 60 "$OUT/build.log"
  echo "RESULT: build FAILED (see $OUT/build.log)"
  exit 1
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== BlasLtMLP GPU tests"
  t0=$(date +%s)
  timeout 300 "$BUILD/tests/tnn_gpu_tests" --gtest_filter='*BlasLt*' --gtest_output="xml:$OUT/tests_blaslt.xml" \
    >"$OUT/tests_blaslt.log" 2>&1
  rc=$?
  # gtest's closing lines: "[  PASSED  ] N tests.", "[  SKIPPED ] N tests, listed below:", "[  FAILED  ] N tests, ..."
  count() { grep -oE "^\[  $1 +\] [0-9]+ tests?" "$OUT/tests_blaslt.log" | tail -n 1 | grep -oE "[0-9]+" || echo 0; }
  passed=$(count PASSED)
  skipped=$(count SKIPPED)
  failed=$(count FAILED)
  grep -E "epilogue GEMMs" "$OUT/tests_blaslt.log" | sort -u
  if [ $rc -eq 0 ]; then
    summary+=("tests            ok       $passed passed, $skipped skipped, 0 failed ($(( $(date +%s) - t0 )) s)")
  else
    status=1
    grep -E "^\[  FAILED  \] .*\(" "$OUT/tests_blaslt.log" | head -n 40
    summary+=("tests            FAILED   $passed passed, $skipped skipped, $failed failed, exit $rc (see tests_blaslt.log)")
    # Keep the failures and the totals, not every passing line.
    grep -vE "^\[ +(RUN|OK) +\]" "$OUT/tests_blaslt.log" | tail -n 2000 >"$OUT/tests_blaslt.tmp" &&
      mv "$OUT/tests_blaslt.tmp" "$OUT/tests_blaslt.log"
  fi
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== benchmark build"
  if ! { cmake -S . -B "$BUILD" -DTNN_BENCH=ON >>"$OUT/build.log" 2>&1 &&
         cmake --build "$BUILD" -j "$JOBS" --target bench_blaslt >>"$OUT/build.log" 2>&1; }; then
    tail -n 40 "$OUT/build.log"
    summary+=("bench build      FAILED   see build.log")
    status=1
  else
    BENCH="$BUILD/bench/bench_blaslt"
    CASES="$BUILD/blaslt_cases"
    rm -rf "$CASES" && mkdir -p "$CASES"
    bench_start=$(date +%s)
    n_run=0
    n_skipped=0
    # run LABEL ARGS...: one case in a fresh process, unless the time budget is spent.
    run() {
      local label=$1; shift
      local file="$CASES/$(printf '%03d' $((n_run + n_skipped)))_${label//[:\/]/_}.json"
      if [ $(( $(date +%s) - bench_start )) -ge "$BENCH_BUDGET_S" ]; then
        printf '{"label": "%s", "error": "skipped: the %s s time budget of the report was spent"}\n' \
          "$label" "$BENCH_BUDGET_S" >"$file"
        n_skipped=$((n_skipped + 1))
        return
      fi
      timeout 60 "$BENCH" --label "$label" --rounds "$ROUNDS" --out "$file" "$@" 2>&1 | tee -a "$OUT/bench.log" |
        cut -c1-220
      [ -s "$file" ] || printf '{"label": "%s", "error": "the process died (see bench.log)"}\n' "$label" >"$file"
      n_run=$((n_run + 1))
    }
    echo "== benchmark: fp16 / bf16 against fp32 (BlasLtMLP)"
    P="BlasLtMLP:float32,BlasLtMLP:float16,BlasLtMLP:bfloat16"
    for batch in 1024 16384; do
      for width in 32 64 128 256; do
        for depth in 2 4; do
          run "precision:w${width}_d${depth}_b${batch}" --variants "$P" --batch $batch --width $width --depth $depth
        done
      done
    done
    for width in 64 128 256; do
      for depth in 2 4; do
        run "precision:w${width}_d${depth}_b2^20" --variants "$P" --batch 1048576 --width $width --depth $depth
      done
    done
    for batch in 1024 16384 1048576; do
      run "precision:hashgrid_w64_d2_b${batch}" --variants "$P" --batch $batch --width 64 --depth 2 --grid
    done
    echo "== benchmark: FullyFusedMLP against BlasLtMLP (float16)"
    for batch in 1024 16384 1048576; do
      for width in 16 32 64 128; do
        run "fused:w${width}_d2_b${batch}" --variants "BlasLtMLP:float16,FullyFusedMLP:float16" --batch $batch \
          --width $width --depth 2
      done
    done
    echo "== benchmark: BlasLtMLP against PortableMLP (float32)"
    for batch in 16384 1048576; do
      for width in 16 32 64 128; do
        run "portable:w${width}_d2_b${batch}" --variants "PortableMLP:float32,BlasLtMLP:float32" --batch $batch \
          --width $width --depth 2
      done
    done
    bench_s=$(( $(date +%s) - bench_start ))
    n_error=$(grep -l '"error"' "$CASES"/*.json 2>/dev/null | wc -l)
    n_error=$((n_error - n_skipped))
    echo "== report"
    if python3 bench/bench_blaslt_report.py "$CASES" "$OUT" | tee "$BUILD/report_summary.txt"; then
      bench_status=ok
      if [ "$n_error" -gt 0 ]; then bench_status=ERRORS; status=1; fi
      summary+=("bench            $bench_status$(printf '%*s' $((9 - ${#bench_status})) '')$n_run cases in $bench_s s ($n_error with errors, $n_skipped skipped for time); blaslt_report.{md,json,png}")
      while IFS= read -r line; do summary+=("  $line"); done <"$BUILD/report_summary.txt"
    else
      summary+=("bench            FAILED   report script (see above)")
      status=1
    fi
    # The raw per-case results, as one file.
    python3 - "$CASES" "$OUT/blaslt_cases.json" <<'PY'
import json, os, sys
cases = []
for name in sorted(os.listdir(sys.argv[1])):
    with open(os.path.join(sys.argv[1], name)) as f:
        try:
            cases.append(json.load(f))
        except json.JSONDecodeError as e:
            cases.append({"file": name, "error": str(e)})
json.dump(cases, open(sys.argv[2], "w"), indent=1)
PY
  fi
fi

{
  echo
  echo "== run_blaslt_report summary ($(( $(date +%s) - start )) s, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || echo "no nvidia-smi"))"
  for line in "${summary[@]}"; do echo "$line"; done
  if [ "$status" = 0 ]; then echo "RESULT: all steps passed"; else echo "RESULT: FAILED"; fi
} | tee "$OUT/summary.txt"
exit "$status"
