#!/usr/bin/env bash
# Builds the peers' virtual environments beside the repository's .venv, from the package index pip reaches:
#
#   .venv-peers     timm 1.0.31 and fastai 2.8.12 beside torch 2.14.1 / torchvision 0.29.1 (our torch: their pins
#                   allow it; a separate environment so that fastai's dependencies never reach our test suite)
#   .venv-composer  MosaicML Composer 0.32.1, which pins torch < 2.7.1 and torchvision < 0.22.1: torch 2.7.0 and
#                   torchvision 0.22.0 from the index (CUDA builds, about 3 GB of downloads; they run on a CPU)
#
#   bash benchmarks/peers/envs.sh            # both
#   bash benchmarks/peers/envs.sh peers      # only .venv-peers (what `make test` builds)
#   bash benchmarks/peers/envs.sh composer   # only .venv-composer
#
# Each environment gets a `.installed` stamp and a `versions.txt` (the versions the benchmark's results quote).
# Rebuild one by deleting its folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

build() {  # build NAME PACKAGE...
    local env=".venv-$1"
    shift
    if [[ -f "$env/.installed" ]]; then
        echo "$env: present (delete the folder to rebuild)"
        return
    fi
    echo "$env: building (pip install $*)"
    rm -rf "$env"
    "$PYTHON" -m venv "$env"
    "$env/bin/python" -m pip install -q --disable-pip-version-check "$@"
    "$env/bin/python" - > "$env/versions.txt" <<'PY'
import importlib.metadata as md
import platform
names = ["torch", "torchvision", "timm", "fastai", "fastcore", "mosaicml", "numpy", "pillow"]
found = {n: md.version(n) for n in names if any(d.metadata["Name"].lower() == n for d in md.distributions())}
print(f"python {platform.python_version()} " + " ".join(f"{n} {v}" for n, v in found.items()))
PY
    touch "$env/.installed"
    echo "$env: $(cat "$env/versions.txt")"
}

which=("$@")
[[ ${#which[@]} -gt 0 ]] || which=(peers composer)
for name in "${which[@]}"; do
    case "$name" in
        peers) build peers "torch==2.14.1" "torchvision==0.29.1" "timm==1.0.31" "fastai==2.8.12" ;;
        composer) build composer "mosaicml==0.32.1" "torch==2.7.0" "torchvision==0.22.0" ;;
        *) echo "envs.sh: unknown environment '$name' (expected peers or composer)" >&2; exit 2 ;;
    esac
done
