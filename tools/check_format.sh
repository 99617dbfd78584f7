#!/bin/bash
# Checks (or with --fix rewrites) every C++ and CUDA source the repository tracks against its
# .clang-format, with clang-format-14 by name so the result does not depend on the machine's default
# version. Exits 1 listing the files that differ; CI runs it.
# Usage: tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=(--dry-run --Werror)
case ${1:-} in
  "") ;;
  --fix) mode=(-i) ;;
  *) echo "usage: tools/check_format.sh [--fix] (unknown argument '$1')" >&2; exit 2 ;;
esac
command -v clang-format-14 >/dev/null || { echo "check_format: clang-format-14 not found (third_party/install_deps.sh --clang)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
if [[ ${mode[0]} == -i ]]; then
  clang-format-14 -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
differ=()
for file in "${files[@]}"; do
  clang-format-14 "${mode[@]}" "$file" >/dev/null 2>&1 || differ+=("$file")
done
if [[ ${#differ[@]} -gt 0 ]]; then
  printf 'check_format: %s differs from .clang-format (tools/check_format.sh --fix)\n' "${differ[@]}" >&2
  echo "check_format: ${#differ[@]} of ${#files[@]} files differ" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files match .clang-format"
