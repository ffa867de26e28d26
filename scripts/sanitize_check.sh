#!/usr/bin/env bash
# The CPU test suite (GoogleTest, label `cpu`, including the tests that run the `tnn` program) built
# with AddressSanitizer + UndefinedBehaviorSanitizer in its own build folder. Any report fails the
# test that triggered it: undefined behaviour aborts (-fno-sanitize-recover), leaks are checked at exit.
# Usage: scripts/sanitize_check.sh [build folder (build-asan)] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
jobs=${2:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTNN_CUDA=OFF -DTNN_HIP=OFF -DTNN_TESTS=ON \
  -DTNN_PYTHON=OFF -DTNN_SANITIZE=address,undefined >/dev/null
cmake --build "$build" -j "$jobs" --target tnn_tests tnn_app
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
(cd "$build" && ctest -L cpu --output-on-failure -j "$jobs")
