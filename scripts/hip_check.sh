#!/usr/bin/env bash
# The HIP step of `make test` (no AMD GPU needed): configures BUILD (default build-hip) with
# TNN_HIP=ON for ARCH (default gfx1201) and -Werror, compiles every GPU source as HIP, and runs the
# ISA audit (scripts/isa_audit.py), which writes BUILD/isa-audit.md (every kernel) and
# BUILD/isa-summary.md (per source; docs/amd.md shows a copy) and fails when a GPU source has no
# code object or a FullyFusedMLP kernel lacks WMMA or uses scratch. The build folder is kept: later
# runs only recompile what changed. Prints one line with the result and the time it took.
# Usage: scripts/hip_check.sh [BUILD] [JOBS]      Environment: ARCH, AUDIT_OUT (default BUILD/isa-audit.md)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-hip}
jobs=${2:-$(nproc)}
arch=${ARCH:-gfx1201}
out=${AUDIT_OUT:-$build/isa-audit.md}
start=$(date +%s)
log="$build/hip_check.log"
mkdir -p "$build"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=OFF -DTNN_HIP=ON \
      -DTNN_HIP_ARCHITECTURES="$arch" -DTNN_HIP_WERROR=ON -DTNN_TESTS=OFF -DTNN_PYTHON=OFF >"$log" 2>&1; then
  tail -n 30 "$log"; echo "hip_check: FAILED (configure; see $log)"; exit 1
fi
if ! cmake --build "$build" --target tnn_hip_objects -j "$jobs" >>"$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -n 40; echo "hip_check: FAILED (HIP compile for $arch with -Werror; see $log)"; exit 1
fi
if ! python3 scripts/isa_audit.py "$build" --arch "$arch" --out "$out" --summary "$(dirname "$out")/isa-summary.md"; then
  echo "hip_check: FAILED (ISA audit; see $out)"; exit 1
fi
echo "hip_check: HIP compile for $arch (-Werror) and ISA audit passed in $(( $(date +%s) - start )) s"
