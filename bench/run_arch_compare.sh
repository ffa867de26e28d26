#!/usr/bin/env bash
# The suite and the FullyFusedMLP benchmark on one NVIDIA GPU with builds for other architecture lists
# (issue #50): by default "90" (sm_90 machine code without 90a: the mma.sync FullyFusedMLP kernels, as
# every GPU but Hopper runs them) and "90a" (the default for Hopper, with the wgmma kernels). Each
# architecture list gets its own build folder and $OUT/arch-<list>/: scripts/gpu_check.sh (every GPU and
# CPU test, tnn info, a GPU fit-image), then bench/run_mlp_bench.sh (QUICK, no PyTorch) on the same build.
# With two or more lists done, bench/arch_compare_report.py writes $OUT/arch_compare.md: each benchmark
# row's time per build and the ratio to the first. One list takes about as long as `make gpu-check`
# plus a minute (about 7 minutes on an H200), so on a device limited to 10 minutes a call, give one
# list per call and run the report where the folders came back:
#   ARCHS=90 bash bench/run_arch_compare.sh      (then ARCHS=90a ...)
#   python3 bench/arch_compare_report.py out/arch_compare/arch-90a out/arch_compare/arch-90
# ARCHS="80" builds compute_80 PTX only for an sm_90 GPU: the driver compiles it at load, and the
# kernels run their pre-sm_90 code paths (per-value atomics, no bulk reductions, no L2 hints) on it.
# Environment: ARCHS (space-separated lists in CMake's spelling, default "90 90a"), OUT (default
# out/arch_compare), JOBS, BUILD_PREFIX (default build-arch-), GPU_TEST_JOBS; SKIP_BENCH=1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/arch_compare}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ARCHS=${ARCHS:-90 90a}
BUILD_PREFIX=${BUILD_PREFIX:-build-arch-}
status=0
done_dirs=()
for arch in $ARCHS; do
  tag=$(echo "$arch" | tr ';' '_')
  dir="$OUT/arch-$tag"
  build="$PWD/$BUILD_PREFIX$tag"
  mkdir -p "$dir"
  echo "== TNN_CUDA_ARCHITECTURES=$arch: scripts/gpu_check.sh ($build)"
  OUT="$dir" BUILD="$build" CUDA_ARCH="$arch" bash scripts/gpu_check.sh || status=1
  if [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "== TNN_CUDA_ARCHITECTURES=$arch: bench/run_mlp_bench.sh (QUICK, no PyTorch)"
    OUT="$dir/bench" BUILD="$build" CUDA_ARCH="$arch" FROM_HEAD=0 SKIP_TESTS=1 SKIP_TORCH=1 QUICK=1 \
      bash bench/run_mlp_bench.sh >"$dir/bench.log" 2>&1 || status=1
    tail -n 12 "$dir/bench.log"
    [ -s "$dir/bench/bench_mlp.json" ] && done_dirs+=("$dir")
  fi
done
if [ "${#done_dirs[@]}" -ge 2 ]; then
  python3 bench/arch_compare_report.py "${done_dirs[@]}" | tee "$OUT/arch_compare.md" || status=1
fi
echo "== run_arch_compare: $([ $status = 0 ] && echo "all steps passed" || echo "FAILED (see $OUT/arch-*/summary.txt)")"
exit $status
