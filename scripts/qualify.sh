#!/usr/bin/env bash
# The qualification smoke in one command (docs/amd.md): clones the current commit into a scratch
# folder, builds and installs the tinycudann package from that clean clone the way the README says
# (`pip install --no-build-isolation ./python`, CMake under the hood), then runs scripts/qualify.py
# against that install from a neutral folder: the import must resolve to it, and every network
# backend the build has on the device is trained, checkpointed, reloaded in a second process and
# checked for bitwise reproducibility, prefix invariance, parameter hot-swap and two streams; unknown
# and unsupported backends must be refused; the FP16-vs-FP32 speed ratios are measured. One JSON
# evidence file and summary.txt land in the evidence folder (with install.log).
#
#   scripts/qualify.sh --evidence-dir DIR [--hip] [--device auto|cpu|cuda] [--quick] [--no-timing] [--keep]
#
# --hip: an AMD build (TNN_HIP=1) with ROCm under ROCM (default /opt/rocm) for ARCH (default gfx1201)
#        with hipBLASLt required; CMAKE_ARGS, when set, replaces those defaults.
# --keep: leave the scratch clone and install in place (their path is printed).
# Environment: PYTHON (default python3: the interpreter that has torch), JOBS (build jobs, default all
# cores), CMAKE_ARGS, TNN_CUDA / TNN_CUDA_ARCHITECTURES (python/setup.py), CC / CXX. Without --hip,
# TNN_CUDA or TNN_HIP, a machine whose torch sees no GPU (or --device cpu) builds the CPU-only package.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
evidence="" hip=0 keep=0 device=auto passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --evidence-dir) evidence=${2:?--evidence-dir needs a folder}; shift 2 ;;
    --evidence-dir=*) evidence=${1#*=}; shift ;;
    --hip) hip=1; shift ;;
    --keep) keep=1; shift ;;
    --device) device=${2:?--device needs auto, cpu or cuda}; shift 2 ;;
    --device=*) device=${1#*=}; shift ;;
    --quick|--no-timing) passthrough+=("$1"); shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "qualify.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$evidence" ] || { echo "qualify.sh: --evidence-dir DIR is required" >&2; exit 2; }
mkdir -p "$evidence" && evidence=$(cd "$evidence" && pwd)
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
if [ "$hip" = 1 ]; then
  export TNN_HIP=1
  export CMAKE_ARGS=${CMAKE_ARGS:-"-DTNN_HIP_ROCM_PATH=${ROCM:-/opt/rocm} -DTNN_HIP_ARCHITECTURES=${ARCH:-gfx1201} -DTNN_HIPBLASLT=ON"}
elif [ -z "${TNN_CUDA:-}" ] && [ "${TNN_HIP:-0}" = 0 ]; then
  # Build what will be tested: the package builds CUDA wherever nvcc is, but without a GPU for torch
  # (or with --device cpu) only the CPU backends run, so the CPU-only package is built.
  if [ "$device" = cpu ] || ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    export TNN_CUDA=0
    echo "qualify.sh: no GPU for torch here (or --device cpu): building the CPU-only package (TNN_CUDA=0)"
  fi
fi

commit=$(git -C "$root" rev-parse HEAD) || { echo "qualify.sh: $root is not a git checkout" >&2; exit 2; }
dirty=false
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
  dirty=true
  echo "qualify.sh: note: $root has uncommitted changes; the smoke tests commit $commit without them"
fi
work=$(mktemp -d /tmp/tnn-qualify.XXXXXX)
cleanup() { if [ "$keep" = 1 ]; then echo "kept: $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "== clone $commit"
if ! git clone --quiet --no-checkout "$root" "$work/src" || ! git -C "$work/src" checkout --quiet --detach "$commit"; then
  echo "RESULT: FAILED (could not clone $root at $commit)"; exit 1
fi

echo "== pip install --no-build-isolation ./python ($("$PY" --version 2>&1), torch $("$PY" -c 'import torch; print(torch.__version__)'), $JOBS jobs)"
start=$(date +%s)
(cd "$work/src" && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$PY" -m pip install --no-build-isolation --no-deps --no-cache-dir \
   --target "$work/site" ./python) >"$evidence/install.log" 2>&1
rc=$?
seconds=$(( $(date +%s) - start ))
"$PY" - "$evidence/install.json" <<EOF
import json, sys
json.dump({"method": "pip install --no-build-isolation --no-deps --target <scratch> ./python, from a fresh clone",
           "commit": "$commit", "source_repository": "$root", "source_had_uncommitted_changes": $([ "$dirty" = true ] && echo True || echo False),
           "target": "$work/site", "seconds": $seconds, "exit_status": $rc, "log": "install.log", "jobs": $JOBS,
           "TNN_HIP": "${TNN_HIP:-}", "TNN_CUDA": "${TNN_CUDA:-}", "CMAKE_ARGS": "${CMAKE_ARGS:-}"},
          open(sys.argv[1], "w"), indent=1)
EOF
if [ $rc -ne 0 ]; then
  tail -n 40 "$evidence/install.log"
  echo "RESULT: FAILED (pip install, ${seconds} s; see $evidence/install.log)"
  exit 1
fi
echo "installed in ${seconds} s"

echo "== qualify"
# From a folder outside the clone, so that only the install can be imported.
(cd "$work" && PYTHONPATH="$work/site" PYTHONDONTWRITEBYTECODE=1 "$PY" "$work/src/scripts/qualify.py" \
   --evidence-dir "$evidence" --expect-install "$work/site" --source "$work/src" \
   --install-json "$evidence/install.json" --device "$device" "${passthrough[@]}")
rc=$?
if [ $rc -eq 0 ]; then echo "RESULT: qualification passed (evidence in $evidence)"; else echo "RESULT: qualification FAILED (evidence in $evidence)"; fi
exit $rc
