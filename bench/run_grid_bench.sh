#!/usr/bin/env bash
# Grid encodings on an NVIDIA GPU in one go (issues #4 and #9): build (Release, sm_90a), the CPU grid and
# encoding tests and the GPU encoding tests, then bench/bench_grid.cu (ours, with the measured floors),
# bench/bench_grid_torch.py (PyTorch eager / torch.compile) and bench/bench_grid_report.py (floors,
# tcnn figures, targets). Everything goes to $OUT (bench_grid_report.md / .json, raw JSON, logs); the
# last lines printed are the table and a summary. Plans for under 7 minutes on one H200 (also as an
# extra step of bench/device_run.sh, which gives it 420 s).
#
# Environment: OUT (default out/grid_bench), BUILD (default build-grid; reused incrementally), JOBS
# (default: all cores), CUDA_ARCH (default 90a), BUDGET_S (default 400: total wall time planned),
# SKIP_TESTS=1, TORCH_FROM (with SKIP_TORCH=1: a bench_grid_torch.json of an earlier run), CPU_TEST_FILTER / GPU_TEST_FILTER (gtest filters of the test step), SKIP_TORCH=1, QUICK=1
# (main rows only: no variants, no smaller rows), SKIP_BENCH=1 (no timings).
# NCU_PROFILES=KERNEL:PASS[:morton],... (comma-separated, no spaces or quotes: bench/device_run.sh
# splits its steps on spaces) profiles, after the benchmark, one launch of the named grid kernel (a
# regex matched against the name, e.g. grid_forward_kernel, grid_param_grad_corner_kernel,
# grid_param_grad_shared_kernel) in one call of the main row's pass at 2^20 (bench_grid --profile PASS
# [--morton], after a warm-up call) with Nsight Compute (--set full; clocks and caches left alone: the
# table stays in L2 as in the benchmark, though ncu's save and restore between replay passes also go
# through L2) into $OUT/ncu_grid_*.txt (details) and *_sass.csv (per-SASS-line metrics;
# bench/ncu_sass_summary.py reads them); the raw reports are deleted (too large to bring back).
# KERNEL "all" profiles every launch of the call (speed-of-light section only: each kernel's duration),
# e.g. all:train_step for what one training step of tcnn's encoding + MLP benchmark spends where.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/grid_bench}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-grid}
mkdir -p "$BUILD" && BUILD=$(cd "$BUILD" && pwd)
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90a}
BUDGET_S=${BUDGET_S:-400}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
status=0
summary=()

if [ -x /usr/bin/gcc-13 ] && [ -x /usr/bin/g++-13 ]; then
  export CC=/usr/bin/gcc-13 CXX=/usr/bin/g++-13 CUDAHOSTCXX=/usr/bin/g++-13
fi
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || NVCC=/usr/local/cuda/bin/nvcc
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"

echo "== build ($BUILD, sm_$CUDA_ARCH, $JOBS jobs)"
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=ON -DTNN_CUDA_ARCHITECTURES="$CUDA_ARCH" \
      -DCMAKE_CUDA_COMPILER="$NVCC" -DTNN_TESTS=ON -DTNN_PYTHON=OFF -DTNN_BENCH=ON >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target tnn $([ "${SKIP_TESTS:-0}" = 1 ] || echo tnn_tests tnn_gpu_tests) \
     >>"$OUT/build.log" 2>&1; then
  summary+=("build            ok       $(elapsed) s, $(grep -c "warning" "$OUT/build.log") warning lines")
else
  tail -n 60 "$OUT/build.log"
  echo "RESULT: build FAILED (see $OUT/build.log)"
  exit 1
fi

# ok_line NAME LOG RC: one summary line from a gtest log.
ok_line() {
  local name=$1 log=$2 rc=$3 passed failed skipped
  passed=$(grep -cE "^\[       OK \]" "$log" || true)
  failed=$(grep -cE "^\[  FAILED  \] .*\(" "$log" || true)
  skipped=$(grep -cE "^\[  SKIPPED \]" "$log" || true)
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '%-16s ok       %s passed, %s skipped' "$name" "$passed" "$skipped")")
  else
    status=1
    grep -E "^\[  FAILED  \] .*\(" "$log" | head -n 40
    summary+=("$(printf '%-16s FAILED   %s passed, %s failed, exit %s (see %s)' "$name" "$passed" "$failed" "$rc" "$(basename "$log")")")
  fi
}

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== tests: CPU encodings, then the encodings on the GPU ($(elapsed) s so far)"
  timeout 120 "$BUILD/tests/tnn_tests" --gtest_filter="${CPU_TEST_FILTER:-Grid*:Encodings*:Composite*:SphericalHarmonics*}" \
    >"$OUT/tests_cpu.log" 2>&1
  ok_line "cpu tests" "$OUT/tests_cpu.log" $?
  timeout 200 "$BUILD/tests/tnn_gpu_tests" \
    --gtest_filter="${GPU_TEST_FILTER:-*EncodingBackends*:GridGpu*:CompositeGpu*:EncodingsGpu*}" \
    --gtest_output="xml:$OUT/tests_gpu.xml" >"$OUT/tests_gpu.log" 2>&1
  ok_line "gpu tests" "$OUT/tests_gpu.log" $?
  # Keep failures and totals, not every passing line.
  grep -vE "^\[ +(RUN|OK) +\]" "$OUT/tests_gpu.log" | tail -n 3000 >"$OUT/tests_gpu.tmp" && mv "$OUT/tests_gpu.tmp" "$OUT/tests_gpu.log"
