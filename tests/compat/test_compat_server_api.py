"""ComfyUI's server-side API through a real server and WebSocket (fixture pack
tests/compat/api_packs/server_pack): `PromptServer.instance.app` routes, static folders and
middlewares added at import are served; `prompt_queue` answers while a prompt runs; `send_sync`
reaches the client; `execution.validate_prompt` answers ComfyUI's tuple; `latent_preview`'s
previewers give the projection's pixels; `utils` is ComfyUI's."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import aiohttp

from tests.web.web_harness import TestServer, collect_until_done, receive_json, ws_connect
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig

API_PACKS = Path(__file__).resolve().parent / "api_packs"


@pytest.fixture
async def server(tmp_path):
    """The fixture pack alone, with the browser editor served (so pack web folders are too)."""
    config = ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=(API_PACKS,),
                          disable_all_custom_nodes=True, whitelist_custom_nodes=("server_pack",),
                          preview_method="latent2rgb")
    state = build_state(config)
    runner, urls = await start_server(state, frontend=True)
    srv = TestServer(state, runner, urls[0])
    srv.session = aiohttp.ClientSession()
    try:
        yield srv
    finally:
        await srv.close()


async def test_the_pack_loads_with_routes_static_files_and_middleware_on_the_served_app(server):
    status = await server.get_json("/custom_nodes/status")
    pack = {p["name"]: p for p in status["packs"]}["server_pack"]
    assert pack["ok"], pack["error"]
    assert sorted(pack["nodes"]) == ["ServerPackPreview", "ServerPackWait"]
    assert server.state.pack_app is not None
    async with server.session.get(f"{server.url}/server_pack/direct") as resp:
        assert resp.status == 200 and resp.headers["X-Server-Pack"] == "seen"
        assert await resp.json() == {"direct": True, "frozen_at_import": False}
    async with server.session.get(f"{server.url}/server_pack_static/hello.txt") as resp:
        assert resp.status == 200 and (await resp.text()).strip() == "server_pack static file"
    # the pack's middleware wraps our routes too; ours come first (outermost, as ComfyUI's are
    # first in its list): a 404 passes through the pack's as an exception and ours makes it JSON
    async with server.session.get(f"{server.url}/object_info/ServerPackWait") as resp:
        assert resp.status == 200 and resp.headers["X-Server-Pack"] == "seen"
    async with server.session.get(f"{server.url}/api/no/such/route") as resp:
        assert resp.status == 404 and resp.content_type == "application/json"
        assert "X-Server-Pack" not in resp.headers
    # folders put in nodes.EXTENSION_WEB_DIRS are served to the editor (the pack's own name, and another)
    extensions = await server.get_json("/extensions")
    assert {"/extensions/server_pack/server_pack.js", "/extensions/server_pack_extra/extra.js"} <= set(extensions)
    async with server.session.get(f"{server.url}/extensions/server_pack_extra/extra.js") as resp:
        assert resp.status == 200 and "serverPackExtra" in await resp.text()


async def test_prompt_queue_while_a_prompt_runs_and_a_custom_event_over_the_websocket(server):
    ws, _ = await ws_connect(server, "srv")
    status, first = await server.post_prompt({"1": {"class_type": "ServerPackWait", "inputs": {"value": 7}}},
                                             client_id="srv")
    assert status == 200, first
    await receive_json(ws, lambda m: m["type"] == "executing" and m["data"].get("node") == "1")
    status, second = await server.post_prompt({"1": {"class_type": "ServerPackWait", "inputs": {"value": 8}}},
                                              client_id="srv")
    assert status == 200, second
    queue = await server.get_json("/server_pack/queue")
    assert queue["remaining"] == 2
    assert queue["running"] == [first["prompt_id"]] and queue["currently_running"] == [first["prompt_id"]]
    assert queue["pending"] == [second["prompt_id"]]
    assert queue["number"] == second["number"] + 1  # the number the next prompt would get
    # delete_queue_item takes the pending one off the queue (ComfyUI's predicate on queue tuples)
    async with server.session.post(f"{server.url}/server_pack/delete", json={"prompt_id": second["prompt_id"]}) as r:
        assert (await r.json()) == {"removed": True}
    assert (await server.get_json("/server_pack/queue"))["remaining"] == 1
    async with server.session.post(f"{server.url}/server_pack/release") as resp:
        assert resp.status == 200
    frames = await collect_until_done(ws, first["prompt_id"])
    await ws.close()
    events = [f["data"] for f in frames if isinstance(f, dict) and f["type"] == "server_pack.event"]
    assert events == [{"node": "1", "value": 7, "remaining": 1, "last_node": "1", "client": "srv"}]
    history = await server.get_json(f"/server_pack/history/{first['prompt_id']}")
    assert history[first["prompt_id"]]["outputs"]["1"]["seen"] == [{"remaining": 1, "last_node": "1", "client": "srv"}]
    assert await server.get_json(f"/server_pack/history/{second['prompt_id']}") == {}


async def test_execution_validate_prompt_answers_comfyuis_tuple(server):
    async def validate(prompt):
        async with server.session.post(f"{server.url}/server_pack/validate", json={"prompt": prompt}) as resp:
            return await resp.json()

    good = await validate({"1": {"class_type": "ServerPackWait", "inputs": {"value": 1}}})
    assert good == {"ok": True, "error": None, "outputs": ["1"], "node_errors": {}}
    bad = await validate({"1": {"class_type": "ServerPackWait", "inputs": {"value": "x"}}})
    assert bad["ok"] is False and bad["error"]["type"] == "prompt_outputs_failed_validation"
    assert bad["node_errors"]["1"]["errors"][0]["type"] == "invalid_input_type"
    missing = await validate({"1": {"class_type": "NoSuchNode", "inputs": {}}})
    assert missing["ok"] is False and missing["outputs"] == [] and missing["node_errors"] == {}


@pytest.mark.parametrize("metadata", [False, True])
async def test_latent_preview_previewers_give_the_projections_pixels(server, metadata):
    """...and the pack's unencoded preview reaches the client as a preview frame (type 4 with
    the node's ids for a client that asked for preview metadata, else type 1), unscaled."""
    import io as bytes_io

    from PIL import Image

    from comfy_core.models.latent_formats import sd15_latent_format
    from web.protocol import parse_binary_frame

    ws, _ = await ws_connect(server, "pv", flags={"supports_preview_metadata": True} if metadata else None)
    status, body = await server.post_prompt({"1": {"class_type": "ServerPackPreview", "inputs": {"seed": 3, "size": 4}}},
                                            client_id="pv")
    assert status == 200, body
    frames = [parse_binary_frame(f) for f in await collect_until_done(ws, body["prompt_id"]) if isinstance(f, bytes)]
    await ws.close()
    assert [kind for kind, _ in frames] == [4 if metadata else 1]
    header, png = frames[0][1]
    if metadata:
        assert header["node_id"] == "1" and header["prompt_id"] == body["prompt_id"] and header["image_type"] == "image/png"
    else:
        assert header == 2  # ComfyUI's format code for PNG
    ui = (await server.wait_history(body["prompt_id"]))["outputs"]["1"]
    assert ui["client_metadata"] == [metadata]
    frame_pixels = np.asarray(Image.open(bytes_io.BytesIO(png)).convert("RGB")).reshape(-1, 3).tolist()
    assert frame_pixels == ui["pixels"]  # PNG, max_size None: the previewer's pixels as they are
    assert ui["kind"] == ["JPEG"] and ui["max_size"] == [512]
    assert ui["server_previewer"] == ["Latent2RGBPreviewer"] and ui["same_as_server"] == [True]
    assert ui["method"] == ["latent2rgb"]
    # the same numbers by hand: x0[0] (C, h, w) through the [C][3] factors, (v + 1) / 2 * 255 truncated
    x0 = torch.randn((1, 4, 4, 4), generator=torch.Generator().manual_seed(3))
    factors = torch.tensor(sd15_latent_format().latent_rgb_factors)
    rgb = torch.einsum("chw,cr->hwr", x0[0], factors)
    expected = ((rgb + 1) / 2).clamp(0, 1).mul(255).to(torch.uint8).reshape(-1, 3).tolist()
    assert ui["pixels"] == expected


async def test_top_level_utils_is_comfyuis(server):
    body = await server.get_json("/server_pack/utils")
    assert body["merged"] == {"a": [1, 2], "b": {"c": 1, "d": 2}}
    assert "-m pip install -r" in body["requirements"] and body["requirements"].endswith("requirements.txt")
