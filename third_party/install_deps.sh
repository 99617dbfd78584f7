#!/bin/bash
# Install opsnn's build, test and data dependencies from the distribution's packages, as listed once in
# third_party/debian-packages.txt. Uses sudo only when not already root. Safe to run repeatedly.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkgs=$(sed 's/#.*//' "$here/debian-packages.txt" | tr -s ' \t' '\n' | grep -v '^$')
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