fi

echo "== benchmark build"
if cmake --build "$BUILD" -j "$JOBS" --target bench_grid >>"$OUT/build.log" 2>&1; then
  bench_bin="$BUILD/bench/bench_grid"
  quick=""
  [ "${QUICK:-0}" = 1 ] && quick="--quick"
  rm -f "$OUT/bench_grid.json"  # a reused OUT must not report an old run
  if [ "${SKIP_BENCH:-0}" = 1 ]; then
    summary+=("bench            skipped  (SKIP_BENCH=1)")
  else
    echo "== benchmark: grids ($(elapsed) s so far)"
    timeout 180 "$bench_bin" --out "$OUT/bench_grid.json" $quick 2>&1 | tee "$OUT/bench_grid.log"
    if [ -s "$OUT/bench_grid.json" ]; then
      summary+=("bench            ok       $(grep -c ' ms$' "$OUT/bench_grid.log") timings ($(elapsed) s so far)")
    else
      status=1
      summary+=("bench            FAILED   see bench_grid.log")
    fi
  fi
  if [ -n "${NCU_PROFILES:-}" ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
    for spec in ${NCU_PROFILES//,/ }; do
      IFS=: read -r kernel pass order <<<"$spec"
      if [ -n "$order" ] && [ "$order" != morton ]; then
        status=1
        summary+=("$(printf '%-16s FAILED   %s: the third field can only be morton' "ncu" "$spec")")
        continue
      fi
      tag="ncu_grid_${pass}_$(echo "$kernel" | tr -c 'A-Za-z0-9_\n' '_')${order:+_$order}"
      echo "== ncu: $kernel in $pass${order:+ ($order)} ($(elapsed) s so far)"
      # KERNEL "all": every launch of the call (up to 64), speed-of-light section only, for a breakdown.
      if [ "$kernel" = all ]; then select=(-c 64 --section SpeedOfLight); else select=(-k "regex:$kernel" -c 1 --set full --import-source yes); fi
      timeout 180 "$NCU" --clock-control none --cache-control none --profile-from-start off "${select[@]}" \
        -f -o "$OUT/$tag" "$bench_bin" --profile "$pass" ${order:+--morton} \
        >"$OUT/$tag.log" 2>&1 || echo "ncu exit $? (see $tag.log)"
      if [ -s "$OUT/$tag.ncu-rep" ]; then
        "$NCU" -i "$OUT/$tag.ncu-rep" --page details >"$OUT/$tag.txt" 2>&1
        [ "$kernel" = all ] || "$NCU" -i "$OUT/$tag.ncu-rep" --page source --csv --print-source sass >"$OUT/${tag}_sass.csv" 2>&1
        rm -f "$OUT/$tag.ncu-rep"
        summary+=("$(printf '%-16s ok       %s' "ncu" "$tag")")
      else
        status=1
        summary+=("$(printf '%-16s FAILED   %s (see %s.log)' "ncu" "$tag" "$tag")")
      fi
    done
  fi
else
  tail -n 40 "$OUT/build.log"
  status=1
  summary+=("bench build      FAILED   see build.log")
fi

rm -f "$OUT/bench_grid_torch.json"  # a reused OUT must not pass an earlier run's figures off as this run's
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  left=$(( BUDGET_S - $(elapsed) ))
  compile_budget=$(( left - 60 ))
  [ $compile_budget -lt 0 ] && compile_budget=0
  echo "== baseline: PyTorch ($left s left; torch.compile budget $compile_budget s)"
  if [ $left -gt 30 ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    timeout $(( left - 10 )) python3 bench/bench_grid_torch.py --out "$OUT/bench_grid_torch.json" \
      --compile_budget_s "$compile_budget" 2>&1 | grep -vE "^\s*$" | tee "$OUT/bench_grid_torch.log" | cut -c1-200
    [ -s "$OUT/bench_grid_torch.json" ] && summary+=("torch baseline   ok       ($(elapsed) s so far)") ||
      summary+=("torch baseline   FAILED   see bench_grid_torch.log (report without it)")
  else
    summary+=("torch baseline   skipped  (no torch with CUDA, or no time left)")
  fi
fi

if [ "${SKIP_TORCH:-0}" = 1 ] && [ -n "${TORCH_FROM:-}" ]; then
  if python3 bench/reuse_torch_json.py "$TORCH_FROM" "$OUT/bench_grid_torch.json"; then
    summary+=("torch baseline   reused   from $TORCH_FROM (an earlier run on this device, same script)")
  else
    status=1
    summary+=("torch baseline   FAILED   TORCH_FROM=$TORCH_FROM is missing or not a PyTorch JSON")
  fi
fi

echo "== summary ($(elapsed) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
echo "== report ($OUT/bench_grid_report.md has the variants and smaller rows too)"
[ -s "$OUT/bench_grid.json" ] && python3 bench/bench_grid_report.py "$OUT" | tee "$OUT/report.log"
exit $status
