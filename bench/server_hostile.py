"""Event-loop latency under big inputs (issue 34): prints figures, asserts nothing about speed.

    .venv/bin/python bench/server_hostile.py [--sizes 10000,100000] [--body-mb 50] [--no-socket] [--gc-kinds]

A server (`python main.py`, a subprocess on a free loopback port, in a temporary folder, with
bench/chain_pack as its custom nodes) is probed by a client that sends a trivial `GET /prompt`
again as soon as the previous one is answered (every 5 ms at most); while it does:

1. for each size N: one chain of N trivial nodes is POSTed (parsed, validated, stored) and run to
   its end, with a WebSocket client of the same client id that reads every message (as the
   editor does); `--no-socket` posts with a client id that has no socket instead;
2. one POST /prompt whose body is `--body-mb` MB (a 3-node chain with a workflow of that size in
   `extra_data.extra_pnginfo`, as the editor sends it) is accepted and run.

After each phase the probe goes on for `--settle` seconds (a row of its own, `then N s`): the
server stores the prompt, frees its data and may run a full garbage-collector pass there, after
the client has seen the prompt's end. For each phase it prints the phase's seconds, the number of GETs answered, their p50, p99 and
worst latency in milliseconds (a probe counts for the phase in which it started), and the
machine's load average before and after: on a busy machine the server's threads wait for a CPU
and every figure grows. Before issue 34 a 100 000-node prompt left a GET waiting up to 27 s, and
a 50 MB body blocked the loop 1.7-4.3 s.
It then lists the server's full garbage-collector passes that took 100 ms or more (web/collector.py
logs them: objects walked, unreachable, milliseconds; `--gc-kinds` runs the server at DEBUG level
so each line also names the types most walked), and the messages its WebSocket hub dropped for a
client it judged not reading (none is expected: the bench's client reads every message).
The probe runs on its own thread and loop, and the WebSocket reader does not parse the big
`progress_state` maps, so this process's own work does not delay a probe.
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
import threading
import time
import uuid
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.chain_pack import chain_prompt  # noqa: E402
from bench.server import _free_port, wait_until_serving  # noqa: E402


class Prober:
    """GET /prompt back to back from its own thread and event loop (so that this process's
    WebSocket reading never delays a probe); latencies in seconds, grouped by phase afterwards
    from the wall-clock windows `mark` records."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.probes: list[tuple[float, float, bool]] = []  # (start, latency, ok)
        self.windows: dict[str, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=180)

    def mark(self, phase: str, start: float, end: float) -> None:
        self.windows[phase] = (start, end)

    def samples(self, phase: str) -> tuple[list[float], int]:
        start, end = self.windows.get(phase, (0.0, -1.0))
        inside = [(lat, ok) for t, lat, ok in self.probes if start <= t <= end]
        return [lat for lat, ok in inside if ok], sum(1 for _, ok in inside if not ok)

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    async with session.get(f"{self.url}/prompt", timeout=aiohttp.ClientTimeout(total=120)) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                self.probes.append((started, time.perf_counter() - started, ok))
                await asyncio.sleep(0.005)


def _body(mb: float) -> dict:
    """A 3-node chain plus an editor-style workflow of about `mb` MB in extra_pnginfo."""
    node = {"id": 0, "type": "BenchChainLink", "pos": [10.5, 20.25], "size": [315, 58], "flags": {}, "order": 0,
            "mode": 0, "inputs": [{"name": "value", "type": "INT", "link": 1}],
            "outputs": [{"name": "INT", "type": "INT", "links": [2]}], "properties": {}, "widgets_values": []}
    per = len(json.dumps(node))
    count = int(mb * 1024 * 1024 / (per + 2))
    nodes = [dict(node, id=i) for i in range(count)]
    return {"prompt": chain_prompt(3, seed=int(time.time()) % 100000),
            "extra_data": {"extra_pnginfo": {"workflow": {"nodes": nodes, "links": [], "version": 0.4}}}}


async def _wait_end(ws, prompt_id: str) -> int:
    """Read the socket up to `executing {node: null}` for `prompt_id`; returns the messages read."""
    count = 0
    while True:
        msg = await ws.receive(timeout=1800)
        if msg.type == aiohttp.WSMsgType.TEXT:
            count += 1
            if len(msg.data) > 65536:  # a progress_state map: not parsed (the end is a small message)
                continue
            data = json.loads(msg.data)
            if data["type"] == "executing" and data["data"].get("node") is None \
                    and data["data"].get("prompt_id") == prompt_id:
                return count
            if data["type"] == "execution_error" and data["data"].get("prompt_id") == prompt_id:
                raise SystemExit(f"prompt failed: {data['data'].get('exception_message')}")
        elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            raise SystemExit(f"socket closed: {msg}")


async def _wait_history(session: aiohttp.ClientSession, url: str, prompt_id: str) -> None:
    while True:
        async with session.get(f"{url}/history/{prompt_id}") as resp:
            if (await resp.json()).get(prompt_id):
                return
        await asyncio.sleep(0.2)


