"""Memory that does not grow: the server's RSS over many prompts that switch models, LoRAs and sizes.

    .venv/bin/python bench/memory_curve.py [--prompts 200] [--width 64] [--every 10]
                                           [--server-flag=--cache-lru=20 ...] [--malloc-arena-max 2]
                                           [--trim] [--trace]

Starts our server (`main.py --cpu`) on a free loopback port in a temporary base folder holding two
tiny SD1-layout checkpoints (same layout, different random weights; UNet `--width` channels wide)
and two kohya LoRAs over the UNet's attention projections (tests/fixtures), then queues `--prompts`
prompts over HTTP, one at a time, each waited for on the WebSocket. Prompt i uses checkpoint
`A`/`B` by i % 2, no LoRA / LoRA 1 / LoRA 2 by i % 3 and a 64 / 96 / 128 px image by (i // 6) % 3,
with 2 steps and seed i (so nothing is a cache hit): every combination once per cycle of 18.

After each prompt it reads the server's memory from /proc/<pid>/status (VmRSS, RssAnon, RssFile)
and prints every `--every`-th sample, then the growth of RSS and of its anonymous part from the
end of the first full cycle (prompt 18) to the end, in MiB, and the least-squares slope over the
same span in MiB per 100 prompts, and the same at the end of each cycle (same phase, so the
sizes and models in use do not move the figure), and the growth over the second half (once
caches and allocator arenas have settled). It prints figures and asserts nothing.

Diagnostics (the server then runs under a small wrapper that answers two signals):
`--trim` calls glibc's `malloc_trim(0)` in the server before each sample (what stays is live
memory, not free memory the allocator keeps); `--trace` starts `tracemalloc` in the server at
the end of the first cycle and prints the Python allocations made from then on that are still
alive at the end (slower; Python allocations only, so tensor storage does not show).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.server import _free_port, wait_until_serving  # noqa: E402

CYCLE = 18  # 2 checkpoints x 3 LoRA choices x 3 sizes
SIZES = (64, 96, 128)
MIB = 1024 * 1024


def write_checkpoint(path: Path, width: int, seed: int) -> None:
    """A tiny SD1 single-file checkpoint whose UNet is `width` channels wide (8 heads, as SD1)."""
    import torch
    from safetensors.torch import save_file

    from tests.fixtures import checkpoints as ck

    arch = ck.architectures()["sd1"]
    shapes = dict(ck.unet_shapes(dataclasses.replace(arch.unet, model_channels=width)))
    shapes.update(ck.vae_shapes(arch.vae))
    for _kind, prefix, text_width, layers, _projection in arch.text:
        shapes.update(ck.hf_clip_shapes(prefix, text_width, layers))
    gen = torch.Generator().manual_seed(seed)
    tensors = {name: ck._random_value(name, shape, gen) for name, shape in sorted(shapes.items())}
    tensors["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(ck.POSITIONS)[None]
    tensors.update(ck.schedule_buffers())
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})


def write_loras(checkpoint: Path, paths: list[Path]) -> None:
    """Kohya LoRAs (rank 4) over every attention projection of `checkpoint`'s UNet."""
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.loras import write_unet_lora

    model, _clip, _vae = load_checkpoint(checkpoint)
    for n, path in enumerate(paths):
        write_unet_lora(path, model, seed=100 + n, rank=4, scale=0.05,
                        targets=("to_q.weight", "to_k.weight", "to_v.weight", "to_out.0.weight"))


