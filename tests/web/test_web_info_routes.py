"""Read-only routes: /object_info, /system_stats, /features, /embeddings, /models, /extensions, /jobs."""
from __future__ import annotations

import pytest

from tests.web.web_harness import chain


@pytest.mark.parametrize("prefix", ["", "/api"])
async def test_object_info_lists_every_node_in_v1_shape(server, prefix):
    info = await server.get_json(f"{prefix}/object_info")
    assert {"WebTestConst", "WebTestSlow", "WebTestOutput"} <= set(info)
    const = info["WebTestConst"]
    assert const["input"]["required"]["value"] == ["INT", {"default": 1, "min": 0, "max": 1000}]
    assert const["input_order"] == {"required": ["value"]}
    assert const["output"] == ["INT"] and const["output_is_list"] == [False] and const["output_name"] == ["INT"]
    assert const["name"] == "WebTestConst" and const["category"] == "test" and const["output_node"] is False
    assert info["WebTestOutput"]["output_node"] is True
    one = await server.get_json(f"{prefix}/object_info/WebTestSlow")
    assert list(one) == ["WebTestSlow"] and one["WebTestSlow"] == info["WebTestSlow"]
    assert await server.get_json(f"{prefix}/object_info/NoSuchNode") == {}


async def test_system_stats_and_features(server):
    stats = await server.get_json("/api/system_stats")
    system = stats["system"]
    for key in ("os", "ram_total", "ram_free", "comfyui_version", "required_frontend_version", "python_version",
                "pytorch_version", "embedded_python", "argv"):
        assert key in system
    assert system["ram_total"] > 0 and system["embedded_python"] is False
    device = stats["devices"][0]
    assert set(device) >= {"name", "type", "index", "vram_total", "vram_free", "torch_vram_total", "torch_vram_free"}
    assert await server.get_json("/features") == {"supports_preview_metadata": True,
                                                  "max_upload_size": 100 * 1024 * 1024,
                                                  "node_replacements": True, "assets": False}


async def test_model_folder_routes(server):
    folders = server.state.env.folders
    (folders.paths("embeddings")[0] / "sub").mkdir(parents=True)
    (folders.paths("embeddings")[0] / "sub" / "easyneg.safetensors").write_bytes(b"x")
    (folders.paths("embeddings")[0] / "bad.pt").write_bytes(b"x")
    (folders.paths("loras")[0]).mkdir(parents=True, exist_ok=True)  # made at start-up
    (folders.paths("loras")[0] / "style.safetensors").write_bytes(b"x")
    (folders.paths("loras")[0] / "readme.txt").write_text("not a model")
    assert await server.get_json("/embeddings") == ["bad", "sub/easyneg"]
    kinds = await server.get_json("/api/models")
    assert {"checkpoints", "loras", "vae", "embeddings"} <= set(kinds)
    assert await server.get_json("/models/loras") == ["style.safetensors"]
    assert await server.get_json("/models/checkpoints") == []
    async with server.session.get(f"{server.url}/models/nope") as resp:
        assert resp.status == 404 and "nope" in (await resp.json())["error"]["message"]


async def test_extensions_lists_our_extension(server):
    urls = await server.get_json("/extensions")
    assert isinstance(urls, list) and all(u.startswith("/extensions/") and u.endswith(".js") for u in urls)
    assert any(u.startswith("/extensions/comfy-engine/") for u in urls)


