#!/usr/bin/env bash
# The AMD GPU check (`make hip-gpu-check`), the HIP counterpart of scripts/gpu_check.sh, for a machine
# with an RDNA4 GPU (Radeon AI PRO R9700, RX 9070: gfx1201) and ROCm 6.3 or newer: configure and
# build the HIP build with ROCm's clang, run the gpu-labelled and the CPU tests, `tnn info` and a
# short GPU fit-image, and print a summary table as the last lines (also in $OUT/summary.txt).
# Not run in this project (it has no AMD GPU): docs/amd.md says what to send back.
#
# Environment: OUT (default out/hip-gpu-check), BUILD (default build-hip-gpu), JOBS (default: all
# cores), ROCM (default /opt/rocm), ARCH (default gfx1201), GPU_TEST_JOBS (default 4).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

OUT=${OUT:-$PWD/out/hip-gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-hip-gpu}
JOBS=${JOBS:-$(nproc)}
ROCM=${ROCM:-/opt/rocm}
ARCH=${ARCH:-gfx1201}
GPU_TEST_JOBS=${GPU_TEST_JOBS:-4}
start=$(date +%s)
failed=0
results=()
record() { results+=("$1|$2|$3"); [ "$2" = ok ] || failed=1; }

echo "== configure + build ($BUILD, $ARCH, ROCm $ROCM)"
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=OFF -DTNN_HIP=ON -DTNN_HIP_ROCM_PATH="$ROCM" \
      -DTNN_HIP_ARCHITECTURES="$ARCH" -DTNN_TESTS=ON -DTNN_PYTHON=OFF >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1; then
  record build ok "$(( $(date +%s) - start )) s"
  built=1
else
  record build FAILED "see build.log"
  built=0
fi

if [ "$built" = 1 ]; then
  for sel in "gpu:-L gpu -j $GPU_TEST_JOBS" "cpu:-LE gpu -j $JOBS"; do
    name=${sel%%:*}
    # shellcheck disable=SC2086
    ctest --test-dir "$BUILD" ${sel#*:} --output-on-failure --timeout 300 --output-junit "$OUT/ctest_$name.xml" \
      >"$OUT/ctest_$name.log" 2>&1
    rc=$?
    line=$(grep -E "tests passed, [0-9]+ tests? failed out of" "$OUT/ctest_$name.log" | tail -n 1)
    if [ $rc -eq 0 ]; then record "tests:$name" ok "$line"; else record "tests:$name" FAILED "$line"; fi
  done
  if "$BUILD/tnn" info >"$OUT/tnn_info.txt" 2>&1; then record "tnn info" ok "$(grep -m1 "gpu:0" "$OUT/tnn_info.txt")"
  else record "tnn info" FAILED "see tnn_info.txt"; fi
  if timeout 240 "$BUILD/tnn" fit-image --device gpu --steps 2000 --json "$OUT/fit_gpu.json" --out "$OUT/fit_gpu.png" \
       >"$OUT/fit_gpu.log" 2>&1; then
    record "fit-image gpu" ok "$(tail -n 1 "$OUT/fit_gpu.log" | cut -c1-120)"
  else
    record "fit-image gpu" FAILED "$(tail -n 2 "$OUT/fit_gpu.log" | tr '\n' ' ' | cut -c1-200)"
  fi
  # The audit of the code objects this machine's compiler made (compare with the summary in docs/amd.md).
  if python3 scripts/isa_audit.py "$BUILD" --arch "$ARCH" --out "$OUT/isa-audit.md" --summary "$OUT/isa-summary.md" >"$OUT/isa_audit.log" 2>&1; then
    record "isa audit" ok "$(tail -n 1 "$OUT/isa_audit.log" | cut -c1-160)"
  else
    record "isa audit" FAILED "see isa_audit.log"
  fi
fi

{
  echo
  echo "== hip_gpu_check summary ($(( $(date +%s) - start )) s, $(rocminfo 2>/dev/null | grep -m1 -oE "gfx[0-9a-f]+" || echo "no rocminfo"))"
  for r in "${results[@]}"; do
    IFS='|' read -r name st detail <<<"$r"
    printf '%-16s %-8s %s\n' "$name" "$st" "$detail"
  done
  if [ "$failed" = 0 ]; then echo "RESULT: all steps passed"; else echo "RESULT: FAILED"; fi
} | tee "$OUT/summary.txt"
exit "$failed"
