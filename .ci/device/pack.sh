#!/usr/bin/env bash
# Packs FlashInfer and the Python packages it needs on the lent H200 (Python 3.12, torch 2.11+cu130
# already there) into one folder small enough to travel in a device call's carry (64 MiB).
# Usage, from the project's root:  bash .ci/device/pack.sh [VERSION] [DEST]
#   VERSION: flashinfer-python release (default 0.7.4); DEST: folder in the checkout (default .device/fi)
# DEST is added to .git/info/exclude, so it never lands in a commit; name it in the call's carry.
# Takes ~5-8 minutes on 2 cores (zstd -19 --long over ~700 MB of FlashInfer sources); kept between runs.
set -euo pipefail
VERSION=${1:-0.7.4}
DEST=${2:-.device/fi}
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx "/${DEST%%/*}/" .git/info/exclude 2>/dev/null || echo "/${DEST%%/*}/" >> .git/info/exclude
if [[ -f "$DEST/flashinfer-$VERSION.tar.zst" ]]; then echo "$DEST already holds FlashInfer $VERSION"; du -sh "$DEST"; exit 0; fi
rm -rf "$DEST"; mkdir -p "$DEST/whl"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work" "flashinfer-python==$VERSION"
# What FlashInfer imports that the H200's image lacks (read from its Requires-Dist; the image has torch,
# numpy, click, einops, ninja, requests, tabulate, tqdm, nvidia-ml-py, packaging, cuda-bindings).
# Left out on purpose: nvidia-cutlass-dsl (its cu13 libraries are a 92 MB wheel; FlashInfer imports
# without it and turns its CuTe DSL kernels off) and nccl-extensions (communication kernels only).
python3 -m pip download -q --no-deps "${plat[@]}" -d "$DEST/whl" \
  "apache-tvm-ffi>=0.1.11,<0.2" "cuda-tile>=1.4.0" "nccl4py>=0.4.1" "nvidia-cudnn-frontend>=1.32.0" \
  "zstandard"  # the H200 image has no zstd binary: unpack.sh reads the archive with it
(cd "$work" && python3 -m zipfile -e flashinfer_python-*.whl unpacked)
tar -C "$work/unpacked" -cf - flashinfer "flashinfer_python-$VERSION.dist-info" \
  | zstd -q -19 --long=30 -T0 -o "$DEST/flashinfer-$VERSION.tar.zst"
cp "$(dirname "$0")/unpack.sh" "$DEST/unpack.sh"
du -sh "$DEST"; echo "carry: $DEST   device command prefix: source $DEST/unpack.sh;"
