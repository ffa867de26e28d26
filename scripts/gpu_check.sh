#!/usr/bin/env bash
# The GPU check (`make gpu-check`): on a machine with an NVIDIA GPU, configure and build the CUDA build
# (Release, sm_90a), run the gpu-labelled and the CPU tests, `tnn info` and a short GPU fit-image, and
# print a summary table as the last lines. Files it keeps go to $OUT (at most 8, logs kept short).
#
# Environment: OUT (default out/gpu-check), BUILD (default build-gpu), JOBS (default: all cores),
# CUDA_ARCH (default 90a), GPU_TEST_JOBS (parallel GPU test processes, default 8).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90a}
GPU_TEST_JOBS=${GPU_TEST_JOBS:-8}
start=$(date +%s)

# gcc-13 where the machine has it (the CUDA 13 toolchain there is validated with it).
if [ -x /usr/bin/gcc-13 ] && [ -x /usr/bin/g++-13 ]; then
  export CC=/usr/bin/gcc-13 CXX=/usr/bin/g++-13 CUDAHOSTCXX=/usr/bin/g++-13
fi
NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || NVCC=/usr/local/cuda/bin/nvcc

failed=0
results=()  # "step|status|detail"
record() { results+=("$1|$2|$3"); [ "$2" = ok ] || [ "$2" = skipped ] || failed=1; }

# Keeps the last lines of a log (the end holds the errors and the totals).
shorten() { local f=$1 n=$2; [ -f "$f" ] && [ "$(wc -l <"$f")" -gt "$n" ] && { tail -n "$n" "$f" >"$f.tmp" && mv "$f.tmp" "$f"; }; }

echo "== configure + build ($BUILD, sm_$CUDA_ARCH, $JOBS jobs, nvcc $NVCC)"
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=ON -DTNN_CUDA_ARCHITECTURES="$CUDA_ARCH" \
      -DCMAKE_CUDA_COMPILER="$NVCC" -DTNN_TESTS=ON -DTNN_PYTHON="${TNN_PYTHON:-ON}" -DPython_EXECUTABLE="$(command -v python3)" \
      ${EXTRA_CMAKE_FLAGS:-} >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1; then
  warnings=$(grep -c "warning" "$OUT/build.log" || true)
  record build ok "$(( $(date +%s) - start )) s, $warnings warning lines"
  built=1
else
  record build FAILED "see build.log"
  built=0
fi
shorten "$OUT/build.log" 300

# Runs ctest for one label selection; fills passed/failed/skipped/failures for the summary.
run_ctest() {
  local name=$1; shift
  local log="$OUT/ctest_$name.log"
  ctest --test-dir "$BUILD" "$@" --output-on-failure --timeout 300 --output-junit "$OUT/ctest_$name.xml" >"$log" 2>&1
  local rc=$?
  local passed failed_n skipped total
  passed=$(grep -cE "Test +#[0-9]+: .* +Passed" "$log" || true)
  failed_n=$(grep -cE "Test +#[0-9]+: .*\*\*\*(Failed|Exception|Timeout)|Test +#[0-9]+: .* Child aborted" "$log" || true)
  skipped=$(grep -cE "Test +#[0-9]+: .*\*\*\*Skipped|Test +#[0-9]+: .* Not Run" "$log" || true)
  total=$(grep -oE "tests failed out of [0-9]+" "$log" | grep -oE "[0-9]+$" || echo "?")
  local failures
  failures=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E "^\s+[0-9]+ - " | sed -E 's/^\s+[0-9]+ - //' | tr '\n' ';')
  if [ $rc -eq 0 ]; then
    record "tests:$name" ok "$passed passed, $skipped skipped, 0 failed (of $total)"
  else
    record "tests:$name" FAILED "$passed passed, $skipped skipped, $failed_n failed (of $total): ${failures:-see log}"
  fi
  # Keep the failing tests' output and the totals, not every passing line.
  if [ $rc -eq 0 ]; then shorten "$log" 40; else shorten "$log" 400; fi
}

if [ "$built" = 1 ]; then
  echo "== GPU tests (label gpu, $GPU_TEST_JOBS at a time)"
  run_ctest gpu -L gpu -j "$GPU_TEST_JOBS"
  echo "== CPU tests (everything not labelled gpu)"
  run_ctest cpu -LE gpu -j "$JOBS"

  echo "== tnn info"
  if "$BUILD/tnn" info >"$OUT/tnn_info.txt" 2>&1; then
    record "tnn info" ok "$(grep -m1 -E "gpu:0" "$OUT/tnn_info.txt" | sed -E 's/^ +//')"
  else
    record "tnn info" FAILED "see tnn_info.txt"
  fi
  cat "$OUT/tnn_info.txt"

  if "$BUILD/tnn" --help 2>&1 | grep -q "fit-image"; then
    echo "== tnn fit-image --device gpu --steps 2000"
    if timeout 240 "$BUILD/tnn" fit-image --device gpu --steps 2000 --json "$OUT/fit_gpu.json" \
         --out "$BUILD/fit_gpu.png" >"$BUILD/fit_gpu.log" 2>&1; then
      record "fit-image gpu" ok "$(tail -n 1 "$BUILD/fit_gpu.log" | cut -c1-120)"
    else
      record "fit-image gpu" FAILED "$(tail -n 2 "$BUILD/fit_gpu.log" | tr '\n' ' ' | cut -c1-200)"
    fi
  else
    record "fit-image gpu" skipped "this tnn has no fit-image command"
  fi
fi

# The summary: the last lines of the output, also kept in $OUT/summary.txt.
{
  echo
  echo "== gpu_check summary ($(( $(date +%s) - start )) s, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || echo "no nvidia-smi"))"
  for r in "${results[@]}"; do
    IFS='|' read -r name st detail <<<"$r"
    printf '%-16s %-8s %s\n' "$name" "$st" "$detail"
  done
  if [ "$failed" = 0 ]; then echo "RESULT: all steps passed"; else echo "RESULT: FAILED"; fi
} | tee "$OUT/summary.txt"
exit "$failed"
