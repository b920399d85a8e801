"""Fixture packs in ComfyUI's style, run through the real server and WebSocket: they import,
their nodes appear in /object_info, their routes, progress, custom events, expansions (ids and
caching), V3 validation and execution all work, and a broken pack is reported."""
from __future__ import annotations

import shutil

import pytest

from tests.compat.compat_harness import start_pack_server
from tests.web.web_harness import collect_until_done, receive_json, ws_connect
from web.protocol import parse_binary_frame


@pytest.fixture
async def packs_server(tmp_path):
    srv = await start_pack_server(tmp_path)
    try:
        yield srv
    finally:
        await srv.close()


def _by_type(frames: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for frame in frames:
        if isinstance(frame, dict):
            out.setdefault(frame["type"], []).append(frame["data"])
        else:
            out.setdefault(f"binary{parse_binary_frame(frame)[0]}", []).append(frame)
    return out


async def _run(server, prompt: dict, client_id: str) -> tuple[dict, dict, dict]:
    ws, _ = await ws_connect(server, client_id)
    status, body = await server.post_prompt(prompt, client_id=client_id)
    assert status == 200, body
    frames = await collect_until_done(ws, body["prompt_id"])
    await ws.close()
    entry = (await server.get_json(f"/history/{body['prompt_id']}"))[body["prompt_id"]]
    return _by_type(frames), entry, body


async def test_packs_load_and_a_broken_pack_is_listed_with_its_error(packs_server, tmp_path):
    status = await packs_server.get_json("/custom_nodes/status")
    packs = {p["name"]: p for p in status["packs"]}
    assert packs["broken_pack"]["ok"] is False
    assert "comfy.this_module_does_not_exist" in packs["broken_pack"]["error"]
    assert packs["compat-v1-pack"]["ok"] and "CompatChain" in packs["compat-v1-pack"]["nodes"]
    assert packs["compat_v3_pack"]["nodes"] == ["V3Scale", "V3AsyncProgress", "V3Choose", "V3Block", "V3Double",
                                                "V3Show"]
    assert packs["example_pack"]["ok"] and "ExampleImageStats" in packs["example_pack"]["nodes"]
    prestartup = {p["name"]: p for p in status["prestartup"]}
    assert prestartup["broken_pack"]["ok"] is False and "on purpose" in prestartup["broken_pack"]["error"]
    assert prestartup["compat-v1-pack"]["ok"] is True
    # the prestartup script ran first, with folder_paths already answering for this server
    marker = (tmp_path / "output" / "prestartup_ran.txt").read_text()
    assert marker == str((tmp_path / "models").resolve())
    assert await packs_server.get_json("/api/custom_nodes/status") == status

    info = await packs_server.get_json("/object_info")
    for name in ("CompatResult", "V3Scale", "ExampleRepeatInvert", "ExampleImageStats", "KSampler"):
        assert name in info
    assert info["CompatCoreNodes"]["display_name"] == "Core Nodes Facade"
    assert info["CompatResult"]["input"]["required"]["sampler"][0][:2] == ["euler", "euler_cfg_pp"]
    assert info["V3Scale"]["input"]["required"]["mode"] == ["COMBO", {"default": "mul", "multiselect": False, "options": ["mul", "add"]}]
    assert info["V3Scale"]["input"]["hidden"] == {"unique_id": ["UNIQUE_ID"]}  # V3 renders `(kind,)`
    assert info["V3Scale"]["python_module"] == "custom_nodes.compat_v3_pack"
    extensions = await packs_server.get_json("/extensions")
    assert "/extensions/example_pack/example_pack.js" in extensions


async def test_pack_routes_are_served_bare_and_under_api(packs_server, tmp_path):
    for path in ("/compat_v1/ping", "/api/compat_v1/ping"):
        body = await packs_server.get_json(path)
        assert body == {"pong": True, "client_id": None, "output": str((tmp_path / "output").resolve())}
    assert (await packs_server.get_json("/example_pack/info"))["pack"] == "example_pack"
    # A second server in this process has its own folders; each one's pack routes see their own.
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)  # made at start-up
    (tmp_path / "models" / "checkpoints" / "mine.safetensors").write_bytes(b"x")
    other = await start_pack_server(tmp_path / "other")
    try:
        info = await packs_server.get_json("/object_info/CompatResult")
        assert info["CompatResult"]["input"]["optional"]["ckpt"][0] == ["none", "mine.safetensors"]
        info = await other.get_json("/object_info/CompatResult")
        assert info["CompatResult"]["input"]["optional"]["ckpt"][0] == ["none"]
        assert (await other.get_json("/compat_v1/ping"))["output"] == str((tmp_path / "other" / "output").resolve())
        assert (await packs_server.get_json("/compat_v1/ping"))["output"] == str((tmp_path / "output").resolve())
    finally:
        await other.close()