def prompt_for(i: int) -> dict:
    """Prompt i of the cycle (see the module docstring)."""
    ckpt = ("model_a.safetensors", "model_b.safetensors")[i % 2]
    lora = (None, "lora_1.safetensors", "lora_2.safetensors")[i % 3]
    size = SIZES[(i // 6) % 3]
    model, clip = ["1", 0], ["1", 1]
    prompt = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt}}}
    if lora is not None:
        prompt["2"] = {"class_type": "LoraLoader", "inputs": {"model": model, "clip": clip, "lora_name": lora,
                                                              "strength_model": 1.0, "strength_clip": 1.0}}
        model, clip = ["2", 0], ["2", 1]
    prompt.update({
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": f"a photo of a cat, number {i % 7}", "clip": clip}},
        "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": clip}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": size, "height": size, "batch_size": 1}},
        "6": {"class_type": "KSampler", "inputs": {
            "model": model, "positive": ["3", 0], "negative": ["4", 0], "latent_image": ["5", 0], "seed": i,
            "steps": 2, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal", "denoise": 1.0}},
        "7": {"class_type": "VAEDecode", "inputs": {"samples": ["6", 0], "vae": ["1", 2]}},
        "8": {"class_type": "SaveImage", "inputs": {"images": ["7", 0], "filename_prefix": "curve"}},
    })
    return prompt


# Run as the server's entry point for --trim / --trace: the first SIGUSR1 starts tracemalloc (so
# the start-up and the first cycle run at full speed), the second dumps a snapshot, after a full
# collection, to the file named by MEMCURVE_SNAPSHOT: what it holds was allocated after the first
# cycle and is still alive. SIGUSR2 calls malloc_trim(0). Each then writes the marker file, which
# the bench waits for.
_WRAPPER = """
import ctypes, gc, os, runpy, signal, sys, tracemalloc
marker = os.environ["MEMCURVE_MARKER"]
def _done():
    open(marker, "w").close()
def _trace(signum, frame):
    gc.collect()
    if not tracemalloc.is_tracing():
        tracemalloc.start(8)
    else:
        tracemalloc.take_snapshot().dump(os.environ["MEMCURVE_SNAPSHOT"])
    _done()
def _trim(signum, frame):
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    _done()
signal.signal(signal.SIGUSR1, _trace)
signal.signal(signal.SIGUSR2, _trim)
main_py = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(main_py))
runpy.run_path(main_py, run_name="__main__")
"""


async def _signal_and_wait(pid: int, sig: int, marker: Path) -> None:
    """Send `sig` to the wrapped server and wait for its marker file."""
    marker.unlink(missing_ok=True)
    os.kill(pid, sig)
    while not marker.exists():
        await asyncio.sleep(0.05)
    marker.unlink()


def _print_trace(snapshot: Path, top: int = 12) -> None:
    """The Python allocations made after the first cycle and still alive at the end, by their
    allocating line and its callers in this repository (tracemalloc's own frames dropped)."""
    import tracemalloc

    filters = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
    stats = tracemalloc.Snapshot.load(str(snapshot)).filter_traces(filters).statistics("traceback")
    total = sum(s.size for s in stats)
    print(f"Python allocations made after the first cycle, alive at the end: {total / MIB:.2f} MiB; largest:")
    for stat in stats[:top]:
        frames = [f for f in stat.traceback if f.filename.startswith(str(REPO)) and "/.venv/" not in f.filename]
        where = " <- ".join(f"{Path(f.filename).relative_to(REPO)}:{f.lineno}" for f in reversed(frames[-4:])) \
            or f"{stat.traceback[-1].filename}:{stat.traceback[-1].lineno}"
        print(f"  {stat.size / 1024:9.1f} KiB {stat.count:7d} blocks  {where}")


def read_memory(pid: int) -> dict[str, float]:
    """The process's resident memory in MiB: all, anonymous, file-backed (/proc/<pid>/status)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return fields


async def _wait_done(ws: aiohttp.ClientWebSocketResponse, prompt_id: str) -> None:
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            continue
        data = json.loads(msg.data)
        if data["type"] == "execution_error" and data["data"].get("prompt_id") == prompt_id:
            raise SystemExit(f"prompt failed: {data['data'].get('exception_message')}")
        if data["type"] == "executing" and data["data"].get("node") is None \
                and data["data"].get("prompt_id") == prompt_id:
            return
    raise RuntimeError("socket closed before the prompt finished")


def slope_per_100(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of ys over xs, times 100."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return 100 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="memcurve_"))
    try:
        ckpts, loras = base / "models" / "checkpoints", base / "models" / "loras"
        ckpts.mkdir(parents=True)
        loras.mkdir(parents=True)
        (base / "custom_nodes").mkdir()
        write_checkpoint(ckpts / "model_a.safetensors", args.width, seed=1)
        write_checkpoint(ckpts / "model_b.safetensors", args.width, seed=2)
        write_loras(ckpts / "model_a.safetensors", [loras / "lora_1.safetensors", loras / "lora_2.safetensors"])
        mib = sum(p.stat().st_size for p in ckpts.iterdir()) / MIB
        port = _free_port()
        env = dict(os.environ)
        if args.malloc_arena_max:
            env["MALLOC_ARENA_MAX"] = str(args.malloc_arena_max)
        wrapped = args.trim or args.trace
        marker, snapshot = base / "signal.done", base / "end.trace"
        entry = [str(REPO / "main.py")]
        if wrapped:
            (base / "wrapper.py").write_text(_WRAPPER)
            entry = [str(base / "wrapper.py"), *entry]
            env["MEMCURVE_MARKER"] = str(marker)
            env["MEMCURVE_SNAPSHOT"] = str(snapshot)
        command = [sys.executable, *entry, "--listen", "127.0.0.1", "--port", str(port),
                   "--base-directory", str(base), "--cpu", *args.server_flag]
        print(f"server: {' '.join(command[1:])}" + (f" (MALLOC_ARENA_MAX={args.malloc_arena_max})"
                                                     if args.malloc_arena_max else "")
              + (" (malloc_trim before each sample)" if args.trim else "") + (" (tracemalloc)" if args.trace else ""))
        print(f"checkpoints: 2 x {mib / 2:.1f} MiB (UNet width {args.width}); load average {os.getloadavg()}")
        log = open(base / "server.log", "w")
        proc = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        samples: list[dict[str, float]] = []
        started = time.perf_counter()
        try:
            async with aiohttp.ClientSession() as session:
                def exited(code: int) -> str:
                    log.flush()
                    return f"server exited ({code}):\n{(base / 'server.log').read_text(errors='replace')[-2000:]}"

                await wait_until_serving(session, proc, url, exited)
                ws = await session.ws_connect(f"{url}/ws?clientId=curve", max_msg_size=0)
                print(f"{'prompt':>6} {'RSS MiB':>8} {'anon':>8} {'file':>8} {'s':>6}")
                for i in range(args.prompts):
                    request = {"prompt": prompt_for(i), "client_id": "curve"}
                    async with session.post(f"{url}/prompt", json=request) as resp:
                        body = await resp.json()
                        if resp.status != 200:
                            raise SystemExit(f"prompt {i} rejected: {body}")
                    await _wait_done(ws, body["prompt_id"])
                    n = i + 1
                    if args.trace and n in (CYCLE, args.prompts):
                        await _signal_and_wait(proc.pid, signal.SIGUSR1, marker)
                    if args.trim:
                        await _signal_and_wait(proc.pid, signal.SIGUSR2, marker)
                    sample = read_memory(proc.pid)
                    samples.append(sample)
                    if n % args.every == 0 or n == CYCLE or n == args.prompts:
                        print(f"{n:>6} {sample['VmRSS']:8.1f} {sample['RssAnon']:8.1f} {sample['RssFile']:8.1f} "
                              f"{time.perf_counter() - started:6.0f}", flush=True)
                await ws.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
        if len(samples) <= CYCLE:
            print(f"fewer than {CYCLE + 1} prompts: no growth after the first cycle to report")
            return
        first, last = samples[CYCLE - 1], samples[-1]
        xs = list(range(CYCLE, len(samples) + 1))
        print(f"after the first cycle (prompt {CYCLE}) to prompt {len(samples)}: "
              f"RSS {last['VmRSS'] - first['VmRSS']:+.1f} MiB (anonymous {last['RssAnon'] - first['RssAnon']:+.1f}, "
              f"file {last['RssFile'] - first['RssFile']:+.1f}); slope "
              f"{slope_per_100(xs, [s['VmRSS'] for s in samples[CYCLE - 1:]]):+.1f} MiB / 100 prompts "
              f"(anonymous {slope_per_100(xs, [s['RssAnon'] for s in samples[CYCLE - 1:]]):+.1f}); "
              f"peak RSS {max(s['VmHWM'] for s in samples):.1f} MiB; {time.perf_counter() - started:.0f} s; "
              f"load average {os.getloadavg()}")
        ends = list(range(CYCLE, len(samples) + 1, CYCLE))
        print("at each cycle's end: RSS " + " ".join(f"{samples[n - 1]['VmRSS']:.0f}" for n in ends)
              + f" MiB; slope {slope_per_100(ends, [samples[n - 1]['VmRSS'] for n in ends]):+.1f} MiB / 100 prompts"
              f" (anonymous {slope_per_100(ends, [samples[n - 1]['RssAnon'] for n in ends]):+.1f})")
        half = len(samples) // 2
        if half > CYCLE:
            print(f"second half (prompt {half} to {len(samples)}): RSS "
                  f"{samples[-1]['VmRSS'] - samples[half - 1]['VmRSS']:+.1f} MiB (anonymous "
                  f"{samples[-1]['RssAnon'] - samples[half - 1]['RssAnon']:+.1f})")
        if args.trace:
            _print_trace(snapshot)
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--width", type=int, default=64, help="UNet model channels of the two checkpoints")
    parser.add_argument("--every", type=int, default=10, help="print every N-th sample")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="extra server flag, e.g. --server-flag=--cache-lru=20 (repeatable)")
    parser.add_argument("--malloc-arena-max", type=int, default=0, help="set MALLOC_ARENA_MAX for the server")
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) in the server before each sample")
    parser.add_argument("--trace", action="store_true", help="tracemalloc: print the Python allocations that grew")
    parser.add_argument("--keep", action="store_true", help="keep the temporary base folder (server.log)")
    args = parser.parse_args()
    if args.prompts < 1 or args.every < 1 or args.width % 32:
        parser.error("--prompts and --every must be positive, --width a multiple of 32")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
