#!/usr/bin/env bash
# compute-sanitizer over the GPU test suite (docs/reliability.md), for a machine with an NVIDIA GPU:
# memcheck (with leak checking), racecheck, initcheck and synccheck, each over the gpu tests of an
# existing CUDA build. One line per tool at the end: errors reported, tests run, seconds; the full
# logs go to $OUT. Exit status 1 when any tool reports an error or a test fails under it.
#
# Usage: scripts/gpu_sanitize.sh [build folder (build-gpu)] [gtest filter (all gpu tests)]
# Environment: OUT (default out/gpu-sanitize), TOOLS (default "memcheck racecheck initcheck synccheck").
# The filter names the representative subset when the whole suite is too slow under a tool, e.g.
# 'Qualification*:*Trainer*:*Encoding*:*FullyFused*' (record the one used in docs/reliability.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-gpu}
filter=${2:-*}
OUT=${OUT:-$PWD/out/gpu-sanitize}
TOOLS=${TOOLS:-memcheck racecheck initcheck synccheck}
mkdir -p "$OUT"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tests="$build/tests/tnn_gpu_tests"
[ -x "$sanitizer" ] || { echo "gpu_sanitize: compute-sanitizer not found"; exit 2; }
[ -x "$tests" ] || { echo "gpu_sanitize: $tests not built (make gpu-check builds it)"; exit 2; }

status=0
summary=()
for tool in $TOOLS; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  log="$OUT/$tool.log"
  start=$(date +%s)
  "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 20 \
    "$tests" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  errors=$(sed -nE 's/^========= ERROR SUMMARY: ([0-9]+) error.*/\1/p' "$log" | tail -n 1)
  ran=$(sed -nE 's/^\[==========\] ([0-9]+) tests? from .* ran.*/\1/p' "$log" | tail -n 1)
  failed=$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log" || true)
  [ "$rc" -eq 0 ] || status=1
  summary+=("$tool: ${errors:-?} errors, ${ran:-?} tests run, $failed failed, $(( $(date +%s) - start )) s (exit $rc)")
done
printf '%s\n' "filter: $filter" "${summary[@]}"
exit "$status"
