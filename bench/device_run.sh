#!/usr/bin/env bash
# Runs on a lent GPU machine (the `device` tool): builds and checks a clean export of HEAD (so that
# colleagues' uncommitted files in the working copy cannot break it), then optional extra steps
# given as arguments (e.g. "bench/run_mlp_bench.sh", or "QUICK=1 bash bench/run_grid_bench.sh" for a
# step with its own environment). Everything lands in $OUT as summary.txt plus one .tgz per stage, to
# stay within the tool's file limits. Before the call, on the lead's machine:
#   rm -rf .export && mkdir .export && git archive HEAD | tar -x -C .export && git rev-parse --short HEAD > .export/.head
# and carry .export and .deps.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
src=/tmp/tnn-src
work=/tmp/tnn-out
rm -rf "$src" "$work" && mkdir -p "$src" "$work"
if [ -d "$repo/.export" ]; then
  # The lead's machine exports HEAD into .export (git-ignored, carried) when the copy has no .git.
  cp -a "$repo/.export/." "$src/"
  echo "device_run: using the carried export of HEAD ($(cat "$repo/.export/.head" 2>/dev/null))"
elif git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
  git -C "$repo" archive HEAD | tar -x -C "$src"
  echo "device_run: HEAD $(git -C "$repo" rev-parse --short HEAD)"
else
  cp -a "$repo/." "$src/"
  echo "device_run: no git metadata; using the working copy"
fi
[ -d "$repo/.deps" ] && cp -a "$repo/.deps" "$src/"
export STB_INCLUDE_DIR="$src/.deps/stb/usr/include/stb"
export NCCL_NVLS_ENABLE=0
cd "$src" || exit 2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
dest=${OUT:-/tmp}
OUT="$work" BUILD="$src/build-gpu" ${SKIP_CHECK:+true} bash scripts/gpu_check.sh
status=$?
# Each stage's files leave as their own archive as soon as the stage ends, so a call cut short by
# the time limit still brings back what finished.
cp "$work/summary.txt" "$dest/summary.txt" 2>/dev/null
tar -czf "$dest/check.tgz" -C "$work" . 2>/dev/null
n=0
for step in "$@"; do
  n=$((n + 1))
  echo "== extra step $n: $step"
  mkdir -p "$work/step$n"
  # A step is a script path, or "VAR=value ... bash script" when it needs its own environment
  # (e.g. the two benchmark scripts each read TORCH_FROM).
  runner=bash
  case "$step" in *=*) runner=env ;; esac
  OUT="$work/step$n" BUILD="$src/build-gpu" timeout 420 $runner $step 2>&1 | tail -n 60 | tee "$work/step$n/tail.log"
  tar -czf "$dest/step$n.tgz" -C "$work/step$n" . 2>/dev/null
done
exit $status
