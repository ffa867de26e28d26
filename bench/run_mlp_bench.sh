#!/usr/bin/env bash
# FullyFusedMLP on an NVIDIA GPU in one go (issue #6): build (Release, sm_90a), the CPU layout tests and
# the FullyFusedMLP GPU tests, then bench/bench_mlp.cpp (ours), bench/bench_mlp_torch.py (PyTorch
# eager / torch.compile) and bench/bench_mlp_report.py (floors, tcnn figures, targets). Everything
# goes to $OUT (bench_mlp_report.md / .json, raw JSON, logs); the last lines printed are the table
# and a summary. Designed to finish in under 7 minutes on one H200 (also as an extra step of
# bench/device_run.sh, which gives it 420 s).
#
# Environment: OUT (default out/mlp_bench), BUILD (default build-mlp; reused incrementally), FROM_HEAD
# (default 1: build a clean export of HEAD unless BUILD is already configured),
# JOBS (default: all cores), CUDA_ARCH (default 90a), GPU_TEST_FILTER (default '*FullyFused*'), BUDGET_S (default 390: total wall time the
# script plans for), SKIP_TESTS=1, SKIP_TORCH=1, QUICK=1 (no variant sweep), TORCH_FROM=FILE (reuse a
# bench_mlp_torch.json measured earlier on the same device instead of running PyTorch, e.g.
# tests/python/data/bench_mlp_torch_h200.json, when the device time is short).
# NCU_SHAPES="32->64->16;64->64->64" also profiles the first inference (forward) and backward kernel of
# each shape at the benchmark batch with Nsight Compute (--set full, clocks left alone) into
# $OUT/ncu_*.txt (details and per-SASS-line stall samples); SKIP_BENCH=1 then skips the timings.
# NCU_KERNELS (default "forward backward") picks the kernels, NCU_PASS (e.g. fused_loss_bwd) the
# benchmark pass whose first launch is profiled (default: the shape's first launch of each kernel).
# EXTRA_CMAKE_FLAGS go to the configure step. (ncu's CSV source page gives no per-line metrics even
# with -lineinfo; bench/ncu_sass_summary.py reads the per-SASS export instead.)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/mlp_bench}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# Build a clean export of HEAD (FROM_HEAD=0: the working copy as it is), so that colleagues'
# uncommitted files in a shared checkout cannot break the build; the build directory stays outside.
# A BUILD that is already configured (bench/device_run.sh passes its own, from its own export of
# HEAD) is used with the checkout this script runs from.
[ -n "${BUILD:-}" ] && [ -f "$BUILD/CMakeCache.txt" ] && FROM_HEAD=0
# Without .git (the device copy), the export the lead carries in .export (see bench/device_run.sh).
if [ "${FROM_HEAD:-1}" = 1 ] && { [ -d .export ] || git rev-parse HEAD >/dev/null 2>&1; }; then
  export_dir=/tmp/tnn-mlp-bench-src
  rm -rf "$export_dir" && mkdir -p "$export_dir"
  if [ -d .export ]; then
    cp -a .export/. "$export_dir/"
    echo "run_mlp_bench: carried export of HEAD $(cat .export/.head 2>/dev/null) in $export_dir"
  else
    git archive HEAD | tar -x -C "$export_dir"
    echo "run_mlp_bench: HEAD $(git rev-parse --short HEAD), exported to $export_dir"
  fi
  [ -d .deps ] && cp -a .deps "$export_dir/"
  [ -d "$export_dir/.deps/stb" ] && export STB_INCLUDE_DIR="$export_dir/.deps/stb/usr/include/stb"
  BUILD=${BUILD:-$PWD/build-mlp}
  mkdir -p "$BUILD" && BUILD=$(cd "$BUILD" && pwd)
  OUT="$OUT" BUILD="$BUILD" FROM_HEAD=0 exec bash "$export_dir/bench/run_mlp_bench.sh"
fi
BUILD=${BUILD:-build-mlp}
mkdir -p "$BUILD" && BUILD=$(cd "$BUILD" && pwd)
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90a}
BUDGET_S=${BUDGET_S:-390}
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
      -DCMAKE_CUDA_COMPILER="$NVCC" -DTNN_TESTS=ON -DTNN_PYTHON=OFF -DTNN_BENCH=ON ${EXTRA_CMAKE_FLAGS:-} >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target tnn $([ "${SKIP_TESTS:-0}" = 1 ] || echo tnn_tests tnn_gpu_tests) \
     >>"$OUT/build.log" 2>&1; then
  summary+=("build            ok       $(elapsed) s")
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
  echo "== tests: CPU layout / planner, then FullyFusedMLP on the GPU"
  timeout 60 "$BUILD/tests/tnn_tests" --gtest_filter='FusedLayout*:FusedPlan*:FullyFusedMLP*' >"$OUT/tests_cpu.log" 2>&1
  ok_line "cpu tests" "$OUT/tests_cpu.log" $?
  timeout 200 "$BUILD/tests/tnn_gpu_tests" --gtest_filter="${GPU_TEST_FILTER:-*FullyFused*}" --gtest_output="xml:$OUT/tests_gpu.xml" \
    >"$OUT/tests_gpu.log" 2>&1
  ok_line "gpu tests" "$OUT/tests_gpu.log" $?
  # Keep failures and totals, not every passing line.
  grep -vE "^\[ +(RUN|OK) +\]" "$OUT/tests_gpu.log" | tail -n 3000 >"$OUT/tests_gpu.tmp" && mv "$OUT/tests_gpu.tmp" "$OUT/tests_gpu.log"
