#!/usr/bin/env bash
# Installs the tinycudann package the way the README says (`python3 -m pip install
# --no-build-isolation ./python`, CMake under the hood, CUDA when nvcc is found) into a scratch folder
# and runs the Python tests against that installed copy, not the in-tree one of the CMake build
# (issue #5: the same package on Debian's python3 and on the H200's python3.12 with torch 2.11).
#
# Environment: PYTHON (default python3; Debian: /usr/bin/python3), OUT (default out/pip-check; pip.log and
# pytest.log go there), JOBS (default: all cores),
# TESTS (default: every tests/python/test_*.py).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/out/pip-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
JOBS=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}
if [ -x /usr/bin/gcc-13 ] && [ -x /usr/bin/g++-13 ]; then
  export CC=/usr/bin/gcc-13 CXX=/usr/bin/g++-13 CUDAHOSTCXX=/usr/bin/g++-13
fi
target=$(mktemp -d /tmp/tnn-pip.XXXXXX)
start=$(date +%s)
echo "== pip install --no-build-isolation ./python ($("$PY" --version), torch $("$PY" -c 'import torch; print(torch.__version__)'))"
if ! CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$PY" -m pip install --no-build-isolation --no-deps --no-cache-dir \
       --target "$target" ./python >"$OUT/pip.log" 2>&1; then
  tail -n 40 "$OUT/pip.log"
  echo "RESULT: pip install FAILED ($(( $(date +%s) - start )) s, see pip.log)"
  exit 1
fi
echo "installed in $(( $(date +%s) - start )) s: $(ls "$target" | tr '\n' ' ')"
# The tests import tinycudann from the installed folder only (the source tree's python/ is not on the path).
cd tests/python || exit 2
# shellcheck disable=SC2086
PYTHONPATH="$target" PYTHONDONTWRITEBYTECODE=1 "$PY" -c \
  'import tinycudann, sys; print("tinycudann from", tinycudann.__file__); sys.exit(0 if tinycudann.__file__.startswith(sys.argv[1]) else 1)' \
  "$target" || { echo "RESULT: FAILED (tinycudann was not imported from the installed copy)"; exit 1; }
PYTHONPATH="$target" PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -rs -p no:cacheprovider ${TESTS:-test_*.py} \
  >"$OUT/pytest.log" 2>&1
rc=$?
tail -n 25 "$OUT/pytest.log"
if [ $rc -eq 0 ]; then echo "RESULT: pip install and pytest passed ($(( $(date +%s) - start )) s)"; else echo "RESULT: pytest FAILED"; fi
exit $rc
