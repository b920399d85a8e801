"""Restart benchmark: prints figures, asserts nothing about speed.

    .venv/bin/python bench/serve_start.py [--runs 3]

Seconds from `bash scripts/serve.sh` to the first `/object_info` answer on a machine already set
up, alternating in one run:

- `setup every time`: SETUP_FORCE=1, what serve.sh did before the setup stamp (setup.sh runs pip
  over the requirements, and tries download.pytorch.org first where the CPU build is chosen);
- `stamp matches`: serve.sh as it is (scripts/setup_stamp.py finds .venv up to date);
- `main.py alone`: `.venv/bin/python main.py`, what a restart should cost.

Each server runs on a free loopback port with a temporary base directory and is stopped once it
answers. Run it from the repository, after `bash scripts/setup.sh` (the first forced run writes
the stamp anyway). It really runs scripts/setup.sh against .venv: pip installs nothing when the
requirements are already satisfied. The 1-minute load average is printed next to each figure
(other work on the machine slows every row alike).
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_to_object_info(command: list[str], env: dict[str, str]) -> float:
    port = _free_port()
    with tempfile.TemporaryDirectory() as base:
        start = time.perf_counter()
        proc = subprocess.Popen([*command, "--port", str(port), "--base-directory", base], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{' '.join(command)} exited with status {proc.returncode} before answering")
                if time.perf_counter() - start > TIMEOUT_S:
                    raise RuntimeError(f"{' '.join(command)}: no /object_info answer within {TIMEOUT_S} s")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/object_info", timeout=5) as answer:
                        if answer.status == 200 and answer.read(1):
                            return time.perf_counter() - start
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    time.sleep(0.05)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the session this run started: serve.sh's exec'd main.py
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "SETUP_FORCE"}
    rows = {
        "serve.sh, setup every time (before)": (["bash", "scripts/serve.sh"], {**env, "SETUP_FORCE": "1"}),
        "serve.sh, stamp matches (after)": (["bash", "scripts/serve.sh"], env),
        "main.py alone": ([str(REPO / ".venv" / "bin" / "python"), "main.py"], env),
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for run in range(args.runs):
        for name, (command, run_env) in rows.items():
            seconds = time_to_object_info(command, run_env)
            figures[name].append((seconds, os.getloadavg()[0]))
            print(f"run {run + 1}: {name}: {seconds:.2f} s (load {figures[name][-1][1]:.1f})", flush=True)
    print(f"\n{os.cpu_count()} CPUs; start to the first /object_info answer, median of {args.runs}:")
    for name, values in figures.items():
        print(f"  {name:40s} {statistics.median(s for s, _ in values):7.2f} s   "
              f"(runs: {', '.join(f'{s:.2f}' for s, _ in values)}; load {', '.join(f'{l:.1f}' for _, l in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
