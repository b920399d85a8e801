"""Ray scale-out benchmark: prints figures, asserts nothing about speed.

    .venv/bin/python bench/ray_queue.py [--trivial 200] [--images 8] [--latency-runs 20] [--workers 1,2]

For the embedded queue and for `--ray --ray-workers N` (a local Ray instance the server starts),
each server a `python main.py` subprocess on a free loopback port in a temporary folder:

1. throughput, trivial: `--trivial` two-node prompts (tests/web/web_test_pack) posted at once;
   prompts per second from the first POST to the last `executing {node: null}`;
2. throughput, text-to-image: `--images` prompts on the tiny SD1 checkpoint
   (tests/fixtures/checkpoints.py, `sd1_fast`), 64x64, 4 euler steps, different seeds, posted at once;
3. latency: one trivial prompt at a time, POST to `executing {node: null}`, median and p95; the
   added latency of Ray is the difference to the embedded queue's.

With N workers, N prompts run at once, one per worker process; on a machine with few cores the
server and the workers share them, so figures above one worker show the dispatch overhead more
than the speed-up a cluster of GPU machines gets.
"""
from __future__ import annotations

import argparse
import asyncio
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

from bench.server import _free_port, _latency, wait_until_serving  # noqa: E402
from tests.web.web_test_pack import srv_prompt  # noqa: E402


def image_prompt(seed: int) -> dict:
    """The default text-to-image graph on the tiny checkpoint, 64x64, 4 steps."""
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photo of a cat", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "3": {"class_type": "KSampler", "inputs": {"seed": seed, "steps": 4, "cfg": 7.0, "sampler_name": "euler",
                                                   "scheduler": "normal", "denoise": 1.0, "model": ["4", 0],
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": f"bench_{seed}", "images": ["8", 0]}},
    }


def prepare_base(root: Path) -> Path:
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    base = root / "base"
    shutil.copytree(REPO / "tests" / "web" / "web_test_pack", base / "custom_nodes" / "web_test_pack")
    write_tiny_checkpoint(base / "models" / "checkpoints" / "tiny.safetensors", "sd1_fast")
    return base


async def _done_ids(ws, wanted: set[str]) -> None:
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if data["type"] == "executing" and data["data"].get("node") is None:
                wanted.discard(data["data"].get("prompt_id"))
                if not wanted:
                    return
    raise RuntimeError("socket closed before the prompts finished")


async def _post(session: aiohttp.ClientSession, url: str, prompt: dict, client: str) -> str:
    async with session.post(f"{url}/prompt", json={"prompt": prompt, "client_id": client}) as resp:
        body = await resp.json()
        if resp.status != 200:
            raise RuntimeError(f"POST /prompt: {resp.status} {body}")
        return body["prompt_id"]


async def _throughput(url: str, prompts: list[dict]) -> float:
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{url}/ws?clientId=bench")
        started = time.perf_counter()
        ids = set(await asyncio.gather(*(_post(session, url, p, "bench") for p in prompts)))
        await asyncio.wait_for(_done_ids(ws, ids), timeout=3600)
        elapsed = time.perf_counter() - started
        await ws.close()
    return len(prompts) / elapsed


async def _workers_ready(url: str, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            async with session.get(f"{url}/system_stats") as resp:
                workers = (await resp.json()).get("workers", [])
            if len(workers) == count and all(w["state"] == "ready" for w in workers):
                return
            await asyncio.sleep(0.1)
    raise SystemExit(f"the {count} Ray workers were not ready in {timeout} s")


async def run_mode(base: Path, workers: int | None, args: argparse.Namespace) -> dict:
    port = _free_port()
    command = [sys.executable, str(REPO / "main.py"), "--base-directory", str(base), "--port", str(port), "--cpu"]
    if workers is not None:
        command += ["--ray", "--ray-workers", str(workers)]
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            await wait_until_serving(session, proc, url, lambda code: f"server exited with status {code}")
        if workers is not None:
            await _workers_ready(url, workers)
        ready = time.perf_counter() - started
        # Warm-up: each worker's first prompt imports the node runtime (values the measured runs do not use).
        await _throughput(url, [srv_prompt(n, prefix="warm") for n in range(max(2, workers or 1))])
        trivial = await _throughput(url, [srv_prompt(n % 256, prefix=f"t{n}") for n in range(args.trivial)])
        images = await _throughput(url, [image_prompt(seed) for seed in range(args.images)])
        latency = await _latency(url, args.latency_runs)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    latency.sort()
    return {"ready": ready, "trivial": trivial, "images": images, "median": statistics.median(latency),
            "p95": latency[min(len(latency) - 1, int(0.95 * len(latency)))]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trivial", type=int, default=200)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--workers", default="1,2", help="Ray worker counts to measure, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        base = prepare_base(Path(tmp))
        modes: list[tuple[str, int | None]] = [("embedded", None)]
        modes += [(f"ray, {n} worker{'s' if n > 1 else ''}", n) for n in map(int, args.workers.split(","))]
        results = {}
        for label, workers in modes:
            results[label] = await run_mode(base, workers, args)
            r = results[label]
            print(f"{label:>16}: ready {r['ready']:.1f} s | {args.trivial} trivial prompts {r['trivial']:.0f}/s | "
                  f"{args.images} tiny txt2img {r['images']:.2f}/s | latency median {r['median'] * 1000:.1f} ms, "
                  f"p95 {r['p95'] * 1000:.1f} ms", flush=True)
        embedded = results["embedded"]["median"]
        for label, r in results.items():
            if label != "embedded":
                print(f"{label}: +{(r['median'] - embedded) * 1000:.1f} ms per prompt against the embedded queue")


if __name__ == "__main__":
    asyncio.run(main())
