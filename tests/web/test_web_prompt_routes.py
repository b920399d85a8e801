"""POST/GET /prompt, /queue, /interrupt, /history, /free, each also under /api (a live server)."""
from __future__ import annotations

import asyncio

import pytest

from tests.web.web_harness import chain

# client-chosen prompt ids are UUIDs (POST /prompt refuses anything else)
MINE = "0b9e1c3a-5d7f-4e2a-9c1b-000000000001"


async def _block_worker(server, delay: float = 0.2, steps: int = 50) -> str:
    """Queue a slow prompt so that later prompts stay pending; returns its id."""
    status, body = await server.post_prompt(chain(1, steps=steps, delay=delay, tag="blocker"))
    assert status == 200, body
    for _ in range(200):
        if server.state.queue.running is not None:
            return body["prompt_id"]
        await asyncio.sleep(0.01)
    raise AssertionError("blocker never started")


@pytest.mark.parametrize("prefix", ["", "/api"])
async def test_post_prompt_runs_and_history_has_comfyui_shape(server, prefix):
    async with server.session.post(f"{server.url}{prefix}/prompt",
                                   json={"prompt": chain(4), "client_id": "cli",
                                         "extra_data": {"api_key_comfy_org": "secret", "x": 1}}) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert set(body) == {"prompt_id", "number", "node_errors"} and body["node_errors"] == {}
    entry = await server.wait_history(body["prompt_id"])
    number, pid, prompt, extra, outputs = entry["prompt"]
    assert (number, pid, outputs) == (body["number"], body["prompt_id"], ["3"])
    assert prompt["1"]["inputs"]["value"] == 4
    # the API key is never stored or shown; create_time (ms) as today's ComfyUI
    assert extra == {"x": 1, "client_id": "cli", "create_time": extra["create_time"]}
    assert entry["outputs"] == {"3": {"images": [{"filename": "webtest_00006.png", "subfolder": "",
                                                  "type": "output"}], "values": [6]}}
    assert entry["status"]["status_str"] == "success" and entry["status"]["completed"] is True
    kinds = [m[0] for m in entry["status"]["messages"]]
    assert kinds == ["execution_start", "execution_cached", "execution_success"]
    assert entry["meta"]["3"]["node_id"] == "3"
    assert (server.state.env.output_dir / "webtest_00006.png").is_file()


async def test_prompt_errors_have_comfyui_shapes(server):
    status, body = await server.post_prompt(None)
    assert status == 400 and body["error"]["type"] == "invalid_prompt"
    async with server.session.post(f"{server.url}/prompt", json={"client_id": "x"}) as resp:
        assert resp.status == 400
        assert (await resp.json()) == {"error": {"type": "no_prompt", "message": "No prompt provided",
                                                 "details": "No prompt provided", "extra_info": {}},
                                       "node_errors": {}}
    status, body = await server.post_prompt({"1": {"class_type": "Nope", "inputs": {}}})
    # newer ComfyUI names this `missing_node_type`; the graph engine follows it
    assert status == 400 and body["error"]["type"] in ("invalid_prompt", "missing_node_type")
    assert "Nope" in body["error"]["message"] + body["error"]["details"]
    bad = chain(1)
    bad["1"]["inputs"]["value"] = 5000
    status, body = await server.post_prompt(bad)
    assert status == 400 and body["error"]["type"] == "prompt_outputs_failed_validation"
    assert body["node_errors"]["1"]["errors"][0]["type"] == "value_bigger_than_max"
    assert body["node_errors"]["1"]["class_type"] == "WebTestConst"
    assert server.state.queue.remaining == 0 and server.state.store.history() == {}


@pytest.mark.parametrize("field, value", [
    ("client_id", 5), ("extra_data", "s"), ("number", "1"),
    ("number", True), ("partial_execution_targets", "3"), ("partial_execution_targets", [3]),
])
async def test_malformed_request_fields_are_400_naming_the_field(server, field, value):
    status, body = await server.post_prompt(chain(1), **{field: value})
    assert status == 400 and body["error"]["type"] == "invalid_prompt"
    assert field in body["error"]["details"]


async def test_partial_execution_targets_and_custom_prompt_id(server):
    prompt = chain(2)
    prompt["4"] = {"class_type": "WebTestOutput", "inputs": {"value": ["1", 0], "filename_prefix": "other"}}
    status, body = await server.post_prompt(prompt, prompt_id=MINE, partial_execution_targets=["4"])
    assert status == 200 and body["prompt_id"] == MINE
    entry = await server.wait_history(MINE)
    assert entry["prompt"][4] == ["4"] and list(entry["outputs"]) == ["4"]
    status, body = await server.post_prompt(prompt, partial_execution_targets=[])
    assert status == 400 and body["error"]["type"] == "prompt_no_outputs"


async def test_queue_listing_order_front_number_delete_and_clear(server):
    blocker = await _block_worker(server)
    ids = {}
    for name, extra in [("a", {}), ("b", {}), ("front", {"front": True}), ("num", {"number": -100.5})]:
        status, body = await server.post_prompt(chain(2, tag=name), **extra)
        assert status == 200
        ids[name] = body["prompt_id"]
    assert (await server.get_json("/prompt")) == {"exec_info": {"queue_remaining": 5}}
    queue = await server.get_json("/api/queue")
    assert [item[1] for item in queue["queue_running"]] == [blocker]
    pending = [item[1] for item in queue["queue_pending"]]
    assert pending == [ids["num"], ids["front"], ids["a"], ids["b"]]
    assert queue["queue_pending"][0][0] == -100.5 and len(queue["queue_pending"][0]) == 5
    async with server.session.post(f"{server.url}/queue", json={"delete": [ids["a"], blocker]}) as resp:
        assert resp.status == 200
    pending = [item[1] for item in (await server.get_json("/queue"))["queue_pending"]]
    assert pending == [ids["num"], ids["front"], ids["b"]]  # the running one is not deleted
    async with server.session.post(f"{server.url}/api/queue", json={"clear": True}) as resp:
        assert resp.status == 200
    queue = await server.get_json("/queue")
    assert queue["queue_pending"] == [] and len(queue["queue_running"]) == 1
    assert server.state.store.pending_items() == []
    async with server.session.post(f"{server.url}/interrupt", json={}) as resp:
        assert resp.status == 200
    entry = await server.wait_history(blocker)
    assert entry["status"]["messages"][-1][0] == "execution_interrupted"


