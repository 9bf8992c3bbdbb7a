#!/usr/bin/env bash
# Prepare, on this (CPU) machine, what the GPU suite needs on the device machine, which reaches no network:
#   .whl/       kornia and kornia_rs wheels for the device's Python 3.12 (everything else is installed there)
#   .gpu_data/  a 2,400-image subset of ../shared/data/imagenette (train split), ~25 MB
# Both are git-ignored (.git/info/exclude) and travel with `carry: [".whl", ".gpu_data"]` (64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
for d in /.whl/ /.gpu_data/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "kornia==$(python3 -c 'import importlib.metadata as m; print(m.version("kornia"))' 2>/dev/null || echo 0.9.0)" \
  "kornia_rs>=0.1.9"
src=../shared/data/imagenette/train
if [ -d "$src" ]; then
  rm -rf .gpu_data && mkdir -p .gpu_data/imagenette/train
  for cls in "$src"/*/; do
    name=$(basename "$cls"); mkdir -p ".gpu_data/imagenette/train/$name"
    find "$cls" -maxdepth 1 -type f | sort | sed -n '1,240p' | xargs -I{} cp {} ".gpu_data/imagenette/train/$name/"
  done
else
  echo "note: $src is absent; part c of the suite will need --data on the device" >&2
fi
du -sh .whl .gpu_data 2>/dev/null || true
