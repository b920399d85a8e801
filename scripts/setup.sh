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
# torch first, alone and pinned, so no later requirement can pull a CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
if [ "${1:-}" = "--dev" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
    if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
            || echo "setup: chromium could not be installed; browser tests will be skipped" >&2
    fi
else
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
