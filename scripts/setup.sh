#!/usr/bin/env bash
# Creates .venv (once) and installs the runtime requirements; with --dev also the test tools
# and Debian's Chromium for the browser tests. Safe to run repeatedly: pip is quick when
# everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# torch and torchvision first, alone and pinned together, so no later requirement can pull
# another build (they run on the CPU here and on NVIDIA GPUs elsewhere).
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
if [ "${1:-}" = "--dev" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
    if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
            || echo "setup: chromium could not be installed; browser tests will be skipped" >&2
    fi
else
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
