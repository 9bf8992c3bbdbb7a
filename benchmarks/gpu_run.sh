#!/usr/bin/env bash
# On the device machine (run there by the device tool, carry [".whl", ".gpu_data"]): install the carried wheels,
# then run the GPU suite; its results land in benchmarks/results/gpu/ there and in $OUT (brought back), with the log.
# Arguments are passed to benchmarks/gpu_suite.py (e.g. --quick, --only b,c).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import kornia" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "could not install the carried wheels (.whl/): run benchmarks/gpu_prepare.sh and carry .whl"; exit 3; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
log=${OUT:-/tmp}/gpu_suite.log
python3 benchmarks/gpu_suite.py "$@" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
