"""--ray: the dispatcher honours pause and the queue order (it takes prompts through the same
`PromptQueue.get`). Two CPU worker actors on the session's local Ray (tests/web/ray_harness.py)."""
from __future__ import annotations

from tests.web.ray_harness import wait_until, wait_workers_ready
from tests.web.ray_test_nodes import gated


async def _post(server, path: str, body: dict) -> dict:
    async with server.session.post(f"{server.url}{path}", json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_the_ray_dispatcher_holds_while_paused_and_takes_prompts_in_the_moved_order(ray_server, tmp_path):
    server = ray_server
    await wait_workers_ready(server)
    assert (await _post(server, "/api/queue/pause", {}))["paused"] is True
    gates = [tmp_path / f"gate-{n}" for n in range(3)]
    ids = [(await server.post_prompt(gated(n + 1, gate)))[1]["prompt_id"] for n, gate in enumerate(gates)]
    a, b, c = ids

    queue = server.state.queue
    await wait_until(lambda: queue.held == 3, what="the dispatcher to hold the queue")  # both workers are free, and the dispatcher took nothing
    state = await server.get_json("/api/queue/state")
    assert state["running"] == [] and state["pending"] == ids
    assert all(w["running"] is None for w in (await server.get_json("/system_stats"))["workers"])

    assert (await _post(server, "/api/queue/move", {"prompt_id": c, "position": 0}))["pending"] == [c, a, b]
    await _post(server, "/api/queue/resume", {})

    await wait_until(lambda: len(queue.running_items()) == 2, what="both workers to take a prompt")
    state = await server.get_json("/api/queue/state")
    assert state["running"] == [c, a] and state["pending"] == [b]  # taken in the queue's order
    for gate in gates:
        gate.touch()
    for pid in ids:
        assert (await server.wait_history(pid, timeout=60))["status"]["completed"] is True
