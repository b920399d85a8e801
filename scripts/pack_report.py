"""Which real node packs load, here and (optionally) on ComfyUI: one server start per pack.

    python scripts/pack_report.py PACKS_DIR [--pack NAME ...] [--python PY]
                                  [--comfyui COMFYUI_DIR --comfy-python COMFY_PY] [--json OUT]

Each pack folder in PACKS_DIR is linked alone into a fresh base directory's `custom_nodes/`, the
server (`main.py` of this repository, and ComfyUI's when `--comfyui` is given) starts on a free
loopback port with `--cpu`, and `/object_info` is read once it answers: the node types whose
`python_module` is `custom_nodes.<pack>` are the pack's. The server's log gives the import error
when the pack failed (its last traceback line). Packs' requirements must already be installed in
the Python that runs each server. Prints one table row per pack; `--json` writes the details,
including the node types one side has and the other lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Side:
    """What one server made of one pack."""

    started: bool = False
    nodes: list[str] = field(default_factory=list)
    error: str | None = None  # the last line of the pack's import traceback, or why the server did not start
    seconds: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _object_info(port: int, deadline: float, proc: subprocess.Popen) -> dict | None:
    url = f"http://127.0.0.1:{port}/object_info"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    return None


def _import_error(log: str, pack: str) -> str | None:
    """The message of the first "Cannot import <pack path> module for custom nodes: <error>" line
    (both servers log a failed pack import that way; ComfyUI logs its own optional modules too)."""
    for line in log.splitlines():
        if "Cannot import" in line and "module for custom nodes:" in line and pack in line:
            return line.split("module for custom nodes:", 1)[1].strip()[:300]
    return None


def run_server(command: list[str], cwd: Path, pack: Path, timeout: float) -> Side:
    side = Side()
    with tempfile.TemporaryDirectory(prefix="pack_report_") as tmp:
        base = Path(tmp)
        (base / "custom_nodes").mkdir()
        (base / "custom_nodes" / pack.name).symlink_to(pack.resolve(), target_is_directory=True)
        port = _free_port()
        log_path = base / "server.log"
        start = time.monotonic()
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(command + ["--base-directory", str(base), "--listen", "127.0.0.1",
                                               "--port", str(port), "--cpu"],
                                    cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                info = _object_info(port, start + timeout, proc)
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        side.seconds = time.monotonic() - start
        log = log_path.read_text(errors="replace")
        if info is None:
            side.error = "server did not answer /object_info: " + " | ".join(log.strip().splitlines()[-3:])[:300]
            return side
        side.started = True
        module = f"custom_nodes.{pack.name}"
        side.nodes = sorted(name for name, node in info.items()
                            if str(node.get("python_module", "")).split(".")[:2] == module.split("."))
        side.error = _import_error(log, pack.name)
    return side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packs_dir", type=Path)
    parser.add_argument("--pack", action="append", help="only this pack folder (repeatable)")
    parser.add_argument("--python", default=sys.executable, help="Python that runs this repository's server")
    parser.add_argument("--comfyui", type=Path, help="a ComfyUI checkout to compare with")
    parser.add_argument("--comfy-python", help="the Python of that checkout's environment")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a server may take to answer")
    parser.add_argument("--json", type=Path, help="write the details here")
    parser.add_argument("--comfyui-only", action="store_true", help="run only ComfyUI's servers")
    args = parser.parse_args(argv)
    packs = sorted(p for p in args.packs_dir.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    if args.pack:
        packs = [p for p in packs if p.name in set(args.pack)]
    if args.comfyui and not args.comfy_python:
        parser.error("--comfyui needs --comfy-python")
    if args.comfyui_only and not args.comfyui:
        parser.error("--comfyui-only needs --comfyui")
    rows = []
    print(f"{'pack':40} {'ours':>6} {'ComfyUI':>8}  first error here")
    for pack in packs:
        ours = (Side(error="not run") if args.comfyui_only
                else run_server([args.python, str(REPO / "main.py")], REPO, pack, args.timeout))
        theirs = (run_server([args.comfy_python, str(args.comfyui / "main.py")], args.comfyui, pack, args.timeout)
                  if args.comfyui else None)
        row = {"pack": pack.name, "ours": asdict(ours), "comfyui": asdict(theirs) if theirs else None}
        if theirs is not None:
            row["only_comfyui"] = sorted(set(theirs.nodes) - set(ours.nodes))
            row["only_ours"] = sorted(set(ours.nodes) - set(theirs.nodes))
        rows.append(row)
        comfy = str(len(theirs.nodes)) if theirs is not None and theirs.started else ("-" if theirs is None else "down")
        mine = str(len(ours.nodes)) if ours.started else "down"
        print(f"{pack.name:40} {mine:>6} {comfy:>8}  {ours.error or ''}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
