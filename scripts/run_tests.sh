#!/usr/bin/env bash
# Runs every registered test (GoogleTest cases, pytest files) through CTest in a build folder and
# ends with one summary line: "tests: N passed, N failed, N skipped". Exit status: CTest's.
set -uo pipefail
build=${1:-build}
jobs=${2:-$(nproc)}
log="$build/ctest.log"
(cd "$build" && ctest --output-on-failure -j "$jobs") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# CTest 3.x prints "N% tests passed, F tests failed out of T"; newer versions drop ", F tests failed"
# when F is 0.
summary=$(grep -E '^[0-9]+% tests passed(, [0-9]+ tests? failed)? out of [0-9]+' "$log" | tail -n 1)
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
failed=0
grep -qE 'tests? failed' <<<"$summary" && failed=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$summary")
skipped=$(grep -cE '^\s+[0-9]+ - .*\(Skipped\)$' "$log")
if [ -z "$summary" ]; then
  echo "tests: 0 passed, 1 failed, 0 skipped (ctest did not report a summary)"
  exit 1
fi
echo "tests: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit "$status"
