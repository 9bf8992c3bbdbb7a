#!/usr/bin/env bash
# Build a separate environment with Pillow-SIMD (AVX2) for `python -m benchmarks.decoding --label pillow-simd`.
#
# The project venv (.venv) keeps stock Pillow. This makes $SIMD_VENV (default /tmp/simd-venv) from the same base
# interpreter, compiles pillow-simd into it from the sdist (PyPI has no wheels), and adds a .pth hook that appends
# the project venv's site-packages (torch, torchvision, the editable lightning_efficient, ...) *after* its own
# site-packages. So `import PIL` finds Pillow-SIMD first and everything else comes from the project venv, without
# downloading torch again. (`python -m venv --system-site-packages` would not do: it exposes the base interpreter's
# packages, not the project venv's, and any `pip install` that pulls `pillow` would replace Pillow-SIMD.)
#
# Needs: a C compiler, libjpeg(-turbo) and zlib headers (Debian: apt-get install -y gcc libjpeg62-turbo-dev
# zlib1g-dev). Usage, from the repo root:
#
#     bash benchmarks/pillow_simd_env.sh
#     /tmp/simd-venv/bin/python -m benchmarks.decoding --label pillow-simd
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT_PY="${PROJECT_PY:-$REPO/.venv/bin/python}"
SIMD_VENV="${SIMD_VENV:-/tmp/simd-venv}"
PILLOW_SIMD="${PILLOW_SIMD:-pillow-simd}"   # e.g. PILLOW_SIMD=pillow-simd==12.1.1.post0 to pin

if [ ! -x "$PROJECT_PY" ]; then
    echo "project interpreter $PROJECT_PY not found (make the project venv first, or set PROJECT_PY)" >&2
    exit 1
fi
if ! command -v cc >/dev/null; then
    echo "no C compiler: apt-get install -y gcc libjpeg62-turbo-dev zlib1g-dev" >&2
    exit 1
fi

# `python -m venv` run from a venv uses that venv's base interpreter, so the ABI matches the project venv.
"$PROJECT_PY" -m venv --clear "$SIMD_VENV"
"$SIMD_VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel

# -mavx2: Pillow-SIMD's resize/convert fast paths are compiled only when the compiler targets AVX2.
CC="cc -mavx2" "$SIMD_VENV/bin/python" -m pip install --no-cache-dir --no-binary :all: --no-deps --force-reinstall \
    "$PILLOW_SIMD"

PROJECT_SITE="$("$PROJECT_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
SIMD_SITE="$("$SIMD_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# An `import` line in a .pth file is executed at start-up; site.addsitedir *appends* the directory (and processes
# its own .pth files, e.g. the editable install of lightning_efficient), so this venv's PIL stays first.
# The name starts with "zz" so it runs after the other .pth files of this venv.
echo "import site; site.addsitedir('$PROJECT_SITE')" > "$SIMD_SITE/zz_project_venv.pth"

"$SIMD_VENV/bin/python" - <<'EOF'
import PIL, PIL.features, torch, torchvision, lightning_efficient
from lightning_efficient import pil_flavour
print("PIL:", pil_flavour(), "from", PIL.__file__)
print("libjpeg_turbo:", PIL.features.check_feature("libjpeg_turbo"), PIL.features.version_feature("libjpeg_turbo"))
print("torch", torch.__version__, "torchvision", torchvision.__version__)
assert "SIMD" in pil_flavour(), "stock Pillow shadows Pillow-SIMD: check sys.path order"
EOF
echo "ready: $SIMD_VENV/bin/python -m benchmarks.decoding --label pillow-simd"
