"""Server benchmark: prints figures, asserts nothing about speed.

    .venv/bin/python bench/server.py [--clients 50] [--prompts 20] [--latency-runs 20]
                                     [--chains 100,1000,10000] [--only chains]

1. start-up: seconds from `python main.py` to the first `/object_info` answer (no torch is
   imported by then), and to the end of a first trivial prompt sent right then (the queue worker
   starts once torch and the nodes' runtime have loaded in the background, web/warmup.py);
2. latency: POST /prompt -> `executing {node: null}` for a trivial two-node workflow;
3. load: N WebSocket clients each submit M prompts over the socket at once (`queue_prompt`);
   checks that every prompt finishes and is in the history, prints prompts per second;
4. progress traffic: one chain of N trivial nodes (bench/chain_pack) per size; a real aiohttp
   WebSocket client reads and JSON-parses every message up to `executing {node: null}`; prints
   the messages and bytes received (all, and `progress_state` alone) and the seconds from POST
   to the end. ComfyUI sends every non-pending node's state on each node start and finish
   (quadratic bytes); here state updates are coalesced (graph/progress.py).

The server runs as a subprocess on a free loopback port, in a temporary folder, with the test
node pack (tests/web/web_test_pack) and the chain pack (bench/chain_pack) as its custom nodes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.chain_pack import chain_prompt  # noqa: E402
from tests.web.web_test_pack import srv_prompt  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_until_serving(session: aiohttp.ClientSession, proc: subprocess.Popen, base_url: str,
                             exited: Callable[[int], str]) -> None:
    """Poll `GET base_url/object_info` until it answers 200; `SystemExit(exited(returncode))` if
    the server process ends first."""
    while True:
        if proc.poll() is not None:
            raise SystemExit(exited(proc.returncode))
        try:
            async with session.get(f"{base_url}/object_info") as resp:
                if resp.status == 200:
                    await resp.read()
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.02)


async def _startup(base: Path, port: int) -> tuple[subprocess.Popen, float, float]:
    """Launch the server; seconds to the first /object_info answer, then to the end of a first
    trivial prompt posted at that moment."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(REPO / "main.py"), "--base-directory", str(base), "--port",
                             str(port)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    async with aiohttp.ClientSession() as session:
        await wait_until_serving(session, proc, f"http://127.0.0.1:{port}",
                                 lambda code: f"server exited with status {code}")
        object_info = time.perf_counter() - started
        base_url = f"http://127.0.0.1:{port}"
        ws = await session.ws_connect(f"{base_url}/ws?clientId=first")
        async with session.post(f"{base_url}/prompt", json={"prompt": srv_prompt(0, prefix="first"),
                                                            "client_id": "first"}) as resp:
            body = await resp.json()
        await _wait_done(ws, body["prompt_id"])
        await ws.close()
        return proc, object_info, time.perf_counter() - started


