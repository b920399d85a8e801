#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, runs the CUDA-marked tests and bench/gpu.py,
# with logs under $OUT (when set) or ./gpu_check_logs. Python packages the machine lacks can be
# carried as wheels in .whl/ (installed with --no-index into /tmp/site, first on PYTHONPATH).
# Sized to finish well inside 10 minutes: 4 sampling steps per figure. Usage:
#   bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${OUT:-gpu_check_logs}
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && .venv/bin/python -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && PY=.venv/bin/python
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: installing .whl/ failed" | tee "$LOGS/summary.txt"; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{ nvidia-smi || true; "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'; } \
    > "$LOGS/device.txt" 2>&1
cat "$LOGS/device.txt"
timeout 240 "$PY" -m pytest -m cuda -p no:cacheprovider -o addopts="" -q -rs tests/comfy_core "$@" 2>&1 | tee "$LOGS/pytest_cuda.txt"
tests_rc=${PIPESTATUS[0]}
timeout 300 "$PY" bench/gpu.py --steps 4 --json "$LOGS/bench_gpu.json" 2>&1 | tee "$LOGS/bench_gpu.txt"
bench_rc=${PIPESTATUS[0]}
echo "gpu_check: pytest -m cuda rc=$tests_rc, bench/gpu.py rc=$bench_rc" | tee "$LOGS/summary.txt"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
