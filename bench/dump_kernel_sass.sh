#!/usr/bin/env bash
# Writes the SASS of the kernels whose mangled names match a pattern, from the objects of a CUDA build,
# to $OUT (one file per object), for reading instruction sequences without a profiler run. Run on a
# machine with cuobjdump (the device; CUDA 13 here has none):
#
#   OUT=dir BUILD=build-gpu SASS_OBJECTS="fully_fused_w64_f16" SASS_KERNELS="backward_kernel.*Lb1EEE" bash bench/dump_kernel_sass.sh
set -euo pipefail
: "${OUT:?set OUT}" "${BUILD:?set BUILD}"
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
mkdir -p "$OUT"
for name in ${SASS_OBJECTS:-fully_fused_w64_f16}; do
  obj=$(find "$BUILD" -name "$name.cu.o" | head -n 1)
  [ -n "$obj" ] || { echo "dump_kernel_sass: no $name.cu.o under $BUILD" >&2; exit 1; }
  "$CUOBJDUMP" -sass "$obj" | awk -v pat="${SASS_KERNELS:-.}" '
    /Function : / { keep = ($0 ~ pat) }
    keep { print }' >"$OUT/sass_$name.txt"
  echo "dump_kernel_sass: $(grep -c 'Function : ' "$OUT/sass_$name.txt") kernels of $obj -> sass_$name.txt"
done