def _torch_import_seconds() -> float:
    """For scale: what start-up took before node modules imported torch lazily (measured with
    no server running, as the server imports torch in the background once it listens)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - started


async def _wait_done(ws, prompt_id: str) -> None:
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if data["type"] == "executing" and data["data"].get("node") is None \
                    and data["data"].get("prompt_id") == prompt_id:
                return
    raise RuntimeError("socket closed before the prompt finished")


async def _latency(base_url: str, runs: int) -> list[float]:
    times = []
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{base_url}/ws?clientId=latency")
        for n in range(runs):
            started = time.perf_counter()
            async with session.post(f"{base_url}/prompt", json={"prompt": srv_prompt(n % 256, prefix="lat"),
                                                                "client_id": "latency"}) as resp:
                body = await resp.json()
            await _wait_done(ws, body["prompt_id"])
            times.append(time.perf_counter() - started)
        await ws.close()
    return times


async def _client(session: aiohttp.ClientSession, base_url: str, index: int, prompts: int) -> list[str]:
    ws = await session.ws_connect(f"{base_url}/ws?clientId=load{index}")
    for n in range(prompts):
        await ws.send_json({"type": "queue_prompt", "data": {"prompt": srv_prompt(n, prefix=f"load{index}")}})
    queued, finished = [], set()
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            continue
        data = json.loads(msg.data)
        if data["type"] == "prompt_queued":
            queued.append(data["data"]["prompt_id"])
        elif data["type"] == "prompt_rejected":
            raise RuntimeError(f"client {index}: prompt rejected: {data['data']}")
        elif data["type"] == "executing" and data["data"].get("node") is None:
            finished.add(data["data"]["prompt_id"])
            if len(finished) == prompts:
                break
    await ws.close()
    assert set(queued) == finished, f"client {index}: {len(queued)} queued, {len(finished)} finished"
    return queued


async def _load(base_url: str, clients: int, prompts: int) -> tuple[float, int, int]:
    connector = aiohttp.TCPConnector(limit=clients + 10)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        results = await asyncio.gather(*(_client(session, base_url, i, prompts) for i in range(clients)))
        elapsed = time.perf_counter() - started
        async with session.get(f"{base_url}/history") as resp:
            history = await resp.json()
    ids = [pid for ids in results for pid in ids]
    in_history = sum(1 for pid in ids if history.get(pid, {}).get("status", {}).get("completed"))
    return elapsed, len(ids), in_history


async def _chain_traffic(base_url: str, nodes: int, seed: int) -> dict:
    """Run one `nodes`-long chain; what a parsing client received and how long it took."""
    prompt = chain_prompt(nodes, seed)
    counts = {"messages": 0, "bytes": 0, "progress_state": 0, "progress_state_bytes": 0}
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{base_url}/ws?clientId=chain{seed}", max_msg_size=0)
        await ws.receive()  # the greeting `status`
        started = time.perf_counter()
        async with session.post(f"{base_url}/prompt", json={"prompt": prompt, "client_id": f"chain{seed}"}) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise SystemExit(f"chain of {nodes} rejected: {body}")
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            size = len(msg.data.encode("utf-8"))
            data = json.loads(msg.data)
            counts["messages"] += 1
            counts["bytes"] += size
            if data["type"] == "progress_state":
                counts["progress_state"] += 1
                counts["progress_state_bytes"] += size
            elif data["type"] == "executing" and data["data"].get("node") is None \
                    and data["data"].get("prompt_id") == body["prompt_id"]:
                break
        counts["seconds"] = time.perf_counter() - started
        await ws.close()
    return counts


def _print_chain(nodes: int, c: dict) -> None:
    print(f"chain of {nodes:>5} nodes: {c['messages']:>6} messages, {c['bytes'] / 1e6:8.2f} MB "
          f"({c['progress_state']:>5} progress_state, {c['progress_state_bytes'] / 1e6:8.2f} MB), "
          f"POST -> parsed `executing null`: {c['seconds']:.3f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--chains", default="100,1000,10000", help="chain lengths for the progress traffic part")
    parser.add_argument("--only", choices=("chains",), help="run only this part (after start-up)")
    args = parser.parse_args()
    chains = [int(n) for n in args.chains.split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        base = Path(tmp)
        shutil.copytree(REPO / "tests" / "web" / "web_test_pack", base / "custom_nodes" / "web_test_pack")
        shutil.copytree(REPO / "bench" / "chain_pack", base / "custom_nodes" / "chain_pack",
                        ignore=shutil.ignore_patterns("__pycache__"))
        port = _free_port()
        torch_seconds = _torch_import_seconds()
        proc, startup, first_prompt = await _startup(base, port)
        url = f"http://127.0.0.1:{port}"
        try:
            print(f"start-up to first /object_info answer: {startup:.2f} s "
                  f"(for scale: a bare `python -c 'import torch'` takes {torch_seconds:.2f} s here)")
            print(f"launch -> first trivial prompt finished (posted at the first answer; the worker waits "
                  f"for the background torch load): {first_prompt:.2f} s")
            for seed, nodes in enumerate(chains, start=1):
                _print_chain(nodes, await _chain_traffic(url, nodes, seed))
            if args.only == "chains":
                return
            lat = sorted(await _latency(url, args.latency_runs))
            p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
            print(f"POST -> finished latency, trivial workflow ({len(lat)} runs): "
                  f"median {statistics.median(lat) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
            elapsed, total, in_history = await _load(url, args.clients, args.prompts)
            print(f"{args.clients} WebSocket clients x {args.prompts} prompts: {total} queued, "
                  f"{in_history} finished and in history, {elapsed:.2f} s, {total / elapsed:.1f} prompts/s")
            if in_history != args.clients * args.prompts:
                raise SystemExit("some prompts were lost")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