async def test_interrupt_by_prompt_id_only_stops_that_prompt(server):
    blocker = await _block_worker(server, delay=0.05)
    async with server.session.post(f"{server.url}/interrupt", json={"prompt_id": "someone-else"}) as resp:
        assert resp.status == 200
    await asyncio.sleep(0.1)
    assert server.state.queue.running is not None and server.state.queue.running.prompt_id == blocker
    async with server.session.post(f"{server.url}/api/interrupt", data=b"not json") as resp:
        assert resp.status == 200  # an invalid body counts as {} (global interrupt)
    entry = await server.wait_history(blocker)
    assert entry["status"]["status_str"] == "error"
    assert [m[0] for m in entry["status"]["messages"]][-1] == "execution_interrupted"


async def test_interrupt_with_matching_prompt_id(server):
    blocker = await _block_worker(server, delay=0.05)
    async with server.session.post(f"{server.url}/interrupt", json={"prompt_id": blocker}) as resp:
        assert resp.status == 200
    entry = await server.wait_history(blocker)
    assert entry["status"]["messages"][-1][1]["prompt_id"] == blocker


async def test_history_routes(server):
    ids = []
    for n in range(4):
        status, body = await server.post_prompt(chain(n, tag=str(n)))
        ids.append(body["prompt_id"])
    for pid in ids:
        await server.wait_history(pid)
    assert list(await server.get_json("/history")) == ids
    assert list(await server.get_json("/history?max_items=2")) == ids[2:]
    assert list(await server.get_json("/api/history?max_items=1&offset=1")) == ids[1:2]
    assert await server.get_json("/history?offset=10") == {}
    assert await server.get_json("/history/nope") == {}
    assert list(await server.get_json(f"/api/history/{ids[0]}")) == [ids[0]]
    async with server.session.get(f"{server.url}/history?max_items=x") as resp:
        assert resp.status == 400 and "max_items" in (await resp.json())["error"]["message"]
    async with server.session.post(f"{server.url}/history", json={"delete": [ids[0]]}) as resp:
        assert resp.status == 200
    assert list(await server.get_json("/history")) == ids[1:]
    async with server.session.post(f"{server.url}/history", json={"delete": "x"}) as resp:
        assert resp.status == 400
    async with server.session.post(f"{server.url}/api/history", json={"clear": True}) as resp:
        assert resp.status == 200
    assert await server.get_json("/history") == {}


async def test_cached_rerun_still_reports_outputs(server):
    _, first = await server.post_prompt(chain(7))
    await server.wait_history(first["prompt_id"])
    _, second = await server.post_prompt(chain(7))
    entry = await server.wait_history(second["prompt_id"])
    assert entry["outputs"]["3"]["values"] == [9]
    cached = dict(entry["status"]["messages"])["execution_cached"]["nodes"]
    assert set(cached) >= {"1", "2"}


async def test_free_resets_the_executor_cache(server):
    _, body = await server.post_prompt(chain(3))
    await server.wait_history(body["prompt_id"])
    assert server.state.executor.cache_keys()
    async with server.session.post(f"{server.url}/api/free", json={"free_memory": True,
                                                                  "unload_models": True}) as resp:
        assert resp.status == 200
    assert not server.state.executor.cache_keys()
    async with server.session.post(f"{server.url}/free", data=b"[1]") as resp:
        assert resp.status == 400


async def test_failing_node_reports_error_and_server_keeps_serving(server):
    prompt = {"1": {"class_type": "WebTestConst", "inputs": {"value": 1}},
              "2": {"class_type": "WebTestFail", "inputs": {"value": ["1", 0], "message": "kaputt"}},
              "3": {"class_type": "WebTestOutput", "inputs": {"value": ["2", 0], "filename_prefix": "f"}}}
    _, body = await server.post_prompt(prompt)
    entry = await server.wait_history(body["prompt_id"])
    assert entry["status"]["status_str"] == "error"
    error = dict(entry["status"]["messages"])["execution_error"]
    assert error["node_id"] == "2" and error["exception_message"].strip() == "kaputt"
    _, ok = await server.post_prompt(chain(1))
    assert (await server.wait_history(ok["prompt_id"]))["status"]["status_str"] == "success"


async def test_the_terminal_says_got_prompt_and_how_long_it_ran(server, caplog):
    """ComfyUI's two lines per prompt, so a user watching the terminal sees work happen; an
    invalid prompt says why."""
    caplog.set_level("INFO")
    status, body = await server.post_prompt(chain(2))
    assert status == 200
    await server.wait_history(body["prompt_id"])
    messages = [r.getMessage() for r in caplog.records]
    assert "got prompt" in messages
    assert any(m.startswith("Prompt executed in ") and m.endswith(" seconds") for m in messages)
    caplog.clear()
    status, _ = await server.post_prompt({"1": {"class_type": "Nope", "inputs": {}}})
    assert status == 400
    assert any(r.levelname == "WARNING" and r.getMessage().startswith("invalid prompt:") for r in caplog.records)
