"""/global_subgraphs, /global_subgraphs/{id} and /node_replacements (shapes read from today's
ComfyUI: app/subgraph_manager.py as in karrareddy28-ui/comfyui @1f3511cf and 2018065581/ComfyUI
@d88b19d9, copies of Comfy-Org/ComfyUI; app/node_replace_manager.py @b5d74ccb, Comfy-Org/ComfyUI),
and node replacements applied to POST /prompt."""
from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import aiohttp
import pytest

from tests.web.web_harness import TestServer, chain
from web import routes_subgraphs
from web.node_replacements import NodeReplace, NodeReplacements

BLUEPRINT = {"id": "wf", "nodes": [{"id": -1, "type": "sg-1"}],
             "definitions": {"subgraphs": [{"id": "sg-1", "name": "Upscale", "essentials_category": "Image",
                                            "inputs": [], "outputs": [], "nodes": [], "links": []}]}}


@pytest.fixture
async def pack_server(tmp_path, monkeypatch):
    from tests.web.web_test_nodes import make_test_registry
    from web.app import start_server
    from web.bootstrap import build_state
    from web.config import ServerConfig

    pack = tmp_path / "custom_nodes" / "blue_pack"
    (pack / "subgraphs").mkdir(parents=True)
    (pack / "subgraphs" / "Pack Blueprint.json").write_text(json.dumps(BLUEPRINT))
    (pack / "subgraphs" / "notes.txt").write_text("not a blueprint")
    (pack / "node_replacements.json").write_text(json.dumps({
        "OldConst": [{"new_node_id": "WebTestConst", "input_mapping": [{"new_id": "value", "old_id": "number"}],
                      "output_mapping": [{"old_idx": 1, "new_idx": 0}]},
                     {"new_node_id": "NotHere"}],
        "Broken": "not a list"}))
    package = tmp_path / "site" / "blueprints"
    package.mkdir(parents=True)
    (package / "index.json").write_text(json.dumps([
        {"moduleName": "comfyui", "blueprints": [{"name": "text_to_image", "requiresCustomNodes": []},
                                                 {"name": "missing_file"}, {"name": "../escape"}]}]))
    (package / "text_to_image.json").write_text(json.dumps(BLUEPRINT))
    (tmp_path / "site" / "escape.json").write_text("{}")
    monkeypatch.setattr(routes_subgraphs, "installed_blueprint_dirs", lambda: [package])

    config = ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=())
    state = build_state(config, registry=make_test_registry())
    state.packs = [SimpleNamespace(name="blue_pack", path=pack, ok=True, web_directory=None)]
    runner, urls = await start_server(state, frontend=False)
    server = TestServer(state, runner, urls[0])
    server.session = aiohttp.ClientSession()
    server.pack_dir, server.package_dir = pack, package
    try:
        yield server
    finally:
        await server.close()


async def test_global_subgraphs_lists_pack_and_package_blueprints(pack_server):
    listing = await pack_server.get_json("/api/global_subgraphs")
    by_name = {entry["name"]: (entry_id, entry) for entry_id, entry in listing.items()}
    assert set(by_name) == {"Pack Blueprint", "text_to_image"}
    pack_file = (pack_server.pack_dir / "subgraphs" / "Pack Blueprint.json").as_posix()
    pack_id, pack_entry = by_name["Pack Blueprint"]
    assert pack_id == hashlib.sha256(f"custom_node{pack_file}".encode()).hexdigest()
    assert pack_entry == {"source": "custom_node", "name": "Pack Blueprint",
                          "info": {"node_pack": "custom_nodes.blue_pack"}}
    _, package_entry = by_name["text_to_image"]
    assert package_entry == {"source": "templates", "name": "text_to_image",
                             "info": {"node_pack": "comfyui", "requiresCustomNodes": []},
                             "essentials_category": "Image"}
    one = await pack_server.get_json(f"/global_subgraphs/{pack_id}")
    assert json.loads(one.pop("data")) == BLUEPRINT and one == pack_entry
    async with pack_server.session.get(f"{pack_server.url}/api/global_subgraphs/nope") as resp:
        assert resp.status == 404 and (await resp.json())["error"]["type"] == "not_found"


async def test_global_subgraphs_is_empty_without_blueprints(server):
    assert await server.get_json("/global_subgraphs") == {}


async def test_node_replacements_route_and_prompt(pack_server):
    listing = await pack_server.get_json("/api/node_replacements")
    assert listing == {"OldConst": [
        {"new_node_id": "WebTestConst", "old_node_id": "OldConst", "old_widget_ids": None,
         "input_mapping": [{"new_id": "value", "old_id": "number"}], "output_mapping": [{"old_idx": 1, "new_idx": 0}]},
        {"new_node_id": "NotHere", "old_node_id": "OldConst", "old_widget_ids": None, "input_mapping": None,
         "output_mapping": None}]}
    prompt = chain(4)
    prompt["1"] = {"class_type": "OldConst", "inputs": {"number": 4, "dropped": 1}, "_meta": {"title": "old"}}
    prompt["2"]["inputs"]["value"] = ["1", 1]
    status, body = await pack_server.post_prompt(prompt)
    assert status == 200, body
    entry = await pack_server.wait_history(body["prompt_id"])
    assert entry["status"]["status_str"] == "success"
    stored = entry["prompt"][2]
    assert stored["1"] == {"class_type": "WebTestConst", "inputs": {"value": 4}, "_meta": {"title": "old"}}
    assert stored["2"]["inputs"]["value"] == ["1", 0]


async def test_features_advertise_node_replacements(server):
    features = await server.get_json("/features")
    assert features["node_replacements"] is True and features["assets"] is False


def test_apply_leaves_known_and_unreplaceable_nodes_alone():
    table = NodeReplacements()
    table.register(NodeReplace(new_node_id="New", old_node_id="Old"))
    table.register(NodeReplace(new_node_id="New", old_node_id="Old"))  # idempotent per pair
    table.register(NodeReplace(new_node_id="Gone", old_node_id="Older"))
    assert len(table.get("Old")) == 1
    prompt = {"1": {"class_type": "Old", "inputs": {"x": 1}}, "2": {"class_type": "Older", "inputs": {}},
              "3": {"class_type": "New", "inputs": {"a": ["1", 0]}}, "extra": 5}
    out = table.apply(prompt, {"New"})
    assert out["1"] == {"class_type": "New", "inputs": {}}  # no input mapping: inputs dropped (ComfyUI)
    assert out["2"] == prompt["2"] and out["3"] == prompt["3"] and out["extra"] == 5
    assert prompt["1"]["class_type"] == "Old"  # the caller's prompt is not changed
    assert table.apply(prompt, {"Old", "Older", "New"}) is prompt  # nothing to replace
