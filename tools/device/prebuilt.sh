#!/bin/bash
# Runs prebuilt binaries on the GPU machine instead of building there (each device call then saves the
# ~80 s build; device time is the scarce part of a session).
#
#   here:   bash tools/device/prebuilt.sh pack     (after the GPU machine's staging script has staged .device/)
#           builds opsnn-tests, opsnn-bench and opsnn-train into build-dev/ for any x86-64 CPU
#           (-DOPSNN_NATIVE=OFF) and Hopper GPUs, strips and xz-compresses them into .device/bin (about
#           20 MB), and keeps of the staged Debian packages only the runtime ones below (the staging
#           script also stages cmake, the -dev packages and their tools: 85 MB, over the 64 MiB a device
#           call carries; what stays is about 57 MB)
#   here:   bash tools/device/prebuilt.sh pack --no-dataset
#           the same without the Fashion-MNIST package (31 MB), which only the quick start reads: the
#           three binaries and the runtime libraries then fit the carry limit with room to spare
#   there:  bash tools/device/prebuilt.sh unpack && source .device/env.sh   (carry [".device"])
#           unpacks the staged Debian packages into /tmp/deps (runtime libraries, Fashion-MNIST), and
#           the binaries into build-dev/ as the build left them: the tests find the tools through
#           OPSNN_BINARY_DIR, which is this checkout's build-dev on both machines. Every call that carries
#           .device gets a fresh copy of it (without env.sh), so each such call unpacks again (seconds).
set -euo pipefail
binaries=(tests/opsnn-tests opsnn-bench opsnn-train)
# The packages the binaries load at run time, and the quick start's data set.
runtime_debs=(dataset-fashion-mnist libdnnl2 libfmt9 libpng16-16 libspdlog1.10 libturbojpeg0 libyaml-cpp0.7
              ocl-icd-libopencl1)
case "${1:-}" in
  pack)
    if [[ "${2:-}" == --no-dataset ]]; then
      runtime_debs=("${runtime_debs[@]/dataset-fashion-mnist/}")
    elif [[ -n "${2:-}" ]]; then
      echo "prebuilt.sh: pack takes only --no-dataset, not '$2'" >&2
      exit 2
    fi
    [[ -d .device/debs ]] || { echo "prebuilt.sh: run the GPU staging script first (no .device/debs)" >&2; exit 2; }
    cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPSNN_WITH_CUDA=ON -DOPSNN_NATIVE=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
    cmake --build build-dev --target opsnn-tests opsnn-bench opsnn-train
    for f in .device/debs/*.deb; do
      name=$(basename "$f"); name=${name%%_*}
      [[ " ${runtime_debs[*]} " == *" $name "* ]] || rm "$f"
    done
    mkdir -p .device/bin
    rm -f .device/bin/*
    for b in "${binaries[@]}"; do
      strip -o ".device/bin/$(basename "$b")" "build-dev/$b"
      xz -6 -T2 -f ".device/bin/$(basename "$b")"
    done
    du -ch .device/debs .device/bin | tail -1
    ;;
  unpack)
    [[ -d .device/bin ]] || { echo "prebuilt.sh: no .device/bin (run 'prebuilt.sh pack' here and carry .device)" >&2; exit 2; }
    deps=/tmp/deps
    mkdir -p "$deps" /usr/share/datasets build-dev/tests
    for f in .device/debs/*.deb; do dpkg -x "$f" "$deps"; done
    [[ -e /usr/share/datasets/fashion-mnist || ! -e "$deps/usr/share/datasets/fashion-mnist" ]] || ln -s "$deps/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist
    for b in "${binaries[@]}"; do
      xz -dc ".device/bin/$(basename "$b").xz" > "build-dev/$b"
      chmod +x "build-dev/$b"
    done
    echo "export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" > .device/env.sh
    ;;
  *)
    echo "usage: bash tools/device/prebuilt.sh pack [--no-dataset]|unpack (see the comment at the top)" >&2
    exit 2
    ;;
esac
