"""web/pack_start.py: a server whose pack record is valid listens before its packs import, answers
/object_info and /extensions from the record meanwhile, and holds everything that needs a pack's
code (prompts, the packs' own routes) until the import is done; the record follows the packs, the
engine and the folders it was rendered against."""
from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp
import pytest

from tests.web import pack_start_gate
from tests.web.web_harness import TestServer
from web import pack_start
from web.app import start_server
from web.bootstrap import build_state
from web.config import ServerConfig

PACK_SOURCE = '''
import signal

from aiohttp import web

import folder_paths
from server import PromptServer
from tests.web import pack_start_gate

pack_start_gate.IMPORTS.append("gated_pack")
assert pack_start_gate.GATE.wait(60), "the test never opened the gate"
# only the main thread may set a handler; packs import in a worker thread after listening
signal.signal(signal.SIGUSR1, signal.getsignal(signal.SIGUSR1))
# a model folder kind of the pack's own: unknown to a start until the pack has imported
folder_paths.add_model_folder_path("gated_models", folder_paths.models_dir + "/gated")


class GatedShow:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ckpt": (folder_paths.get_filename_list("checkpoints"),),
                             "own": (folder_paths.get_filename_list("gated_models"),),
                             "x": ("INT", {"default": 3})}}
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True
    CATEGORY = "test"

    def run(self, ckpt, own, x):
        return {"ui": {"text": [f"{ckpt}:{x * 2}"]}}


NODE_CLASS_MAPPINGS = {"GatedShow": GatedShow}
WEB_DIRECTORY = "./js"


@PromptServer.instance.routes.get("/gated/ping")
async def ping(request):
    return web.json_response({"pong": True})


async def direct(request):
    return web.json_response({"direct": True})

PromptServer.instance.app.router.add_get("/gated/direct", direct)


@web.middleware
async def tag(request, handler):
    response = await handler(request)
    response.headers["X-Gated"] = "1"
    return response

PromptServer.instance.app.middlewares.append(tag)


def mark(body):
    body.setdefault("extra_data", {})["gated"] = True
    return body

PromptServer.instance.add_on_prompt_handler(mark)
'''


def _base(tmp_path: Path) -> Path:
    pack = tmp_path / "custom_nodes" / "gated_pack"
    (pack / "js").mkdir(parents=True)
    (pack / "__init__.py").write_text(PACK_SOURCE)
    (pack / "js" / "gated.js").write_text("export {};\n")
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    (tmp_path / "models" / "checkpoints" / "a.safetensors").write_bytes(b"x")
    (tmp_path / "models" / "gated").mkdir()
    (tmp_path / "models" / "gated" / "g.pt").write_bytes(b"g")
    return tmp_path


def _config(base: Path) -> ServerConfig:
    return ServerConfig(base_dir=base, listen=("127.0.0.1",), port=0, custom_node_dirs=(base / "custom_nodes",))


async def _start(base: Path) -> TestServer:
    state = build_state(_config(base), defer_packs=True)
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    return server


def _wait_for_record(base: Path, older_than: float | None = None) -> dict:
    """The record file once written (it is written in the background after a load)."""
    path = pack_start.record_path(base / "user")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.is_file() and (older_than is None or path.stat().st_mtime_ns > older_than):
            return json.loads(path.read_text())
        time.sleep(0.02)
    raise AssertionError("the pack record was not written")


@pytest.fixture(autouse=True)
def _gate():
    pack_start_gate.GATE.clear()
    pack_start_gate.IMPORTS.clear()
    yield
    pack_start_gate.GATE.set()  # never leave a pack import waiting


async def _first_start_writes_the_record(base: Path) -> dict:
    pack_start_gate.GATE.set()
    server = await _start(base)
    try:
        assert server.state.pack_load is None  # no record yet: packs imported before listening
        assert "GatedShow" in await server.get_json("/object_info")
        record = _wait_for_record(base)
    finally:
        await server.close()
    assert record["node_info"]["GatedShow"]["input"]["required"]["ckpt"][0] == ["a.safetensors"]
    assert record["node_info"]["GatedShow"]["input"]["required"]["own"][0] == ["g.pt"]
    assert [p["name"] for p in record["packs"]] == ["gated_pack"]
    assert "KSampler" not in record["node_info"]  # only the packs' nodes are recorded
    pack_start_gate.GATE.clear()
    return record


