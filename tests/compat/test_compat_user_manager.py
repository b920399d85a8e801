"""`PromptServer.instance.user_manager` and `web_root` as packs use them (ComfyUI-Model-Manager
reads and writes its settings through `user_manager.settings`, workflow managers keep files in the
user's folder through `get_request_user_filepath`, hot-reload packs serve files beside
`web_root`): the same user folders and settings file the editor's /userdata and /settings routes
use."""
from __future__ import annotations

import textwrap

import pytest

from tests.compat.compat_harness import start_pack_server

PACK = '''
import json
from aiohttp import web
from server import PromptServer

routes = PromptServer.instance.routes


@routes.get("/um/settings")
async def read_settings(request):
    return web.json_response(PromptServer.instance.user_manager.settings.get_settings(request))


@routes.post("/um/settings")
async def write_settings(request):
    manager = PromptServer.instance.user_manager
    settings = manager.settings.get_settings(request)
    settings.update(await request.json())
    manager.settings.save_settings(request, settings)
    return web.json_response({"saved": True})


@routes.get("/um/file")
async def user_file(request):
    manager = PromptServer.instance.user_manager
    path = manager.get_request_user_filepath(request, request.query["name"])
    if path is None:
        return web.json_response({"error": "outside"}, status=403)
    with open(path, "w") as f:
        f.write("x")
    return web.json_response({"path": path, "user": manager.get_request_user_id(request)})


@routes.get("/um/root")
async def root(request):
    return web.json_response({"web_root": PromptServer.instance.web_root})

NODE_CLASS_MAPPINGS = {}
'''


@pytest.fixture
async def um_server(tmp_path):
    pack = tmp_path / "packs" / "um_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(textwrap.dedent(PACK))
    srv = await start_pack_server(tmp_path / "base", custom_node_dirs=(tmp_path / "packs",))
    try:
        yield srv
    finally:
        await srv.close()


async def test_settings_and_user_files_are_the_editors(um_server):
    srv = um_server
    async with srv.session.post(f"{srv.url}/settings/Comfy.Graph.ZoomSpeed", json=1.5) as resp:
        assert resp.status == 200
    assert (await srv.get_json("/um/settings"))["Comfy.Graph.ZoomSpeed"] == 1.5
    async with srv.session.post(f"{srv.url}/um/settings", json={"ModelManager.UI.Dialog": "side"}) as resp:
        assert resp.status == 200
    settings = await srv.get_json("/settings")
    assert settings["ModelManager.UI.Dialog"] == "side" and settings["Comfy.Graph.ZoomSpeed"] == 1.5

    found = await srv.get_json("/um/file?name=mine/notes.json")
    user_root = srv.state.env.user_dir / "default"
    assert found == {"path": str((user_root / "mine" / "notes.json").resolve()), "user": "default"}
    async with srv.session.get(f"{srv.url}/api/userdata/mine%2Fnotes.json") as resp:
        assert resp.status == 200 and await resp.text() == "x"
    async with srv.session.get(f"{srv.url}/um/file", params={"name": "../escape.json"}) as resp:
        assert resp.status == 403
    assert not (srv.state.env.user_dir / "escape.json").exists()


async def test_web_root_is_the_served_editors_folder(um_server, caplog):
    async with um_server.session.get(f"{um_server.url}/um/root") as resp:
        assert resp.status == 500  # the pack's own route failing: this test server serves no editor
    assert any("web_root: no editor is served" in r.getMessage() for r in caplog.records)

    from aiohttp import web

    from web.frontend import add_frontend_routes, frontend_root

    add_frontend_routes(web.Application(), um_server.state)  # what the app factory does for the editor
    assert um_server.state.frontend_root == frontend_root()
    assert await um_server.get_json("/um/root") == {"web_root": str(frontend_root())}


LOADER_PACK = '''
from aiohttp import web
import nodes
from server import PromptServer


@PromptServer.instance.routes.get("/um/load")
async def load(request):
    # a built-in node called outside any prompt, as packs' routes and start-up code do on ComfyUI
    # (whose folder_paths are the server's everywhere)
    model, clip, vae = nodes.CheckpointLoaderSimple().load_checkpoint(request.query["name"])
    names = nodes.CheckpointLoaderSimple.INPUT_TYPES()["required"]["ckpt_name"][0]
    return web.json_response({"model": type(model).__name__, "vae": type(vae).__name__, "listed": names})

NODE_CLASS_MAPPINGS = {}
'''


async def test_built_in_nodes_called_outside_a_prompt_use_the_servers_folders(tmp_path, monkeypatch):
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    pack = tmp_path / "packs" / "loader_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(textwrap.dedent(LOADER_PACK))
    write_tiny_checkpoint(tmp_path / "base" / "models" / "checkpoints" / "tiny.safetensors", "sd1_fast")
    monkeypatch.chdir(tmp_path)  # the working directory has no models/ folder of its own
    srv = await start_pack_server(tmp_path / "base", custom_node_dirs=(tmp_path / "packs",))
    try:
        found = await srv.get_json("/um/load?name=tiny.safetensors")
        assert found["listed"] == ["tiny.safetensors"] and found["model"] and found["vae"]
    finally:
        await srv.close()
