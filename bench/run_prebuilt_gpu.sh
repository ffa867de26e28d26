#!/usr/bin/env bash
# GPU checks from binaries built on a machine without a GPU (to spend device time on tests, not on
# compiling): the CUDA build's tnn_gpu_tests and libtnn.a, carried in PREBUILT. Runs the GPU tests in
# parallel shards, links the Python extension against libtnn.a for this machine's Python, runs the
# package's tests on CUDA tensors, then optional extra steps. Build the binaries with a CUDA build of the
# same commit (Release, the device's architecture; xz-compressed files are unpacked first): `cmake -S . -B build-cuda -G Ninja -DTNN_CUDA=ON
# -DTNN_TESTS=ON && ninja -C build-cuda tnn tnn_gpu_tests`, then copy build-cuda/libtnn.a and
# build-cuda/tests/tnn_gpu_tests (stripped) into PREBUILT.
#
# Environment: PREBUILT (default .devbin), OUT, SHARDS (8), GTEST_FILTER (default: every test),
# PYTESTS (default "."), PYTEST_ARGS (e.g. "-m gpu"), DEADLINE_S, SOAK=1 (SOAK_ARGS), SANITIZE (a gtest
# filter for scripts/gpu_sanitize.sh beside the shards; SANITIZE_TOOLS), BENCH_ARGS (bench_python.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PREBUILT=${PREBUILT:-.devbin}
OUT=${OUT:-$PWD/out/prebuilt}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
SHARDS=${SHARDS:-8}
DEADLINE_S=${DEADLINE_S:-100000}
start=$(date +%s)
left() { echo $(( DEADLINE_S - ($(date +%s) - start) )); }
status=0
nvidia-smi --query-gpu=name --format=csv,noheader
# The binaries may travel xz-compressed (the device tool carries at most 64 MiB): unpack with Python's lzma.
for f in "$PREBUILT"/*.xz; do
  [ -e "$f" ] || continue
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'), 1 << 24)" \
    "$f" "${f%.xz}" && rm -f "$f"
done

echo "== GPU tests, $SHARDS shards (beside the Python steps)"
tests="$PREBUILT/tnn_gpu_tests"
chmod +x "$tests"
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout $(( $(left) - 20 )) "$tests" \
    --gtest_filter="${GTEST_FILTER:-*}" --gtest_brief=1 >"$OUT/gpu_shard$i.log" 2>&1 &
  pids+=($!)
done
if [ -n "${SANITIZE:-}" ]; then
  sb=/tmp/tnn-sanitize-build && mkdir -p "$sb/tests" && ln -sf "$PWD/$tests" "$sb/tests/tnn_gpu_tests"
  OUT="$OUT/sanitize" TOOLS="${SANITIZE_TOOLS:-memcheck}" timeout $(( $(left) - 15 )) \
    scripts/gpu_sanitize.sh "$sb" "$SANITIZE" >"$OUT/sanitize.txt" 2>&1 &
  pids+=($!)
fi

echo "== Python extension against $PREBUILT/libtnn.a"
PY=$(command -v python3)
CXX=${CXX:-/usr/bin/g++-13}
pkg=/tmp/tnn-pkg
rm -rf "$pkg" && mkdir -p "$pkg/tinycudann"
cp python/tinycudann/*.py "$pkg/tinycudann/"
ext=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
objs=() cpids=()
for src in python/src/bindings.cpp python/src/trainer_bindings.cpp; do
  o=/tmp/$(basename "$src").o && objs+=("$o")
  "$CXX" -O2 -fPIC -std=c++17 $("$PY" -m pybind11 --includes) -Iinclude -Ipython/src -c "$src" -o "$o" \
    >>"$OUT/ext_build.log" 2>&1 &
  cpids+=($!)
done
for p in "${cpids[@]}"; do wait "$p"; done
if "$CXX" -shared "${objs[@]}" "$PREBUILT/libtnn.a" -L/usr/local/cuda/lib64 -lcudart \
    -lcublasLt -lpthread -o "$pkg/tinycudann/_C$ext" >>"$OUT/ext_build.log" 2>&1; then
  echo "extension built ($(( $(date +%s) - start )) s so far)"
  (cd tests/python && PYTHONPATH="$pkg" timeout $(( $(left) - 30 )) "$PY" -m pytest -q -rs -p no:cacheprovider \
     ${PYTEST_ARGS:-} ${PYTESTS:-.}) >"$OUT/pytest.log" 2>&1 || status=1
  tail -n 12 "$OUT/pytest.log"
  if [ -n "${SOAK:-}" ] && [ "$(left)" -gt 90 ]; then
    PYTHONPATH="$pkg" timeout $(( $(left) - 20 )) "$PY" bench/soak.py --out /tmp/soak --device cuda ${SOAK_ARGS:-} >"$OUT/soak.log" 2>&1 || status=1
    cp /tmp/soak/soak.json "$OUT/" 2>/dev/null
    tail -n 2 "$OUT/soak.log"
  fi
  if [ -n "${BENCH_ARGS:-}" ] && [ "$(left)" -gt 60 ]; then
    PYTHONPATH="$pkg" timeout $(( $(left) - 10 )) "$PY" bench/bench_python.py --out "$OUT/bench_python.json" \
      --md "$OUT/bench_python.md" $BENCH_ARGS >"$OUT/bench_python.log" 2>&1 || status=1
    cat "$OUT/bench_python.md" 2>/dev/null | head -n 20
  fi
else
  status=1
  tail -n 20 "$OUT/ext_build.log"
fi
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$OUT"/gpu_shard*.log | grep -E "^\[  FAILED  \]" | sort | uniq | head -n 40
echo "GPU tests: $(cat "$OUT"/gpu_shard*.log | grep -hoE '^\[  PASSED  \] [0-9]+' | awk '{s+=$4} END {print s}') passed, $(cat "$OUT"/gpu_shard*.log | grep -hoE '^\[  FAILED  \] [0-9]+ tests?' | awk '{s+=$4} END {print s+0}') failed, $(cat "$OUT"/gpu_shard*.log | grep -hoE '^\[  SKIPPED \] [0-9]+' | awk '{s+=$4} END {print s+0}') skipped"
[ -n "${SANITIZE:-}" ] && cat "$OUT/sanitize.txt"
echo "done in $(( $(date +%s) - start )) s"
(cd "$OUT" && tar -czf logs.tgz --remove-files $(ls *.log 2>/dev/null)) 2>/dev/null
exit $status
