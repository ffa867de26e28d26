#!/usr/bin/env bash
# Several source trees (variants of one change, e.g. experiment branches) built, tested and benchmarked
# one after the other in one device call, with one incremental build: each variant's files are synced
# into one source directory (only files whose content differs are rewritten, so ninja rebuilds only
# what the variant changes) and bench/run_mlp_bench.sh runs there with one build directory.
#
# Usage (on the device, from the repository root):
#   bash bench/device_variants.sh NAME...
# where each NAME's tree is in .export_NAME (made here with
#   mkdir .export_NAME && git archive BRANCH | tar -x -C .export_NAME && git rev-parse --short BRANCH > .export_NAME/.head
# and carried with `carry`). .deps (stb), when carried, is copied along. Results go to $OUT/NAME.tgz
# (the variant's logs, reports and JSON), and $OUT/summary.txt.
# Environment: OUT (default out/variants); everything else (GPU_TEST_FILTER, QUICK, SKIP_TORCH,
# TORCH_FROM, NCU_*) is passed on to bench/run_mlp_bench.sh. A relative TORCH_FROM is taken from the
# repository root. NCU_ONLY=NAME keeps the Nsight Compute step (NCU_SHAPES) for that variant only.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
OUT=${OUT:-$root/out/variants}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
SRC=${VARIANT_SRC:-/tmp/tnn-variant-src}
BUILD=${VARIANT_BUILD:-/tmp/tnn-variant-build}
[ -n "${TORCH_FROM:-}" ] && [ "${TORCH_FROM#/}" = "$TORCH_FROM" ] && export TORCH_FROM="$root/$TORCH_FROM"
[ $# -gt 0 ] || { echo "usage: $0 NAME... (trees in .export_NAME)"; exit 2; }

status=0
for name in "$@"; do
  tree=$root/.export_$name
  if [ ! -d "$tree" ]; then
    echo "device_variants: $tree is missing"
    echo "variant          FAILED   $tree is missing" >"$OUT/$name.summary.txt"
    status=1
    continue
  fi
  mkdir -p "$SRC"
  # Sync: rewrite changed files (fresh modification time), add new ones, remove the ones the variant lacks.
  python3 - "$tree" "$SRC" <<'EOF' || { status=1; continue; }
import filecmp, os, shutil, sys
tree, dst = sys.argv[1:]
keep = set()
for d, _, files in os.walk(tree):
    for f in files:
        rel = os.path.relpath(os.path.join(d, f), tree)
        keep.add(rel)
        target = os.path.join(dst, rel)
        if not os.path.isfile(target) or not filecmp.cmp(os.path.join(tree, rel), target, shallow=False):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(tree, rel), target)
            shutil.copymode(os.path.join(tree, rel), target)
for d, _, files in os.walk(dst):
    if os.path.relpath(d, dst).split(os.sep)[0] == ".deps":
        continue
    for f in files:
        if os.path.relpath(os.path.join(d, f), dst) not in keep:
            os.remove(os.path.join(d, f))
EOF
  [ -d "$root/.deps" ] && [ ! -d "$SRC/.deps" ] && cp -a "$root/.deps" "$SRC/"
  [ -d "$SRC/.deps/stb" ] && export STB_INCLUDE_DIR="$SRC/.deps/stb/usr/include/stb"
  echo "== variant $name ($(cat "$tree/.head" 2>/dev/null))"
  ncu=${NCU_SHAPES:-}
  [ -n "${NCU_ONLY:-}" ] && [ "$NCU_ONLY" != "$name" ] && ncu=""
  (cd "$SRC" && OUT="$OUT/$name" BUILD="$BUILD" FROM_HEAD=0 NCU_SHAPES="$ncu" bash bench/run_mlp_bench.sh) || status=1
  cp "$tree/.head" "$OUT/$name/head.txt" 2>/dev/null
  # Archived at once, so that a call cut short by its time limit still brings back the variants that
  # finished: the device tool returns only a handful of files per call. Nsight Compute's raw reports
  # (several MB each) stay behind; their text and CSV exports go.
  cp "$OUT/$name/summary.txt" "$OUT/$name.summary.txt" 2>/dev/null
  rm -f "$OUT/$name"/*.ncu-rep
  tar czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
done
echo "== variants" | tee "$OUT/summary.txt"
for name in "$@"; do
  [ -f "$OUT/$name.summary.txt" ] || continue
  { echo "-- $name ($(cat "$root/.export_$name/.head" 2>/dev/null))"; cat "$OUT/$name.summary.txt"; } | tee -a "$OUT/summary.txt"
  rm -f "$OUT/$name.summary.txt"
done
exit $status
