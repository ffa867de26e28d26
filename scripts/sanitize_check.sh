#!/usr/bin/env bash
# The CPU test suite (GoogleTest, label `cpu`, including the tests that run the `tnn` program) built
# with AddressSanitizer + UndefinedBehaviorSanitizer in its own build folder. Any report fails the
# test that triggered it: undefined behaviour aborts (-fno-sanitize-recover), leaks are checked at exit.
# clang-19 (install_deps.sh fuzz or hip) at -O1 with line tables compiles the suite about 3x faster
# than GCC at -O2 -g; assertions stay on (no NDEBUG), so the JSON library's checks run too.
# Usage: scripts/sanitize_check.sh [build folder (build-asan)] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
jobs=${2:-$(nproc)}
cxx=${SANITIZE_CXX:-$(command -v clang++-19 || command -v c++)}
sym=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
[ -z "$sym" ] || export ASAN_SYMBOLIZER_PATH="$sym"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTNN_CUDA=OFF -DTNN_HIP=OFF -DTNN_TESTS=ON -DTNN_PYTHON=OFF \
  -DTNN_SANITIZE=address,undefined >/dev/null
cmake --build "$build" -j "$jobs" --target tnn_tests tnn_app
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
(cd "$build" && ctest -L cpu --output-on-failure -j "$jobs")