async def test_a_start_with_a_valid_record_serves_before_the_packs_import(tmp_path):
    base = _base(tmp_path)
    first = await _first_start_writes_the_record(base)
    written = pack_start.record_path(base / "user").stat().st_mtime_ns

    server = await _start(base)
    try:
        load = server.state.pack_load
        assert load is not None and not load.done
        info = await server.get_json("/object_info")
        # the pack cannot have imported (its import waits at the gate), yet its node is listed, from the record
        assert not load.done
        assert info["GatedShow"] == first["node_info"]["GatedShow"]
        assert "KSampler" in info and "CheckpointLoaderSimple" in info
        assert (await server.get_json("/object_info/GatedShow"))["GatedShow"]["category"] == "test"
        assert "/extensions/gated_pack/gated.js" in await server.get_json("/extensions")
        assert (await server.get_json("/system_stats"))["system"]  # the server's own routes answer
        status = await server.get_json("/custom_nodes/status")
        assert status["importing"] is True and [p["name"] for p in status["packs"]] == ["gated_pack"]

        async def get(path: str) -> tuple[int, dict, str | None]:
            async with server.session.get(server.url + path) as resp:
                return resp.status, await resp.json(), resp.headers.get("X-Gated")
        ping = asyncio.ensure_future(get("/gated/ping"))
        api_ping = asyncio.ensure_future(get("/api/gated/ping"))
        prompt = {"1": {"class_type": "GatedShow", "inputs": {"ckpt": "a.safetensors", "own": "g.pt", "x": 4}}}
        submitted = asyncio.ensure_future(server.post_prompt(prompt))
        await asyncio.sleep(0)
        pack_start_gate.GATE.set()
        assert await ping == (200, {"pong": True}, "1")  # the pack's route, through its middleware
        assert await api_ping == (200, {"pong": True}, "1")
        status, body = await submitted
        assert status == 200, body
        entry = await server.wait_history(body["prompt_id"])
        assert entry["outputs"]["1"]["text"] == ["a.safetensors:8"]
        assert entry["prompt"][3]["gated"] is True  # the pack's on_prompt handler saw it
        assert load.done and server.state.packs[0].ok and server.state.packs[0].module is not None
        assert pack_start_gate.IMPORTS == ["gated_pack", "gated_pack"]  # imported once by each start  # the real load replaced the record's
        assert await get("/gated/direct") == (200, {"direct": True}, "1")
        async with server.session.get(server.url + "/no/such/route") as resp:
            assert resp.status == 404
        assert (await server.get_json("/object_info"))["GatedShow"] == first["node_info"]["GatedShow"]
        assert (await server.get_json("/custom_nodes/status"))["importing"] is False
        assert await asyncio.to_thread(load.settled.wait, 60)
        # nothing moved since the record: it stands as written (not rendered again)
        assert pack_start.record_path(base / "user").stat().st_mtime_ns == written
    finally:
        await server.close()


async def test_pack_nodes_wait_for_the_import_when_the_folders_changed(tmp_path):
    base = _base(tmp_path)
    await _first_start_writes_the_record(base)
    (base / "models" / "checkpoints" / "b.safetensors").write_bytes(b"y")
    server = await _start(base)
    try:
        assert server.state.pack_load is not None
        info = asyncio.ensure_future(server.get_json("/object_info"))
        one = asyncio.ensure_future(server.get_json("/object_info/GatedShow"))
        await asyncio.sleep(0)
        pack_start_gate.GATE.set()
        # rendered live after the import: the record listed only a.safetensors
        assert (await info)["GatedShow"]["input"]["required"]["ckpt"][0] == ["a.safetensors", "b.safetensors"]
        assert (await one)["GatedShow"]["input"]["required"]["ckpt"][0] == ["a.safetensors", "b.safetensors"]
        assert await asyncio.to_thread(server.state.pack_load.settled.wait, 60)
        record = json.loads(pack_start.record_path(base / "user").read_text())  # rendered again for the new folders
        assert record["node_info"]["GatedShow"]["input"]["required"]["ckpt"][0] == ["a.safetensors", "b.safetensors"]
    finally:
        await server.close()