async def _phase(session, url: str, prober: Prober | None, name: str, body: dict, socket: bool) -> float:
    client_id = uuid.uuid4().hex
    body = {**body, "client_id": client_id}
    data = json.dumps(body).encode()
    ws = await session.ws_connect(f"{url}/ws?clientId={client_id}", max_msg_size=0) if socket else None
    try:
        started = time.perf_counter()
        async with session.post(f"{url}/prompt", data=data, headers={"Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=1800)) as resp:
            answer = await resp.json()
            if resp.status != 200:
                raise SystemExit(f"{name}: POST /prompt answered {resp.status}: {str(answer)[:500]}")
        if ws is not None:
            await _wait_end(ws, answer["prompt_id"])
        else:
            await _wait_history(session, url, answer["prompt_id"])
        ended = time.perf_counter()
        if prober is not None:
            prober.mark(name, started, ended)
        return ended - started
    finally:
        if ws is not None:
            await ws.close()


def _print(name: str, seconds: float, samples: list[float], errors: int) -> None:
    name = name.split(" #")[0]
    ms = sorted(s * 1000 for s in samples)
    if not ms:
        print(f"{name:<34} {seconds:8.1f} s   no GET answered ({errors} failed)")
        return
    p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
    print(f"{name:<34} {seconds:8.1f} s {len(ms):7d} GETs   p50 {statistics.median(ms):7.1f} ms   "
          f"p99 {p99:7.1f} ms   worst {ms[-1]:8.1f} ms   failed {errors}")


def _print_server_log(path: Path) -> None:
    """The server's slow full collections and its dropped-message warnings."""
    passes, drops = [], []
    for line in path.read_text(errors="replace").splitlines():
        if "full garbage collection" in line and ("INFO" in line or "most walked" in line):
            passes.append(line.split("full garbage collection", 1)[1].strip())
        elif "is not reading" in line:
            drops.append(line.strip())
    print(f"full collections of 100 ms or more: {len(passes)}")
    for line in passes:
        print(f"  {line}")
    print(f"WebSocket messages dropped for a client judged not reading: {len(drops)} warning line(s)")
    for line in drops[:5]:
        print(f"  {line}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="chain sizes, comma-separated")
    parser.add_argument("--body-mb", type=float, default=50.0, help="size of the big body (0: skip)")
    parser.add_argument("--no-socket", action="store_true", help="post with a client id that has no socket")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds probed after each phase (its storing, freeing and collection)")
    parser.add_argument("--gc-kinds", action="store_true",
                        help="server at DEBUG level: its slow full passes name the types they walked")
    parser.add_argument("--server-log", type=Path, default=None,
                        help="copy the server's log here (with PYTHONASYNCIODEBUG=1 it names slow callbacks)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    base = Path(tempfile.mkdtemp(prefix="bench_hostile_"))
    proc = None
    try:
        (base / "custom_nodes").mkdir()
        shutil.copytree(REPO / "bench" / "chain_pack", base / "custom_nodes" / "chain_pack",
                        ignore=shutil.ignore_patterns("__pycache__"))
        port = _free_port()
        log = open(base / "server.log", "w")
        proc = subprocess.Popen([sys.executable, str(REPO / "main.py"), "--base-directory", str(base),
                                 "--listen", "127.0.0.1", "--port", str(port), "--max-upload-size",
                                 str(max(100.0, args.body_mb * 2)), *(["--verbose", "DEBUG"] if args.gc_kinds else [])],
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            await wait_until_serving(session, proc, url, lambda rc: f"server exited with {rc}")
            load_before = os.getloadavg()
            # warm-up: the queue worker starts once the runtime has loaded
            await _phase(session, url, None, "warm-up", {"prompt": chain_prompt(3)}, True)
            prober = Prober(url)
            prober.start()
            results = []
            started = time.perf_counter()
            await asyncio.sleep(3)
            prober.mark("idle (3 s)", started, time.perf_counter())
            results.append(("idle (3 s)", 3.0))
            async def settle() -> None:
                started = time.perf_counter()
                await asyncio.sleep(args.settle)
                name = f"  then {args.settle:g} s #{len(results)}"  # the number keeps the rows apart
                prober.mark(name, started, time.perf_counter())
                results.append((name, args.settle))

            for n in sizes:
                name = f"{n}-node chain, POST to end"
                results.append((name, await _phase(session, url, prober, name,
                                                   {"prompt": chain_prompt(n, seed=n)}, not args.no_socket)))
                await settle()
            if args.body_mb > 0:
                name = f"{args.body_mb:g} MB body, POST to end"
                body = _body(args.body_mb)
                results.append((name, await _phase(session, url, prober, name, body, not args.no_socket)))
                await settle()
            prober.stop()
        load_after = os.getloadavg()
        print(f"server_hostile: GET /prompt latency while the server takes each input "
              f"({'no socket' if args.no_socket else 'a WebSocket client reading every message'}; "
              f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)")
        for name, seconds in results:
            _print(name, seconds, *prober.samples(name))
        log.flush()
        _print_server_log(base / "server.log")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.server_log is not None and (base / "server.log").is_file():
            shutil.copy(base / "server.log", args.server_log)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