fi

echo "== benchmark build"
if cmake --build "$BUILD" -j "$JOBS" --target bench_mlp >>"$OUT/build.log" 2>&1; then
  bench_bin="$BUILD/bench/bench_mlp"
  if [ -n "${NCU_SHAPES:-}" ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
    IFS=';' read -r -a ncu_shapes <<<"$NCU_SHAPES"
    for shape in "${ncu_shapes[@]}"; do
      for kernel in ${NCU_KERNELS:-forward backward}; do
        tag="ncu_$(echo "$shape" | tr -c '0-9a-z' '_')_$kernel${NCU_PASS:+_$NCU_PASS}"
        echo "== ncu: $shape $kernel ($(elapsed) s so far)"
        timeout 120 "$NCU" --clock-control none -k "regex:fully_fused_mlp_${kernel}" -c 1 --set full \
          --import-source yes -f -o "$OUT/$tag" "$bench_bin" --out /tmp/ncu_bench.json --only "$shape" \
          --rounds 1 --round_ms 1 --quick ${NCU_PASS:+--pass "$NCU_PASS"} >"$OUT/$tag.log" 2>&1 || echo "ncu exit $? (see $tag.log)"
        if [ -s "$OUT/$tag.ncu-rep" ]; then
          "$NCU" -i "$OUT/$tag.ncu-rep" --page details >"$OUT/$tag.txt" 2>&1
          "$NCU" -i "$OUT/$tag.ncu-rep" --page source --csv --print-source sass >"$OUT/${tag}_sass.csv" 2>&1
          summary+=("$(printf '%-16s ok       %s' "ncu" "$tag")")
        else
          summary+=("$(printf '%-16s FAILED   %s (see %s.log)' "ncu" "$tag" "$tag")")
        fi
      done
    done
  fi
  echo "== benchmark: FullyFusedMLP ($(elapsed) s so far)"
  quick=""
  [ "${QUICK:-0}" = 1 ] && quick="--quick"
  [ "${SKIP_BENCH:-0}" = 1 ] || timeout 150 "$bench_bin" --out "$OUT/bench_mlp.json" $quick 2>&1 | tee "$OUT/bench_mlp.log"
  if [ "${SKIP_BENCH:-0}" = 1 ]; then
    summary+=("bench            skipped  (SKIP_BENCH=1)")
  elif [ -s "$OUT/bench_mlp.json" ]; then
    summary+=("bench            ok       $(grep -c ' ms ' "$OUT/bench_mlp.log") timings ($(elapsed) s so far)")
  else
    status=1
    summary+=("bench            FAILED   see bench_mlp.log")
  fi
else
  tail -n 40 "$OUT/build.log"
  status=1
  summary+=("bench build      FAILED   see build.log")
fi

rm -f "$OUT/bench_mlp_torch.json"  # a reused OUT must not pass an earlier run's figures off as this run's
if [ -n "${TORCH_FROM:-}" ]; then
  if python3 bench/reuse_torch_json.py "$TORCH_FROM" "$OUT/bench_mlp_torch.json"; then
    summary+=("torch baseline   reused   $TORCH_FROM")
  else
    status=1
    summary+=("torch baseline   FAILED   TORCH_FROM=$TORCH_FROM is missing or not a PyTorch JSON")
  fi
elif [ "${SKIP_TORCH:-0}" != 1 ]; then
  left=$(( BUDGET_S - $(elapsed) ))
  compile_budget=$(( left - 90 ))
  [ $compile_budget -lt 0 ] && compile_budget=0
  echo "== baseline: PyTorch ($left s left; torch.compile budget $compile_budget s)"
  if [ $left -gt 40 ] && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    timeout $(( left - 15 )) python3 bench/bench_mlp_torch.py --out "$OUT/bench_mlp_torch.json" \
      --compile_budget_s "$compile_budget" 2>&1 | grep -vE "^\s*$" | tee "$OUT/bench_mlp_torch.log" | cut -c1-200
    [ -s "$OUT/bench_mlp_torch.json" ] && summary+=("torch baseline   ok       ($(elapsed) s so far)") ||
      summary+=("torch baseline   FAILED   see bench_mlp_torch.log (report without it)")
  else
    summary+=("torch baseline   skipped  (no torch with CUDA, or no time left)")
  fi
fi

echo "== summary ($(elapsed) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
echo "== report ($OUT/bench_mlp_report.md has the warps sweep too)"
[ -s "$OUT/bench_mlp.json" ] && python3 bench/bench_mlp_report.py "$OUT" | tee "$OUT/report.log"
exit $status
