"""Side by side with ComfyUI on the same machine: the figures of issue 17, ours and theirs, in one run.

    .venv/bin/python bench/vs_comfyui.py [--figures start,first_step,load,step] [--runs 3] [--keep DIR]
                                         [--neighbour off|on|both]
    COMFYUI_DIR=~/ComfyUI COMFYUI_PYTHON=~/ComfyUI/venv/bin/python .venv/bin/python bench/vs_comfyui.py

Writes a random SD1.5-shaped fp16 checkpoint (real key names and shapes, 2.13 GB; see
bench/load.py) to a temp folder unless `--keep DIR` holds one, then measures, each run in a fresh
process, alternating ours / ComfyUI so that a drift of the machine hits both alike:

- `start`: `python main.py` to the first `/object_info` answer (a server in a temp base folder);
- `first_step`: on that cold server, POST /prompt of CheckpointLoaderSimple + two CLIPTextEncode +
  EmptyLatentImage (512x512) + KSampler (euler, cfg 7) + VAEDecode + PreviewImage, to the first
  `progress` message (the first sampler step done): load, encode, sampler set-up and one step;
- `launch_to_step`: the same run from `python main.py` to that first step (the POST is sent as
  soon as the server answers): what a user waits who starts the server and queues at once. A
  server that answers before its runtime has loaded (ours, web/warmup.py) counts that load in
  `first_step`; one that loads it before answering (ComfyUI) counts it in `start`; this row counts
  it once on both sides;
- `load`: the library call that loads the checkpoint at the CPU default precision (ours
  `comfy_core.load_checkpoint`, ComfyUI's `comfy.sd.load_checkpoint_guess_config`);
- `step`: one KSampler step at 512x512, batch 1, cfg 7, euler (the median interval between step
  callbacks of a 3-step sample), fp32.

Every figure is measured idle and again with a CPU-bound neighbour (one process spinning on one
core throughout; `--neighbour off|on|both`). The step row adds the roofline: the step's FLOPs
(counted once on the meta device) over its time, against this machine's fp32 matmul peak at the
same thread count. Both checkouts' bytecode is compiled first (as on an installed machine).

ComfyUI runs with `--cpu --use-pytorch-cross-attention` (its fastest CPU attention; its default
on a CPU is the slower sub-quadratic one), overridable with `--comfyui-flags`. Without the two
environment variables only our figures are printed. Each figure: the median of `--runs`, with
every run listed; the ratio is ours / ComfyUI. Nothing here asserts anything about time.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.server import _free_port, wait_until_serving  # noqa: E402

CHILD = REPO / "bench" / "vs_comfyui_child.py"
CHECKPOINT = "sd15_random_fp16.safetensors"
FIGURES = ("start", "first_step", "launch_to_step", "load", "step")
DEFAULT_COMFY_FLAGS = "--cpu --use-pytorch-cross-attention"


def first_step_prompt(checkpoint: str) -> dict:
    """The API-format workflow `first_step` posts (ComfyUI's default graph at 512x512)."""
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": checkpoint}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photograph of a lighthouse at dusk", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {
            "seed": 0, "steps": 20, "cfg": 7.0, "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0,
            "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "PreviewImage", "inputs": {"images": ["8", 0]}},
    }


def _server_command(impl: str, base: Path, port: int, comfy: tuple[str, str] | None, flags: list[str]) -> tuple[list[str], Path]:
    if impl == "ours":
        return [sys.executable, str(REPO / "main.py"), "--base-directory", str(base), "--port", str(port)], REPO
    comfy_dir, comfy_python = comfy
    return [comfy_python, str(Path(comfy_dir) / "main.py"), "--base-directory", str(base), "--port", str(port),
            "--listen", "127.0.0.1", "--disable-auto-launch", *flags], Path(comfy_dir)


async def _serve_and_prompt(impl: str, checkpoint: Path, comfy: tuple[str, str] | None, flags: list[str]) -> dict:
    """`start`, `first_step` and `launch_to_step` of one cold server in a fresh base folder."""
    base = Path(tempfile.mkdtemp(prefix=f"vs_{impl}_"))
    (base / "models" / "checkpoints").mkdir(parents=True)
    (base / "custom_nodes").mkdir()  # ComfyUI lists it at start-up
    (base / "models" / "checkpoints" / checkpoint.name).symlink_to(checkpoint)
    port = _free_port()
    command, cwd = _server_command(impl, base, port, comfy, flags)
    log = open(base / "server.log", "w")
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            def exited(code: int) -> str:
                log.flush()
                tail = (base / "server.log").read_text(errors="replace")[-2000:]
                return f"{impl} server exited ({code}); its log ends:\n{tail}"

            await wait_until_serving(session, proc, url, exited)
            start = time.perf_counter() - started
            ws = await session.ws_connect(f"{url}/ws?clientId=bench")
            posted = time.perf_counter()
            async with session.post(f"{url}/prompt", json={"prompt": first_step_prompt(checkpoint.name),
                                                           "client_id": "bench"}) as resp:
                body = await resp.json()
                if resp.status != 200:
                    raise SystemExit(f"{impl}: POST /prompt answered {resp.status}: {body}")
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                if data["type"] == "progress" and data["data"].get("value", 0) >= 1:
                    break
                if data["type"] == "execution_error":
                    raise SystemExit(f"{impl}: the prompt failed: {data['data'].get('exception_message')}")
            first_step = time.perf_counter() - posted
            launch_to_step = time.perf_counter() - started
            await ws.close()
    finally:
        proc.kill()
        proc.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)
    return {"start": start, "first_step": first_step, "launch_to_step": launch_to_step}


