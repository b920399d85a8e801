#!/usr/bin/env bash
# Sets up the environment and starts the server (http://127.0.0.1:8188 by default).
# Extra arguments go to main.py, e.g. --port 8190 or --listen.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python main.py "$@"