async def test_v1_pack_progress_events_expansion_and_caching(packs_server, tmp_path):
    prompt = {
        "1": {"class_type": "CompatNumber", "inputs": {"value": 3}},
        "2": {"class_type": "CompatProgress", "inputs": {"value": ["1", 0], "steps": 3}},
        "3": {"class_type": "CompatChain", "inputs": {"value": ["2", 0], "count": 2}},
        "4": {"class_type": "CompatGate", "inputs": {"value": ["3", 0]}},
        "5": {"class_type": "CompatResult", "inputs": {"value": ["4", 0], "sampler": "euler", "scheduler": "normal"}},
    }
    events, entry, body = await _run(packs_server, prompt, "v1")
    pid = body["prompt_id"]
    assert [p["value"] for p in events["progress"] if p["node"] == "2"] == [1, 2, 3]
    assert all(p["max"] == 3 and p["prompt_id"] == pid for p in events["progress"])
    assert len(events["binary1"]) == 1  # the ProgressBar preview
    assert events["compat.done"] == [{"node": "2", "value": 3, "interrupted": False}]
    executing = [e["node"] for e in events["executing"] if e["node"] is not None]
    assert executing[:5] == ["1", "2", "3", "3.0.0.1", "3.0.0.2"] and executing[-2:] == ["4", "5"]
    # the expanded nodes are shown on their parent
    shown = {e["node"]: e["display_node"] for e in events["executing"] if e["node"]}
    assert shown["3.0.0.1"] == "3"
    ui = entry["outputs"]["5"]
    assert ui["values"] == ["32"] and ui["sampler"] == ["euler", "normal"] and ui["device"] == ["cpu"]
    assert ui["digest"] == [__import__("hashlib").sha256(b"32").hexdigest()[:8]]  # node_helpers.hasher
    assert ui["preview"] == ["none", 0]  # comfy.cli_args.args: this server's flags (port 0: any free)
    image = ui["images"][0]
    assert image["subfolder"] == "compat" and (tmp_path / "output" / "compat" / image["filename"]).is_file()

    # The same prompt again: everything but the output node is cached; the expansion is not redone.
    events2, entry2, _ = await _run(packs_server, prompt, "v1")
    assert sorted(events2["execution_cached"][0]["nodes"]) == ["1", "2", "3", "4", "5"]
    assert [e["node"] for e in events2["executing"] if e["node"]] == []
    assert "compat.done" not in events2 and entry2["outputs"]["5"]["values"] == ["32"]

    # A changed constant downstream of the expansion reuses the cached expanded nodes' work.
    prompt["3"]["inputs"]["count"] = 3
    events3, entry3, _ = await _run(packs_server, prompt, "v1")
    assert entry3["outputs"]["5"]["values"] == ["33"]
    assert [e["node"] for e in events3["executing"] if e["node"]][:4] == ["3", "3.0.0.1", "3.0.0.2", "3.0.0.3"]


