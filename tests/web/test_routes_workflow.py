"""POST /workflow/to_prompt: a saved workflow (subgraphs included) becomes the API prompt, or is
queued; compound node ids ("7:3") come back unchanged in events, errors and history."""
from __future__ import annotations

import copy

from tests.web.web_harness import collect_until_done, ws_connect

ROUTE = "/api/workflow/to_prompt"


def _workflow(value: int | None = 5) -> dict:
    """Instance 7 of a subgraph: WebTestConst (value promoted) -> WebTestSlow -> WebTestOutput
    inside, the Const value also passed out to a WebTestOutput at the root."""
    definition = {
        "id": "chain-sg", "name": "Chain", "inputNode": {"id": -10}, "outputNode": {"id": -20},
        "inputs": [{"name": "value", "type": "INT", "linkIds": [1]}],
        "outputs": [{"name": "INT", "type": "INT", "linkIds": [4]}],
        "nodes": [
            {"id": 1, "type": "WebTestConst", "mode": 0, "widgets_values": [9],
             "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": 1}]},
            {"id": 2, "type": "WebTestSlow", "mode": 0, "widgets_values": [0, 2, 0, 0, ""],
             "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": 2}]},
            {"id": 3, "type": "WebTestOutput", "mode": 0, "widgets_values": [0, "inner"],
             "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": 3}]},
        ],
        "links": [{"id": 1, "origin_id": -10, "origin_slot": 0, "target_id": 1, "target_slot": 0, "type": "INT"},
                  {"id": 2, "origin_id": 1, "origin_slot": 0, "target_id": 2, "target_slot": 0, "type": "INT"},
                  {"id": 3, "origin_id": 2, "origin_slot": 0, "target_id": 3, "target_slot": 0, "type": "INT"},
                  {"id": 4, "origin_id": 1, "origin_slot": 0, "target_id": -20, "target_slot": 0, "type": "INT"}],
    }
    return {
        "nodes": [{"id": 7, "type": "chain-sg", "mode": 0, "widgets_values": [value],
                   "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": None}]},
                  {"id": 8, "type": "WebTestOutput", "mode": 0, "widgets_values": [0, "outer"],
                   "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": 10}]}],
        "links": [[10, 7, 0, 8, 0, "INT"]],
        "definitions": {"subgraphs": [definition]},
        "version": 0.4,
    }


async def _post(server, body, **kw):  # noqa: ANN001, ANN202
    async with server.session.post(f"{server.url}{ROUTE}", json=body, **kw) as resp:
        return resp.status, await resp.json()


async def test_converts_a_saved_workflow_with_subgraphs(server):
    status, body = await _post(server, _workflow())
    assert status == 200
    prompt = body["prompt"]
    assert set(prompt) == {"7:1", "7:2", "7:3", "8"}
    assert prompt["7:1"]["inputs"] == {"value": 5}
    assert prompt["7:2"]["inputs"]["value"] == ["7:1", 0]
    assert prompt["8"]["inputs"] == {"filename_prefix": "outer", "value": ["7:1", 0]}
    # the wrapped form, bare route too
    async with server.session.post(f"{server.url}/workflow/to_prompt", json={"workflow": _workflow(6)}) as resp:
        assert resp.status == 200 and (await resp.json())["prompt"]["7:1"]["inputs"] == {"value": 6}
    assert server.state.queue.remaining == 0


