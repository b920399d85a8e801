#!/usr/bin/env bash
# Sets up the environment and starts the server (http://127.0.0.1:8188 by default).
# Extra arguments go to main.py, e.g. --port 8190 or --listen. Setup is skipped when .venv
# already matches the requirements (scripts/setup_stamp.py), so a restart costs what main.py
# costs; SETUP_FORCE=1 sets up regardless.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python main.py "$@"
