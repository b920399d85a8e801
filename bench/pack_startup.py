"""Start-up with many real node packs, ours against ComfyUI (issue 33): prints figures, asserts nothing.

    python bench/pack_startup.py --packs-dir DIR [--packs-dir DIR2] --comfyui COMFYUI_DIR \\
        --comfy-python PY [--python PY] [--before OLD_CHECKOUT] [--runs 3] [--warmup 1] [--packs NAME ...]

e.g. on the development machine (the packs' requirements live in the packvenv environment):

    /work/scratch/packvenv/bin/python bench/pack_startup.py --packs-dir /work/scratch/packs \\
        --packs-dir /work/scratch/packs2 --comfyui /work/scratch/comfyui \\
        --comfy-python /work/scratch/packvenv/bin/python --runs 3

The packs (by default `DEFAULT_PACKS`: 36 popular packs that load alone on both servers, see
docs/pack-report.md and docs/packs.md; `--packs` names others) are linked into one temporary
base directory's `custom_nodes/` per side, kept for all of that side's runs (a restart, as on a
machine that has served before: ours then finds the pack record its last start left in `user/`,
web/pack_start.py, and answers before the packs import). Each run is a fresh process of `main.py
--cpu --listen 127.0.0.1 --port P --base-directory BASE`, ours and ComfyUI's alternating (ours
first; `--before DIR`, a checkout of an earlier commit of this repository, e.g. `git archive HEAD
| tar -x -C DIR`, runs in between as a third side), timed from launch to the first successful
`/object_info` answer, and to the packs imported (ours reports it in `GET /custom_nodes/status`;
ComfyUI imports them before it answers at all, so there both times are the same).
`--after-change` touches the first pack's `__init__.py` before every start (the first start after
a pack was edited or updated: ours finds its record stale and imports the packs before it
listens, as ComfyUI always does). `--warmup` unmeasured runs of each side come first: compiled files go to
one temporary `PYTHONPYCACHEPREFIX` folder that the warm-up fills (nothing is written into
ComfyUI's checkout), and the files are then in the page cache, as on a machine that has started
the server before.

Printed: the pack list; per run the seconds, the CPU seconds the server process had used when it
answered (user + system, all threads: steadier than the wall time on a busy machine), node counts
(all / from custom_nodes), the packs that failed to import, and the 1-minute load average; then
the medians and the ratios to ComfyUI, and the per-pack import times each server logged in its
"Import times for custom nodes" table (both print it in ComfyUI's format), median over the
measured runs. Which pack pays for a library several packs import (torch, diffusers, ...) depends
on the order: ComfyUI imports torch and its own modules before any pack, and lists the folder
unsorted. The load average is printed before and after: above the core count, read the figures
as *loaded*.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600.0

# 36 packs that load alone on ComfyUI 0.3.64 and here (docs/packs.md, docs/pack-report.md), of the
# 43 measured there: ComfyUI-Impact-Subpack is left out (Impact-Pack's own copy, impact_subpack/,
# loads: the same node names twice), ComfyUI-Manager too (no nodes; it reaches the network at
# start-up), and five model-wrapper packs of 2-20 nodes, to make the 36 (none of them
# loads slower than the rest): ComfyUI-WanVideoWrapper, ComfyUI-Florence2,
# ComfyUI-segment-anything-2, ComfyUI-DepthAnythingV2, ComfyUI-Frame-Interpolation. `--packs`
# names any set (all 41 load together on both servers too).
DEFAULT_PACKS = (
    "ComfyUI-Advanced-ControlNet", "ComfyUI-AnimateDiff-Evolved", "ComfyUI-Easy-Use", "ComfyUI-GGUF",
    "ComfyUI-Impact-Pack", "ComfyUI-KJNodes", "ComfyUI_Comfyroll_CustomNodes", "ComfyUI_IPAdapter_plus",
    "ComfyUI_UltimateSDUpscale", "ComfyUI_essentials", "ComfyUI_smZNodes",
    "ComfyUI-BrushNet", "ComfyUI-Crystools", "ComfyUI-Custom-Scripts", "ComfyUI-Detail-Daemon",
    "ComfyUI-IC-Light", "ComfyUI-Image-Saver", "ComfyUI-Inpaint-CropAndStitch", "ComfyUI-Inspire-Pack",
    "ComfyUI-Logic", "ComfyUI-TiledDiffusion", "ComfyUI-VideoHelperSuite", "ComfyUI-layerdiffuse",
    "ComfyUI-mxToolkit", "ComfyUI_ADV_CLIP_emb", "ComfyUI_InstantID", "ComfyUI_LayerStyle", "ComfyUI_Noise",
    "ComfyUI_tinyterraNodes", "PuLID_ComfyUI", "cg-use-everywhere", "comfyui_controlnet_aux",
    "efficiency-nodes-comfyui", "masquerade-nodes-comfyui", "rgthree-comfy", "was-node-suite-comfyui",
)

_TIME_LINE = re.compile(r"^\s*([0-9.]+) seconds( \(IMPORT FAILED\))?: (.+?)\s*$")


@dataclass
class Run:
    """One server start."""

    seconds: float
    ready: float  # to the packs imported: = seconds where the server imports them before it listens
    cpu: float  # CPU seconds the server process used until it answered (all its threads)
    nodes: int
    pack_nodes: int
    load: float
    failed: list[str] = field(default_factory=list)  # packs whose import failed (from the times table)
    import_times: dict[str, float] = field(default_factory=dict)  # pack folder name -> seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_times(log: str) -> tuple[dict[str, float], list[str]]:
    """The last "Import times for custom nodes:" table of a server log: pack -> seconds, failed packs."""
    times: dict[str, float] = {}
    failed: list[str] = []
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if "Import times for custom nodes" in line]
    if not starts:
        return times, failed
    for line in lines[starts[-1] + 1:]:
        match = _TIME_LINE.match(line)
        if match is None:
            break
        name = Path(match.group(3)).name
        times[name] = float(match.group(1))
        if match.group(2):
            failed.append(name)
    return times, failed


def make_base(packs: list[Path]) -> tempfile.TemporaryDirectory:
    """A base directory with `packs` linked into its custom_nodes/, kept for all of one side's runs
    (the pack record a start leaves in user/ is then there for the next, as on a machine that has
    served before)."""
    base = tempfile.TemporaryDirectory(prefix="pack_startup_")
    nodes_dir = Path(base.name) / "custom_nodes"
    nodes_dir.mkdir()
    for pack in packs:
        (nodes_dir / pack.name).symlink_to(pack.resolve(), target_is_directory=pack.is_dir())
    return base


def _get_json(port: int, path: str) -> object | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as answer:
            return json.loads(answer.read()) if answer.status == 200 else None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return None


def start_once(python: str, main: Path, base: Path, env: dict[str, str]) -> Run:
    """Launch one server on `base` (see make_base); seconds to the first /object_info, and to the
    packs imported (ours says so in GET /custom_nodes/status's `importing`; a server without it
    imported them before it answered). Ours is stopped only once its pack record exists."""
    port = _free_port()
    log_path = base / f"server-{port}.log"
    command = [python, str(main), "--cpu", "--listen", "127.0.0.1", "--port", str(port),
               "--base-directory", str(base)]
    with open(log_path, "w") as log_file:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=main.parent, stdout=log_file, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            def alive_or_raise() -> None:
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(f"{main} exited with {proc.returncode}: " + " | ".join(tail))
                if time.perf_counter() - start > TIMEOUT_S:
                    raise RuntimeError(f"{main}: not ready within {TIMEOUT_S:.0f} s")
            info = None
            while info is None:
                alive_or_raise()
                info = _get_json(port, "/object_info")
                if info is None:
                    time.sleep(0.05)
            seconds = time.perf_counter() - start
            cpu = _cpu_seconds(proc.pid)
            status = _get_json(port, "/custom_nodes/status")
            reports = isinstance(status, dict) and "importing" in status
            while reports and status.get("importing"):
                alive_or_raise()
                time.sleep(0.05)
                status = _get_json(port, "/custom_nodes/status") or status
            ready = time.perf_counter() - start if reports else seconds
            record = base / "user" / "pack_record.json"
            while reports and not record.is_file():
                alive_or_raise()
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    times, failed = import_times(log_path.read_text(errors="replace"))
    pack_nodes = sum(1 for node in info.values() if str(node.get("python_module", "")).startswith("custom_nodes."))
    return Run(seconds, ready, cpu, len(info), pack_nodes, os.getloadavg()[0], failed, times)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) + f" on {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packs-dir", type=Path, action="append", required=True,
                        help="a folder holding pack folders (repeatable; the first one holding a name wins)")
    parser.add_argument("--packs", nargs="+", default=list(DEFAULT_PACKS), help="pack folder names to install")
    parser.add_argument("--comfyui", type=Path, required=True, help="a ComfyUI checkout (its main.py is run)")
    parser.add_argument("--comfy-python", required=True, help="the Python that runs ComfyUI")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs ours (default: this one)")
    parser.add_argument("--before", type=Path,
                        help="another checkout of this repository (an earlier commit) run as a third side, 'before'")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each side first")
    parser.add_argument("--after-change", action="store_true",
                        help="before every start, touch the first pack's __init__.py (an edited or updated pack): "
                             "ours then finds its pack record stale and imports before listening, as ComfyUI does")
    args = parser.parse_args(argv)

    packs: list[Path] = []
    for name in args.packs:
        found = next((d / name for d in args.packs_dir if (d / name).exists()), None)
        if found is None:
            parser.error(f"pack {name!r} is in none of {[str(d) for d in args.packs_dir]}")
        packs.append(found)
    print(f"{len(packs)} packs: {', '.join(p.name for p in packs)}")
    print(f"load average before: {_load()}", flush=True)

    # Compiled files go to one temporary folder for every server (written by the warm-up runs, read
    # by the measured ones, as a set-up that has run once does), none into ComfyUI's checkout.
    pycache = tempfile.TemporaryDirectory(prefix="pack_startup_pycache_")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONUNBUFFERED="1", PYTHONPYCACHEPREFIX=pycache.name)
    sides = {"ours": (args.python, REPO / "main.py")}
    if args.before is not None:
        sides["before"] = (args.python, args.before / "main.py")
    sides["ComfyUI"] = (args.comfy_python, args.comfyui / "main.py")
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    bases = {side: make_base(packs) for side in sides}
    try:
        for index in range(args.warmup + args.runs):
            measured = index >= args.warmup
            for side, (python, main_py) in sides.items():
                if args.after_change:
                    changed = packs[0] / "__init__.py"
                    os.utime(changed)  # the fingerprint (path, size, mtime) moves; so does the bytecode's
                run = start_once(python, main_py, Path(bases[side].name), env)
                label = f"run {index - args.warmup + 1}" if measured else "warm-up"
                print(f"{label:8} {side:8} {run.seconds:7.2f} s (CPU {run.cpu:6.2f} s), packs imported at "
                      f"{run.ready:6.2f} s  nodes {run.nodes} "
                      f"({run.pack_nodes} from packs)  load {run.load:.2f}"
                      + (f"  failed: {', '.join(run.failed)}" if run.failed else ""), flush=True)
                if measured:
                    runs[side].append(run)
    finally:
        print(f"load average after: {_load()}", flush=True)
        pycache.cleanup()
        for base in bases.values():
            base.cleanup()

    medians = {side: statistics.median(r.seconds for r in rs) for side, rs in runs.items()}
    ready = {side: statistics.median(r.ready for r in rs) for side, rs in runs.items()}
    cpu = {side: statistics.median(r.cpu for r in rs) for side, rs in runs.items()}
    for side, rs in runs.items():
        print(f"{side:8} median {medians[side]:.2f} s to the first /object_info over {len(rs)} runs "
              f"({', '.join(f'{r.seconds:.2f}' for r in rs)}), CPU {cpu[side]:.2f} s; "
              f"nodes {rs[-1].nodes} ({rs[-1].pack_nodes} from packs)")
    for side in sides:
        if side != "ComfyUI":
            print(f"ratio {side} / ComfyUI: {medians[side] / medians['ComfyUI']:.2f}x "
                  f"(CPU {cpu[side] / cpu['ComfyUI']:.2f}x); packs imported (ready for their prompts and routes): "
                  f"{ready[side]:.2f} s against {ready['ComfyUI']:.2f} s, {ready[side] / ready['ComfyUI']:.2f}x")

    print("\nper-pack import times (median of the measured runs, seconds, from each server's log):")
    print(f"{'pack':40}" + "".join(f" {side:>8}" for side in sides))
    table = {side: {name: statistics.median(r.import_times.get(name, float("nan")) for r in rs)
                    for name in {n for r in rs for n in r.import_times}} for side, rs in runs.items()}
    names = sorted({n for cells in table.values() for n in cells},
                   key=lambda n: -max(cells.get(n, 0.0) for cells in table.values()))
    for name in names:
        print(f"{name:40}" + "".join(f" {table[side].get(name, float('nan')):8.2f}" for side in sides))
    totals = {side: statistics.median(sum(r.import_times.values()) for r in rs) for side, rs in runs.items()}
    print(f"{'sum':40}" + "".join(f" {totals[side]:8.2f}" for side in sides))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
