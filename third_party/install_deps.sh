#!/bin/bash
# Install opsnn's build, test and data dependencies from the distribution's packages, as listed once in
# third_party/debian-packages.txt; with --clang also the clang 14 toolchain of the fuzzing, sanitizer and
# formatting checks (third_party/debian-packages-clang.txt). Uses sudo only when not already root. Safe to
# run repeatedly.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lists=("$here/debian-packages.txt")
for arg in "$@"; do
  case $arg in
    --clang) lists+=("$here/debian-packages-clang.txt") ;;
    *) echo "usage: third_party/install_deps.sh [--clang] (unknown argument '$arg')" >&2; exit 2 ;;
  esac
done
pkgs=$(sed 's/#.*//' "${lists[@]}" | tr -s ' \t' '\n' | grep -v '^$')
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
missing=()
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all $(wc -w <<<"$pkgs") packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