async def test_a_pack_route_interrupts_a_pack_node_through_model_management(packs_server):
    ws, _ = await ws_connect(packs_server, "stop")
    prompt = {"1": {"class_type": "CompatWaitForStop", "inputs": {"value": 1}},
              "2": {"class_type": "CompatResult", "inputs": {"value": ["1", 0], "sampler": "euler",
                                                            "scheduler": "normal"}}}
    status, body = await packs_server.post_prompt(prompt, client_id="stop")
    assert status == 200
    await receive_json(ws, lambda m: m["type"] == "executing" and m["data"].get("node") == "1")
    ping = await packs_server.get_json("/compat_v1/ping")
    assert ping["client_id"] == "stop"  # PromptServer.instance.client_id: the running prompt's client
    async with packs_server.session.post(f"{packs_server.url}/compat_v1/stop") as resp:
        assert resp.status == 200
    events = _by_type(await collect_until_done(ws, body["prompt_id"]))
    await ws.close()
    assert events["execution_interrupted"][0]["node_id"] == "1"
    assert "execution_error" not in events


async def test_execution_blocker_from_comfy_execution_graph(packs_server):
    prompt = {
        "1": {"class_type": "CompatNumber", "inputs": {"value": -4}},
        "4": {"class_type": "CompatGate", "inputs": {"value": ["1", 0]}},
        "5": {"class_type": "CompatResult", "inputs": {"value": ["4", 0], "sampler": "euler", "scheduler": "normal"}},
    }
    events, entry, _ = await _run(packs_server, prompt, "block")
    errors = events["execution_error"]
    assert errors[0]["exception_type"] == "ExecutionBlocked" and "negative value" in errors[0]["exception_message"]
    assert "5" not in entry["outputs"]


async def test_any_type_nodes_facade_and_comfy_utils(packs_server):
    prompt = {
        "1": {"class_type": "CompatCoreNodes", "inputs": {"width": 64}},
        "2": {"class_type": "CompatLatentWidth", "inputs": {"latent": ["1", 0]}},
        "3": {"class_type": "CompatResult", "inputs": {"value": ["2", 0], "sampler": "euler", "scheduler": "normal"}},
        "4": {"class_type": "CompatResult", "inputs": {"value": ["1", 1], "sampler": "euler", "scheduler": "karras"}},
        "5": {"class_type": "CompatAnyToString", "inputs": {"anything": ["1", 0]}},
        "6": {"class_type": "CompatResult", "inputs": {"value": ["5", 0], "sampler": "euler", "scheduler": "normal"}},
    }
    _, entry, body = await _run(packs_server, prompt, "facade")
    assert entry["status"]["status_str"] == "success", entry["status"]
    assert entry["outputs"]["3"]["values"] == ["16"]  # 64 px -> 8 latent -> common_upscale x2
    assert entry["outputs"]["4"]["values"] == ["type,True,Core Nodes Facade"]
    assert "samples" in entry["outputs"]["6"]["values"][0]


async def test_comfy_sd_loads_a_checkpoint_from_the_model_folders(tmp_path, tiny_sd1_ckpt):
    folder = tmp_path / "models" / "checkpoints"
    folder.mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, folder / "tiny.safetensors")
    server = await start_pack_server(tmp_path)
    try:
        prompt = {
            "1": {"class_type": "CompatLoadCheckpoint", "inputs": {"ckpt_name": "tiny.safetensors"}},
            "2": {"class_type": "CompatResult", "inputs": {"value": ["1", 3], "sampler": "euler",
                                                          "scheduler": "normal", "ckpt": "tiny.safetensors"}},
            "3": {"class_type": "CompatAnyToString", "inputs": {"anything": ["1", 0]}},
            "4": {"class_type": "CompatResult", "inputs": {"value": ["3", 0], "sampler": "euler",
                                                          "scheduler": "normal"}},
        }
        _, entry, _ = await _run(server, prompt, "sd")
        assert entry["status"]["status_str"] == "success", entry["status"]
        assert int(entry["outputs"]["2"]["values"][0]) > 100  # keys of the state dict
        assert entry["outputs"]["2"]["ckpt"] == [str((folder / "tiny.safetensors").resolve())]
        assert "ModelPatcher" in entry["outputs"]["4"]["values"][0]
    finally:
        await server.close()


