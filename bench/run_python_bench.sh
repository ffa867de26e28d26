#!/usr/bin/env bash
# The Python API benchmark on a GPU machine in one go: configure and build the CUDA build (Release,
# sm_90a, the Python package; reused when BUILD is already built), optional GPU tests, then
# bench/bench_python.py (ours, PyTorch eager / torch.compile, floors) and the C++ fused step of
# 32->64->16 from bench/bench_mlp.cpp for the Trainer's comparison. Files go to $OUT.
#
# Environment: OUT (default out/python_bench), BUILD (default build-gpu), JOBS, CUDA_ARCH (90a),
# GPU_TESTS (a gtest filter for tnn_gpu_tests, or "all" for the gpu label; default: none),
# PYTESTS (pytest files under tests/python to run on CUDA; default: none), BENCH_ARGS (extra
# arguments of bench_python.py, e.g. "--no-compile --only mlp"), SKIP_BENCH=1, SOAK=1 (bench/soak.py
# on the GPU: 100,000 steps, a resume in a new process), SANITIZE=FILTER (scripts/gpu_sanitize.sh over
# the GPU tests of that gtest filter).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/python_bench}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
status=0
# DEADLINE_S: the seconds this script may take in all; a step that would start with less than its
# usual time left is skipped (and says so), so the logs are archived before an outer limit kills it.
DEADLINE_S=${DEADLINE_S:-100000}
left() { echo $(( DEADLINE_S - ($(date +%s) - start) )); }
have() { if [ "$(left)" -ge "$1" ]; then return 0; fi; echo "== skipped $2: $(left) s left"; return 1; }
if [ -x /usr/bin/gcc-13 ] && [ -x /usr/bin/g++-13 ]; then
  export CC=/usr/bin/gcc-13 CXX=/usr/bin/g++-13 CUDAHOSTCXX=/usr/bin/g++-13
fi
[ -d .deps/stb ] && export STB_INCLUDE_DIR=$PWD/.deps/stb/usr/include/stb
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
PY=$(command -v python3)

echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTNN_CUDA=ON -DTNN_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DTNN_TESTS=ON -DTNN_PYTHON=ON -DTNN_BENCH=ON -DPython_EXECUTABLE="$PY" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" --target tnn tnn_gpu_tests tinycudann_C bench_mlp >>"$OUT/build.log" 2>&1
if [ $? -ne 0 ]; then
  tail -n 60 "$OUT/build.log"
  echo "RESULT: build FAILED"
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s"

if [ -n "${GPU_TESTS:-}" ]; then
  echo "== GPU tests: $GPU_TESTS"
  if [ "$GPU_TESTS" = all ]; then
    timeout $(( $(left) - 200 )) ctest --test-dir "$BUILD" -L gpu -LE python -j 8 --timeout 300 >"$OUT/gpu_tests.log" 2>&1 || status=1
    tail -n 12 "$OUT/gpu_tests.log"
  else
    "$BUILD/tests/tnn_gpu_tests" --gtest_filter="$GPU_TESTS" >"$OUT/gpu_tests.log" 2>&1 || status=1
    grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" "$OUT/gpu_tests.log" | tail -n 20
  fi
fi
if [ -n "${PYTESTS:-}" ] && have 90 pytest; then
  echo "== pytest (CUDA): $PYTESTS"
  (cd tests/python && PYTHONPATH="$PWD/../../$BUILD/python" timeout $(( $(left) - 60 )) "$PY" -m pytest -q -rs -p no:cacheprovider $PYTESTS) \
    >"$OUT/pytest.log" 2>&1 || status=1
  tail -n 15 "$OUT/pytest.log"
fi
if [ -n "${SOAK:-}" ] && have 100 soak; then
  echo "== soak ($(( $(date +%s) - start )) s so far)"
  PYTHONPATH="$PWD/$BUILD/python" PYTHONUNBUFFERED=1 timeout $(( $(left) - 30 )) "$PY" bench/soak.py --out /tmp/soak --device cuda \
    >"$OUT/soak.log" 2>&1 || status=1
  cp /tmp/soak/soak.json "$OUT/soak.json" 2>/dev/null
  tail -n 3 "$OUT/soak.log"
fi
if [ -z "${SKIP_BENCH:-}" ] && have 120 bench; then
  echo "== bench_python.py ($(( $(date +%s) - start )) s so far)"
  PYTHONPATH="$PWD/$BUILD/python" PYTHONUNBUFFERED=1 timeout $(( $(left) - 40 )) "$PY" bench/bench_python.py --out "$OUT/bench_python.json" \
    --md "$OUT/bench_python.md" ${BENCH_ARGS:-} >"$OUT/bench_python.log" 2>&1 || status=1
  cat "$OUT/bench_python.md" 2>/dev/null || tail -n 30 "$OUT/bench_python.log"
  echo "== C++ fused step, 32->64->16 (bench_mlp)"
  "$BUILD/bench/bench_mlp" --out "$OUT/bench_mlp_fused.json" --only "32->64->16" --pass train_fused --quick 2>&1 | tail -n 4
fi
if [ -n "${SANITIZE:-}" ] && have 60 sanitize; then
  echo "== compute-sanitizer over $SANITIZE ($(( $(date +%s) - start )) s so far)"
  OUT="$OUT/sanitize" timeout $(( $(left) - 15 )) bash scripts/gpu_sanitize.sh "$BUILD" "$SANITIZE" >"$OUT/sanitize.log" 2>&1 || status=1
  tail -n 12 "$OUT/sanitize.log"
fi
echo "done in $(( $(date +%s) - start )) s"
# The logs leave as one archive (the device tool brings back at most 8 files).
(cd "$OUT" && tar -czf logs.tgz --remove-files $(ls *.log 2>/dev/null) $(ls -d sanitize 2>/dev/null)) 2>/dev/null
exit $status