def _child(impl: str, checkpoint: Path, figure: str, comfy: tuple[str, str] | None, flags: list[str],
           threads: int) -> dict:
    if impl == "ours":
        command, cwd = [sys.executable, str(CHILD), "ours", str(checkpoint), figure, "--threads", str(threads)], REPO
    else:
        comfy_dir, comfy_python = comfy
        command = [comfy_python, str(CHILD), "comfyui", str(checkpoint), figure, "--threads", str(threads),
                   "--comfyui", comfy_dir, "--", *flags]
        cwd = Path(comfy_dir)
    out = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{impl} {figure} failed:\n{out.stderr[-3000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


@contextlib.contextmanager
def _neighbour(on: bool):
    """A CPU-bound neighbour: one process spinning on one core while the block runs (the issue's
    condition "with a CPU-bound neighbour": the machine shared with one busy job)."""
    if not on:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def _compile_bytecode(python: str, folder: Path) -> None:
    """Both sides run as an installed server runs after its first start: with its modules'
    bytecode cached. Python writes it on first import, except where PYTHONDONTWRITEBYTECODE is set
    (as on the machine these figures come from), where every start would compile every module
    from source again, and our lazily imported modules would count that inside the prompt."""
    # -I: the folder's own modules (ours has graph/types.py) must not shadow the standard library's
    subprocess.run([python, "-I", "-m", "compileall", "-q", "-j", "0", str(folder)],
                   stdout=subprocess.DEVNULL, check=False)


def _warm_page_cache(checkpoint: Path) -> None:
    """Warm page cache for every figure (the issue's condition): read the file once."""
    with open(checkpoint, "rb") as f:
        while f.read(64 << 20):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figures", default=",".join(FIGURES), help=f"comma-separated, of {','.join(FIGURES)}")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the checkpoint here (or reuse it) and keep it")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads for load/step")
    parser.add_argument("--comfyui-flags", default=DEFAULT_COMFY_FLAGS)
    parser.add_argument("--neighbour", choices=("off", "on", "both"), default="both",
                        help="measure idle, with a CPU-bound neighbour, or both (default)")
    args = parser.parse_args()
    figures = [f for f in args.figures.split(",") if f]
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise SystemExit(f"unknown --figures {unknown}; choose from {list(FIGURES)}")
    comfy_dir, comfy_python = os.environ.get("COMFYUI_DIR"), os.environ.get("COMFYUI_PYTHON")
    comfy = (comfy_dir, comfy_python) if comfy_dir and comfy_python else None
    flags = args.comfyui_flags.split()
    impls = ["ours", "comfyui"] if comfy else ["ours"]
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_vs_"))
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = folder / CHECKPOINT
    from bench.load import write_checkpoint

    try:
        if not checkpoint.exists():
            write_checkpoint(checkpoint)
        _warm_page_cache(checkpoint)
        for package in ("comfy_core", "nodes", "graph", "web", "compat"):
            _compile_bytecode(sys.executable, REPO / package)
        if comfy:
            _compile_bytecode(comfy_python, Path(comfy_dir))
        print(f"checkpoint {checkpoint} ({checkpoint.stat().st_size / 1e9:.2f} GB), {args.runs} runs each, "
              f"{args.threads} threads; ComfyUI: {comfy_dir + ' ' + args.comfyui_flags if comfy else 'not given'}")
        conditions = {"off": ["idle"], "on": ["neighbour"], "both": ["idle", "neighbour"]}[args.neighbour]
        names = {"start": "start to first /object_info", "first_step": "cold POST /prompt to first step",
                 "launch_to_step": "launch to first step (POST at first answer)",
                 "load": "checkpoint load (library, CPU default)", "step": "one KSampler step 512², cfg 7, fp32"}
        roof = _child("ours", checkpoint, "roofline", comfy, flags, args.threads) if "step" in figures else None
        for condition in conditions:
            results: dict[str, dict[str, list[float]]] = {impl: {f: [] for f in figures} for impl in impls}
            with _neighbour(condition == "neighbour"):
                for run in range(args.runs):
                    for impl in impls if run % 2 == 0 else impls[::-1]:
                        if {"start", "first_step", "launch_to_step"} & set(figures):
                            served = asyncio.run(_serve_and_prompt(impl, checkpoint, comfy, flags))
                            for figure in ("start", "first_step", "launch_to_step"):
                                if figure in figures:
                                    results[impl][figure].append(served[figure])
                        for figure in ("load", "step"):
                            if figure in figures:
                                results[impl][figure].append(_child(impl, checkpoint, figure, comfy, flags,
                                                                    args.threads)["seconds"])
            print(f"-- {condition}" + (" (a CPU-bound process spinning on one core throughout)"
                                       if condition == "neighbour" else ""))
            for figure in figures:
                ours = statistics.median(results["ours"][figure])
                line = f"{names[figure]:42s} ours {ours:7.2f} s"
                if comfy:
                    theirs = statistics.median(results["comfyui"][figure])
                    line += f"   ComfyUI {theirs:7.2f} s   ratio {ours / theirs:5.2f}x"
                runs = "; ".join(f"{impl} " + ", ".join(f"{v:.2f}" for v in results[impl][figure]) for impl in impls)
                print(f"{line}   ({runs})")
                if figure == "step" and roof is not None:
                    shares = ", ".join(
                        f"{impl} {roof['step_flops'] / statistics.median(results[impl]['step']) / 1e9:.1f} GFLOP/s = "
                        f"{roof['step_flops'] / statistics.median(results[impl]['step']) / roof['peak_flops']:.0%}"
                        for impl in impls)
                    print(f"{'  roofline':42s} {roof['step_flops'] / 1e12:.2f} TFLOP per step; fp32 matmul peak "
                          f"{roof['peak_flops'] / 1e9:.1f} GFLOP/s at {args.threads} threads (idle); {shares} of it")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