async def test_v3_nodes_validate(packs_server):
    base = {"1": {"class_type": "V3Scale", "inputs": {"value": 5, "factor": 3.0, "mode": "mul"}},
            "2": {"class_type": "V3Show", "inputs": {"value": ["1", 0]}}}
    status, body = await packs_server.post_prompt(base)
    assert status == 400
    error = body["node_errors"]["1"]["errors"][0]
    assert error["type"] == "custom_validation_failed" and "factor 3 is not allowed" in error["details"]
    base["1"]["inputs"].update(factor=2.0, mode="pow")
    status, body = await packs_server.post_prompt(base)
    assert status == 400 and body["node_errors"]["1"]["errors"][0]["type"] == "value_not_in_list"
    base["1"]["inputs"].update(mode="mul", value=1000)
    status, body = await packs_server.post_prompt(base)
    assert status == 400 and body["node_errors"]["1"]["errors"][0]["type"] == "value_bigger_than_max"


async def test_v3_nodes_run_hidden_async_progress_lazy_expand_and_block(packs_server):
    prompt = {
        "1": {"class_type": "V3Scale", "inputs": {"value": 5, "factor": 2.0, "mode": "mul"}},
        "2": {"class_type": "V3AsyncProgress", "inputs": {"value": ["1", 0]}},
        "3": {"class_type": "V3Double", "inputs": {"value": ["1", 0]}},
        "4": {"class_type": "V3Choose", "inputs": {"first": False, "a": ["3", 0], "b": ["2", 0]}},
        "5": {"class_type": "V3Show", "inputs": {"value": ["4", 0]}},
        "6": {"class_type": "V3Block", "inputs": {"value": ["1", 0], "block": True}},
        "7": {"class_type": "V3Show", "inputs": {"value": ["6", 0]}},
        "8": {"class_type": "V3Show", "inputs": {"value": ["3", 0]}},
    }
    events, entry, _ = await _run(packs_server, prompt, "v3")
    outputs = entry["outputs"]
    assert outputs["1"]["text"] == ["1:10"]  # cls.hidden.unique_id inside execute
    assert outputs["5"]["text"] == ["11"]  # lazy: only b (the async node) was needed
    assert outputs["8"]["text"] == ["21"]  # expansion: 10 * 2, then + 1
    assert "7" not in outputs
    assert [(p["value"], p["max"]) for p in events["progress"] if p["node"] == "2"] == [(1, 2), (2, 2)]
    blocked = [e for e in events["execution_error"] if e["exception_type"] == "ExecutionBlocked"]
    assert blocked and "blocked by V3Block" in blocked[0]["exception_message"]
    executing = [e["node"] for e in events["executing"] if e["node"]]
    assert "3.0.0.1" in executing and "3.0.0.2" in executing
    assert entry["status"]["status_str"] == "success"


async def test_example_pack_runs(packs_server):
    prompt = {
        "1": {"class_type": "ExampleSolidImage", "inputs": {"width": 8, "height": 8, "value": 0.25}},
        "2": {"class_type": "ExampleRepeatInvert", "inputs": {"image": ["1", 0], "times": 3}},
        "3": {"class_type": "ExampleImageStats", "inputs": {"image": ["2", 0], "channel": "red"}},
    }
    events, entry, _ = await _run(packs_server, prompt, "example")
    assert entry["outputs"]["3"]["text"] == ["red: 0.7500"]
    assert [e["node"] for e in events["example_pack.inverted"]] == ["2.0.0.1", "2.0.0.2", "2.0.0.3"]
    assert [p["node"] for p in events["progress"]] == ["2.0.0.1", "2.0.0.2", "2.0.0.3"]


async def test_disable_all_custom_nodes_and_whitelist(tmp_path):
    server = await start_pack_server(tmp_path, disable_all_custom_nodes=True,
                                     whitelist_custom_nodes=("compat_v3_pack",))
    try:
        status = await server.get_json("/custom_nodes/status")
        assert [p["name"] for p in status["packs"]] == ["compat_v3_pack"] and status["prestartup"] == []
        info = await server.get_json("/object_info")
        assert "V3Scale" in info and "CompatNumber" not in info and "ExampleSolidImage" not in info
    finally:
        await server.close()
