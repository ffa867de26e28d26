#!/usr/bin/env bash
# Installs the Debian packages tiny-rdna4-nn builds and tests with. Idempotent: when every
# package is already present it only asks dpkg and returns in well under a second.
# Usage: scripts/install_deps.sh [group ...]   groups: build (default), test, python, hip, fuzz
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build)

pkgs=()
for g in "${groups[@]}"; do
  case "$g" in
    # libpng and libjpeg-turbo: the tnn program's image reader (docs/reliability.md); the library
    # and the Python package need neither.
    build)  pkgs+=(build-essential cmake ninja-build nlohmann-json3-dev libcli11-dev libpng-dev libturbojpeg0-dev) ;;
    test)   pkgs+=(libgtest-dev libgmock-dev) ;;
    bench)  pkgs+=(libbenchmark-dev python3-matplotlib) ;;  # matplotlib: bench/plot_results.py only
    python) pkgs+=(python3-dev python3-pytest python3-numpy python3-torch pybind11-dev python3-pip python3-setuptools) ;;
    # clang-19 compiles HIP for gfx1201 (Debian's hipcc 5.2 does not know it); clang-tools-19 has the
    # offload bundler clang needs; llvm-19 has llvm-dis/as (device libraries) and the ISA audit's tools.
    hip)    pkgs+=(clang-19 clang-tools-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs) ;;
    # libFuzzer (clang's runtime) for the fuzz targets in fuzz/ (scripts/fuzz.sh); llvm-19 has the
    # symbolizer that puts function names and lines into sanitizer reports.
    fuzz)   pkgs+=(clang-19 libclang-rt-19-dev llvm-19) ;;
    *) echo "install_deps.sh: unknown group '$g' (valid: build test bench python hip fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps.sh: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