async def test_queue_runs_it_and_compound_ids_come_back_everywhere(server):
    ws, _ = await ws_connect(server, "wf-client")
    try:
        workflow = _workflow(4)
        status, body = await _post(server, {"workflow": workflow, "queue": True, "client_id": "wf-client"})
        assert status == 200, body
        prompt_id = body["prompt_id"]
        assert body["node_errors"] == {} and "7:3" in body["prompt"]
        frames = await collect_until_done(ws, prompt_id)
    finally:
        await ws.close()
    started = [f["data"]["node"] for f in frames if isinstance(f, dict) and f["type"] == "executing"]
    assert {"7:1", "7:2", "7:3", "8"} <= set(started)
    executed = {f["data"]["node"]: f["data"] for f in frames if isinstance(f, dict) and f["type"] == "executed"}
    assert executed["7:3"]["display_node"] == "7:3"
    assert executed["7:3"]["output"]["values"] == [4 + 2]  # Slow adds its steps
    assert executed["8"]["output"]["values"] == [4]
    states = [f["data"]["nodes"] for f in frames if isinstance(f, dict) and f["type"] == "progress_state"]
    assert any(nodes.get("7:2", {}).get("display_node_id") == "7:2" for nodes in states)
    entry = await server.wait_history(prompt_id)
    assert set(entry["outputs"]) == {"7:3", "8"}
    assert entry["prompt"][2]["7:2"]["inputs"]["value"] == ["7:1", 0]
    assert entry["prompt"][3]["extra_pnginfo"]["workflow"] == workflow  # as the editor sends it
    assert entry["meta"]["7:3"]["node_id"] == "7:3"
    job = await server.get_json(f"/api/jobs/{prompt_id}")
    assert set(job["outputs"]) == {"7:3", "8"} and job["preview_output"]["nodeId"] in ("7:3", "8")


async def test_validation_errors_name_compound_ids(server):
    status, body = await _post(server, {"workflow": _workflow(5000), "queue": True})
    assert status == 400
    assert body["error"]["type"] == "prompt_outputs_failed_validation"
    assert "7:1" in body["node_errors"] and body["prompt"]["7:1"]["inputs"]["value"] == 5000
    status, body = await _post(server, {"workflow": _workflow(), "queue": True, "prompt_id": "mine"})
    assert status == 400 and body["error"]["type"] == "invalid_prompt_id"
    assert server.state.queue.remaining == 0


async def test_bad_bodies_are_4xx_json(server):
    async with server.session.post(f"{server.url}{ROUTE}", data=b"{oops") as resp:
        assert resp.status == 400 and (await resp.json())["error"]["type"] == "invalid_json"
    status, body = await _post(server, [1, 2])
    assert status == 400 and body["error"]["type"] == "invalid_request"
    status, body = await _post(server, {"1": {"class_type": "WebTestConst", "inputs": {}}})
    assert status == 400 and body["error"]["type"] == "invalid_workflow"
    status, body = await _post(server, {"workflow": {"nodes": "x", "links": []}})
    assert status == 400 and body["error"]["type"] == "invalid_workflow"
    status, body = await _post(server, {"workflow": _workflow(), "queue": "yes"})
    assert status == 400 and body["error"]["type"] == "invalid_request"
    unknown = copy.deepcopy(_workflow())
    unknown["definitions"]["subgraphs"][0]["nodes"][1]["type"] = "NoSuchNode"
    status, body = await _post(server, unknown)
    assert status == 400 and body["error"]["type"] == "missing_node_type"
    assert body["error"]["extra_info"] == {"node_types": ["NoSuchNode"]}
    looped = copy.deepcopy(_workflow())
    looped["definitions"]["subgraphs"][0]["nodes"].append({"id": 5, "type": "chain-sg", "mode": 0})
    status, body = await _post(server, looped)
    assert status == 400 and body["error"]["type"] == "invalid_workflow"
    assert "contains itself" in body["error"]["details"]


async def test_a_failing_node_inside_a_subgraph_is_named_by_its_compound_id(server):
    workflow = _workflow(3)
    inner = workflow["definitions"]["subgraphs"][0]["nodes"][1]
    inner.update(type="WebTestFail", widgets_values=[0, "inside"])
    ws, _ = await ws_connect(server, "wf-fail")
    try:
        status, body = await _post(server, {"workflow": workflow, "queue": True, "client_id": "wf-fail"})
        assert status == 200, body
        frames = await collect_until_done(ws, body["prompt_id"])
    finally:
        await ws.close()
    errors = [f["data"] for f in frames if isinstance(f, dict) and f["type"] == "execution_error"]
    assert errors and errors[0]["node_id"] == "7:2" and errors[0]["node_type"] == "WebTestFail"
    job = await server.get_json(f"/api/jobs/{body['prompt_id']}")
    assert job["status"] == "failed"
