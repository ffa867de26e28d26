#!/usr/bin/env bash
# Makes the device-library folder a HIP build passes to clang (--rocm-device-lib-path): links to every
# bitcode library of the system's ROCm device libs, plus an oclc_isa_version_<N>.bc for each target
# that they lack. Debian 12's rocm-device-libs (5.2) stop at gfx1036; the ISA-version library only
# defines one constant (__oclc_ISA_version = major*1000 + minor*100 + stepping), so it is derived from
# the gfx1030 one by changing that constant. Nothing is downloaded.
# Usage: scripts/hip_device_libs.sh SYSTEM_BITCODE_DIR OUT_DIR LLVM_DIS LLVM_AS ARCH...   (ARCH: gfx1201 ...)
set -euo pipefail
src=$1 out=$2 dis=$3 as=$4
shift 4
mkdir -p "$out"
for f in "$src"/*.bc; do ln -sfn "$f" "$out/$(basename "$f")"; done
for arch in "$@"; do
  num=${arch#gfx}
  lib="$out/oclc_isa_version_$num.bc"
  [ -e "$src/oclc_isa_version_$num.bc" ] && continue
  # gfx1201 -> 12 0 1 -> 12001; gfx1100 -> 11000 (major is every digit but the last two).
  major=${num:0:${#num}-2} minor=${num:${#num}-2:1} step=${num:${#num}-1:1}
  value=$((major * 1000 + 16#$minor * 100 + 16#$step))
  tmp="$lib.tmp.ll"
  "$dis" "$src/oclc_isa_version_1030.bc" -o - | sed -E "s/constant i32 10300,/constant i32 $value,/" >"$tmp"
  grep -q "constant i32 $value," "$tmp" || { echo "hip_device_libs.sh: unexpected oclc_isa_version_1030.bc" >&2; exit 1; }
  "$as" "$tmp" -o "$lib.tmp"
  mv "$lib.tmp" "$lib"
  rm -f "$tmp"
done