async def test_a_changed_pack_is_imported_before_listening(tmp_path):
    base = _base(tmp_path)
    await _first_start_writes_the_record(base)
    init = base / "custom_nodes" / "gated_pack" / "__init__.py"
    init.write_text(PACK_SOURCE + "\n# edited\n")
    pack_start_gate.GATE.set()
    server = await _start(base)
    try:
        assert server.state.pack_load is None and server.state.packs[0].module is not None
    finally:
        await server.close()


def test_the_fingerprint_follows_code_files_the_whitelist_and_installed_packages(tmp_path, monkeypatch):
    pack = tmp_path / "custom_nodes" / "p"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text("x = 1\n")
    dirs = [tmp_path / "custom_nodes"]
    search = [str(tmp_path / "site")]
    (tmp_path / "site").mkdir()
    base = pack_start.fingerprint(dirs, package_folders=search)
    assert pack_start.fingerprint(dirs, package_folders=search) == base
    (pack / "config.json").write_text("{}")  # packs rewrite their own data files at import
    (pack / "__pycache__").mkdir()
    (pack / "__pycache__" / "x.pyc").write_bytes(b"")
    assert pack_start.fingerprint(dirs, package_folders=search) == base
    assert pack_start.fingerprint(dirs, ["p"], package_folders=search) != base
    (tmp_path / "site" / "newpkg").mkdir()  # a package installed: the folder's mtime moves
    os.utime(tmp_path / "site", ns=(1, 1))
    moved = pack_start.fingerprint(dirs, package_folders=search)
    assert moved != base
    (pack / "extra.py").write_text("y = 2\n")
    assert pack_start.fingerprint(dirs, package_folders=search) != moved
    # packs append their own folders to sys.path at import: not an installed package
    default = pack_start.fingerprint(dirs)
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(pack)])
    assert pack_start.fingerprint(dirs) == default


def test_a_record_of_another_format_or_fingerprint_is_not_read(tmp_path):
    record = pack_start.PackRecord("abc", [], {}, {"N": {"name": "N"}}, {"checkpoints": {"paths": ["/x"], "files": []}})
    pack_start.write_record(tmp_path, record)
    assert pack_start.read_record(tmp_path, "abc") == record
    assert pack_start.read_record(tmp_path, "other") is None
    pack_start.record_path(tmp_path).write_text(json.dumps({**record.to_json(), "format": 0}))
    assert pack_start.read_record(tmp_path, "abc") is None
    pack_start.record_path(tmp_path).write_text("{not json")
    assert pack_start.read_record(tmp_path, "abc") is None


def test_a_background_pack_load_waits_for_the_warm_ups_imports_before_importing():
    """Two threads importing one package at once is unsafe in CPython (a submodule's import does
    not wait for its parent still initialising in the other thread): a pack's import starts only
    after the warm-up has signalled its own imports done."""
    import threading

    steps: list[str] = []

    class RecordingEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            steps.append("waited for the warm-up")
            return super().wait(timeout)

    imported = RecordingEvent()
    imported.set()
    load = pack_start.DeferredPackLoad(record=None, load=lambda: steps.append("imported the packs") or [],
                                       fingerprint_after=lambda: "", builtin_names=frozenset(),
                                       runtime_imported=imported)
    loop = asyncio.new_event_loop()
    try:
        assert load.run(loop) == []
    finally:
        loop.close()
    assert steps == ["waited for the warm-up", "imported the packs"]


async def test_a_warming_server_hands_its_pack_load_the_warm_ups_signal(tmp_path):
    base = _base(tmp_path)
    await _first_start_writes_the_record(base)
    state = build_state(_config(base), defer_packs=True)
    runner, urls = await start_server(state, frontend=False, warm_up=True)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    try:
        load = state.pack_load
        assert load is not None and load.runtime_imported is not None
        pack_start_gate.GATE.set()
        await load.wait()
        assert load.runtime_imported.is_set() and state.packs[0].ok
    finally:
        await server.close()
