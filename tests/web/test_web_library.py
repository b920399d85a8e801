"""The editor's library panels: templates (filtered to what runs here), the model library,
imported files, packs' example workflows."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from graph.registry import Registry
from nodes import register_builtin_nodes
from tests.web.web_harness import start_test_server
from web.workflow_templates import TemplateIndex, required_node_types, templates_dir


def _ui_workflow(*types: str, subgraphs: dict[str, list[str]] | None = None) -> dict:
    workflow = {"nodes": [{"id": i, "type": t} for i, t in enumerate(types)]}
    if subgraphs:
        workflow["definitions"] = {"subgraphs": [{"id": sid, "nodes": [{"type": t} for t in inner]}
                                                 for sid, inner in subgraphs.items()]}
    return workflow


def test_required_node_types_skip_editor_only_nodes_and_look_inside_subgraphs_and_group_nodes():
    workflow = _ui_workflow("KSampler", "MarkdownNote", "Note", "Reroute", "PrimitiveNode", "sub-1", "workflow>grp",
                            subgraphs={"sub-1": ["VAEDecode", "Note"]})
    workflow["extra"] = {"groupNodes": {"grp": {"nodes": [{"type": "SaveImage"}]}}}
    assert required_node_types(workflow) == {"KSampler", "VAEDecode", "SaveImage"}
    assert required_node_types({"nodes": "garbage"}) == set()


def test_template_index_lists_only_what_the_registry_can_run(tmp_path: Path):
    (tmp_path / "runs.json").write_text(json.dumps(_ui_workflow("KSampler", "Note")))
    (tmp_path / "needs_flux.json").write_text(json.dumps(_ui_workflow("KSampler", "UNETLoader")))
    (tmp_path / "broken.json").write_text("{not json")
    index = [{"moduleName": "default", "title": "Image", "templates": [{"name": "runs"}, {"name": "needs_flux"},
                                                                      {"name": "broken"}, {"name": "absent"}]},
             {"moduleName": "default", "title": "Video", "templates": [{"name": "needs_flux"}]}]
    templates = TemplateIndex(tmp_path, lambda kind: kind == "KSampler")
    assert templates.filtered(index) == [{"moduleName": "default", "title": "Image", "templates": [{"name": "runs"}]}]
    assert templates.missing("needs_flux") == ["UNETLoader"]
    total, runnable, lacking = templates.summary(index)
    assert (total, runnable) == (5, 1) and lacking["UNETLoader"] == 2


@pytest.fixture
async def builtin_server(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    server = await start_test_server(tmp_path, registry=registry)
    try:
        yield server
    finally:
        await server.close()


@pytest.mark.skipif(templates_dir() is None, reason="comfyui-workflow-templates is not installed")
async def test_official_templates_are_served_with_the_index_filtered(builtin_server):
    server = builtin_server
    index = await server.get_json("/templates/index.json")
    names = {t["name"] for module in index for t in module["templates"]}
    assert "default" in names  # CheckpointLoaderSimple, CLIPTextEncode, KSampler, VAEDecode, SaveImage
    folder = templates_dir()
    full = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    all_names = {t["name"] for module in full for t in module["templates"]}
    assert names < all_names  # e.g. the Flux and video templates need nodes we lack
    for name in names:  # every listed template's nodes exist here
        workflow = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        assert required_node_types(workflow) <= set(server.state.registry.object_info())
    async with server.session.get(f"{server.url}/templates/default.json") as resp:
        assert resp.status == 200 and (await resp.json())["nodes"]
    async with server.session.get(f"{server.url}/templates/default-1.webp") as resp:
        assert resp.status == 200 and (await resp.read())[:4] == b"RIFF"
    async with server.session.get(f"{server.url}/templates/index_logo.json") as resp:
        assert resp.status == 200 and "application/json" in resp.headers["Content-Type"]
    async with server.session.get(f"{server.url}/templates/index.ja.json") as resp:
        localized = {t["name"] for module in await resp.json() for t in module["templates"]}
        assert localized == names
    async with server.session.get(f"{server.url}/templates/..%2Fsecret.json") as resp:
        assert resp.status in (400, 404) and "error" in await resp.json()


async def test_model_library_lists_folders_and_files_with_sizes(builtin_server, tmp_path):
    server = builtin_server
    ckpts = server.state.env.folders.paths("checkpoints")[0]
    (ckpts / "sub").mkdir(parents=True)
    (ckpts / "sub" / "a.safetensors").write_bytes(b"x" * 10)
    (ckpts / "notes.txt").write_text("not a model")
    Image.new("RGB", (4, 4), (255, 0, 0)).save(ckpts / "sub" / "a.png")
    folders = await server.get_json("/api/experiment/models")
    by_name = {f["name"]: f for f in folders}
    assert "checkpoints" in by_name and "custom_nodes" not in by_name
    assert by_name["checkpoints"]["folders"][0] == str(ckpts)
    files = await server.get_json("/api/experiment/models/checkpoints")
    assert [(f["name"], f["pathIndex"], f["size"]) for f in files] == [("sub/a.safetensors", 0, 10)]
    assert {"modified", "created"} <= set(files[0])
    async with server.session.get(f"{server.url}/api/experiment/models/preview/checkpoints/0/sub/a.webp") as resp:
        assert resp.status == 200 and resp.content_type == "image/webp"
    async with server.session.get(f"{server.url}/api/experiment/models/nope") as resp:
        assert resp.status == 404 and "error" in await resp.json()
    async with server.session.get(f"{server.url}/api/experiment/models/preview/checkpoints/7/a.webp") as resp:
        assert resp.status == 404


async def test_imported_files_are_listed_newest_first(builtin_server):
    server = builtin_server
    input_dir = server.state.env.input_dir
    input_dir.mkdir(parents=True, exist_ok=True)
    for age, name in enumerate(["new.png", "old.png"]):
        (input_dir / name).write_bytes(b"x")
        os.utime(input_dir / name, (1_000_000 - age * 100, 1_000_000 - age * 100))
    (input_dir / "folder").mkdir()
    assert await server.get_json("/internal/files/input") == ["new.png", "old.png"]
    async with server.session.get(f"{server.url}/internal/files/secrets") as resp:
        assert resp.status == 400 and "error" in await resp.json()
    paths = await server.get_json("/internal/folder_paths")
    assert paths["checkpoints"] == [str(p) for p in server.state.env.folders.paths("checkpoints")]


async def test_packs_example_workflows_are_listed_and_served(builtin_server, tmp_path):
    server = builtin_server
    pack = tmp_path / "custom_nodes" / "my_pack"
    (pack / "example_workflows").mkdir(parents=True)
    (pack / "example_workflows" / "hello.json").write_text(json.dumps({"nodes": []}))
    (tmp_path / "custom_nodes" / "other" / "examples").mkdir(parents=True)
    (tmp_path / "custom_nodes" / "other" / "examples" / "x.json").write_text("{}")
    server.state.packs.extend([SimpleNamespace(name="my_pack", path=pack, ok=True),
                               SimpleNamespace(name="other", path=tmp_path / "custom_nodes" / "other", ok=True)])
    assert await server.get_json("/api/workflow_templates") == {"my_pack": ["hello"], "other": ["x"]}
    assert await server.get_json("/api/workflow_templates/my_pack/hello.json") == {"nodes": []}
    async with server.session.get(f"{server.url}/api/workflow_templates/my_pack/..%2F__init__.py") as resp:
        assert resp.status == 404
