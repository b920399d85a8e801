#!/usr/bin/env bash
# Sets up the environment and runs the whole test suite. Extra arguments go to pytest.
# Setup is skipped when .venv already matches (scripts/setup_stamp.py); CI's fresh clone has no
# .venv, so it always sets up from nothing. SETUP_FORCE=1 sets up regardless.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
exec .venv/bin/python -m pytest "$@"