async def test_jobs_reflect_queue_and_history(server):
    _, done = await server.post_prompt(chain(2))
    await server.wait_history(done["prompt_id"])
    bad = {"1": {"class_type": "WebTestConst", "inputs": {"value": 1}},
           "2": {"class_type": "WebTestFail", "inputs": {"value": ["1", 0], "message": "m"}},
           "3": {"class_type": "WebTestOutput", "inputs": {"value": ["2", 0], "filename_prefix": "f"}}}
    _, failed = await server.post_prompt(bad)
    await server.wait_history(failed["prompt_id"])
    _, slow = await server.post_prompt(chain(1, steps=100, delay=0.05))
    _, waiting = await server.post_prompt(chain(3), extra_data={"extra_pnginfo": {"workflow": {"id": "wf-1"}}})
    listing = await server.get_json("/api/jobs?status=in_progress,pending&limit=200&offset=0")
    assert {j["id"]: j["status"] for j in listing["jobs"]} in (
        {slow["prompt_id"]: "in_progress", waiting["prompt_id"]: "pending"},
        {slow["prompt_id"]: "pending", waiting["prompt_id"]: "pending"})
    assert listing["pagination"] == {"offset": 0, "limit": 200, "total": 2, "has_more": False}
    finished = await server.get_json("/jobs?status=completed,failed,cancelled&limit=1")
    assert finished["pagination"]["total"] == 2 and finished["pagination"]["has_more"] is True
    assert finished["jobs"][0]["id"] == failed["prompt_id"]  # newest first
    ok = (await server.get_json(f"/jobs/{done['prompt_id']}"))
    # file items count; plain values ("values": [4]) do not (ComfyUI's comfy_execution/jobs.py)
    assert ok["status"] == "completed" and ok["outputs_count"] == 1 and ok["previewable_outputs_count"] == 1
    assert ok["preview_output"] == {"filename": "webtest_00004.png", "subfolder": "", "type": "output",
                                    "nodeId": "3", "mediaType": "images"}
    assert ok["execution_start_time"] <= ok["execution_end_time"]
    assert ok["outputs"]["3"]["values"] == [4] and ok["workflow"]["prompt"]["1"]["inputs"]["value"] == 2
    err = await server.get_json(f"/jobs/{failed['prompt_id']}")
    assert err["status"] == "failed" and err["execution_error"]["node_id"] == "2"
    by_wf = await server.get_json("/jobs?workflow_id=wf-1")
    assert [j["id"] for j in by_wf["jobs"]] == [waiting["prompt_id"]]
    async with server.session.get(f"{server.url}/jobs/unknown") as resp:
        assert resp.status == 404 and await resp.json() == {"error": "Job not found"}
    async with server.session.get(f"{server.url}/jobs?status=weird") as resp:
        assert resp.status == 400
    async with server.session.post(f"{server.url}/jobs/cancel", json={"job_ids": [waiting["prompt_id"]]}) as resp:
        assert await resp.json() == {"cancelled": True}
    async with server.session.post(f"{server.url}/api/jobs/{slow['prompt_id']}/cancel") as resp:
        assert await resp.json() == {"cancelled": True}
    await server.wait_history(slow["prompt_id"])
    cancelled = await server.get_json(f"/jobs/{slow['prompt_id']}")
    assert cancelled["status"] == "cancelled"


async def test_app_factory_serves_the_editor_and_user_routes(tmp_path):
    from tests.web.web_harness import start_test_server

    srv = await start_test_server(tmp_path, frontend=True)
    try:
        async with srv.session.get(f"{srv.url}/") as resp:
            assert resp.status == 200 and "connect-src 'self'" in resp.headers["Content-Security-Policy"]
            assert "<html" in (await resp.text()).lower()
        urls = await srv.get_json("/api/extensions")
        assert any(u.startswith("/extensions/comfy-engine/") for u in urls)
        assert (await srv.get_json("/api/users"))["storage"] == "server"
        settings = await srv.get_json("/api/settings")
        assert settings["Comfy.Notification.ShowVersionUpdates"] is False
        assert await srv.get_json("/api/object_info/WebTestConst")
    finally:
        await srv.close()


async def test_view_metadata_reads_the_safetensors_header_only_inside_the_folder(server):
    import json as _json
    import struct

    loras = server.state.env.folders.paths("loras")[0]
    loras.mkdir(parents=True, exist_ok=True)
    header = _json.dumps({"__metadata__": {"ss_network_dim": "4"}, "w": {"dtype": "F32", "shape": [1],
                                                                         "data_offsets": [0, 4]}}).encode()
    (loras / "m.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0\0\0")
    bare = _json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (loras / "bare.safetensors").write_bytes(struct.pack("<Q", len(bare)) + bare + b"\0\0\0\0")
    (loras / "huge.safetensors").write_bytes(struct.pack("<Q", 10**12))
    assert await server.get_json("/api/view_metadata/loras?filename=m.safetensors") == {"ss_network_dim": "4"}
    for query, status in [("bare.safetensors", 404), ("huge.safetensors", 400), ("m.ckpt", 404),
                          ("../../user/x.safetensors", 404), ("nope.safetensors", 404)]:
        async with server.session.get(f"{server.url}/view_metadata/loras", params={"filename": query}) as resp:
            assert resp.status == status, query
    async with server.session.get(f"{server.url}/view_metadata/nofolder?filename=m.safetensors") as resp:
        assert resp.status == 404
