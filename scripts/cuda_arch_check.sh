#!/usr/bin/env bash
# CI's compile check of the CUDA kernels for the architectures the default build covers but CI has no
# GPU for (docs/gpu.md, "GPU architectures"): every GPU translation unit of the library compiled for
# ARCHS as machine code, so that a kernel that does not build for one of them (an instruction an
# architecture lacks, a register or shared-memory limit) fails CI. Compile only: no link, no tests.
# Device code at -O0, as `make test` compiles it: cicc and ptxas still parse, type-check and assemble
# every kernel (inline PTX included) for each architecture, in about half the time of the optimised
# build. The build folder is kept: later runs recompile only what changed.
# Usage: scripts/cuda_arch_check.sh [BUILD] [JOBS]     Environment: ARCHS (CMake's spelling, default
# "80-real;89-real;90a-real;120-real"), NVCC (default /usr/local/cuda/bin/nvcc or nvcc on PATH).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-cuda-archs}
jobs=${2:-$(nproc)}
archs=${ARCHS:-80-real;89-real;90a-real;120-real}
nvcc=${NVCC:-$(command -v /usr/local/cuda/bin/nvcc || command -v nvcc || true)}
if [ -z "$nvcc" ]; then
  echo "cuda_arch_check: skipped (no nvcc)"
  exit 0
fi
start=$(date +%s)
log="$build/cuda_arch_check.log"
mkdir -p "$build"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
      -DTNN_CUDA_ARCHITECTURES="$archs" "-DCMAKE_CUDA_FLAGS=-Xcicc -O0 -Xptxas -O0" \
      -DTNN_TESTS=OFF -DTNN_PYTHON=OFF >"$log" 2>&1; then
  tail -n 30 "$log"; echo "cuda_arch_check: FAILED (configure; see $log)"; exit 1
fi
# The objects of the CUDA sources only (the C++ sources do not depend on the architectures).
mapfile -t objects < <(ninja -C "$build" -t targets all | sed -n -E 's/^(CMakeFiles\/tnn\.dir\/[^:]*\.cu\.o): .*/\1/p')
if [ "${#objects[@]}" -eq 0 ]; then
  echo "cuda_arch_check: FAILED (no CUDA objects in $build)"; exit 1
fi
if ! ninja -C "$build" -j "$jobs" "${objects[@]}" >>"$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -n 40; echo "cuda_arch_check: FAILED (CUDA compile for $archs; see $log)"; exit 1
fi
echo "cuda_arch_check: ${#objects[@]} CUDA sources compiled for $archs in $(( $(date +%s) - start )) s"
