#!/usr/bin/env bash
# CI's compile check of the CUDA kernels for the architectures the default build covers but CI has no
# GPU for (docs/gpu.md, "GPU architectures"): every GPU translation unit of the library compiled for
# ARCHS as machine code, so that a kernel that does not build for one of them (an instruction an
# architecture lacks, a register or shared-memory limit) fails CI. Compile only, device code only: each
# source's compile command from the CMake build (flags, defines, includes as the library gets them)
# with `--fatbin` instead of `-c`, so nvcc runs the device passes (cicc and ptxas for every
# architecture) and skips the host compilation, 15% of the work, which `make test` covers. Device code
# at -O0, as `make test` compiles it: cicc and ptxas still parse, type-check and assemble every kernel
# (inline PTX included) in about half the time of the optimised build. Every run compiles every source.
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
# The objects of the CUDA sources; their commands, made to write a fat binary of device code only.
mapfile -t objects < <(ninja -C "$build" -t targets all | sed -n -E 's/^(CMakeFiles\/tnn\.dir\/[^:]*\.cu\.o): .*/\1/p')
if [ "${#objects[@]}" -eq 0 ]; then
  echo "cuda_arch_check: FAILED (no CUDA objects in $build)"; exit 1
fi
rm -rf "$build/fatbin" && mkdir -p "$build/fatbin"
for obj in "${objects[@]}"; do
  cmd=$(ninja -C "$build" -t commands "$obj" | tail -n 1)
  name=$(basename "$obj" .cu.o)
  out="fatbin/$name.fatbin"
  fatbin=$(sed -E "s# -MD -MT [^ ]+ -MF [^ ]+##; s# -c # --fatbin #; s# -o $obj( |\$)# -o $out\1#" <<<"$cmd")
  if ! grep -q -- " --fatbin .* -o $out" <<<"$fatbin"; then
    echo "cuda_arch_check: FAILED (unexpected compile command for $obj: $cmd)"; exit 1
  fi
  printf '%s || { echo "cuda_arch_check: %s FAILED"; exit 255; }\n' "$fatbin" "$name" >"$build/fatbin/$name.sh"
done
# JOBS sources at a time; the first failure stops the rest (exit 255), its output is in the log.
if ! (cd "$build" && ls fatbin/*.sh | xargs -n 1 -P "$jobs" sh) >>"$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -n 40; echo "cuda_arch_check: FAILED (CUDA compile for $archs; see $log)"; exit 1
fi
echo "cuda_arch_check: ${#objects[@]} CUDA sources compiled for $archs in $(( $(date +%s) - start )) s"
