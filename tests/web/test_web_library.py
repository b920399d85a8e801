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
from web.workflow_templates import BundledTemplates, FolderTemplates, TemplateIndex, required_node_types, templates_source


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
    templates = TemplateIndex(FolderTemplates(tmp_path), lambda kind: kind == "KSampler")
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


def test_folder_templates_serve_files_inside_their_folder_only(tmp_path: Path):
    (tmp_path / "templates" / "logo").mkdir(parents=True)
    (tmp_path / "templates" / "a.json").write_text("{}")
    (tmp_path / "templates" / "logo" / "x.png").write_bytes(b"png")
    (tmp_path / "secret.json").write_text("{}")
    source = FolderTemplates(tmp_path / "templates")
    assert source.path("a.json") == tmp_path / "templates" / "a.json"
    assert source.path("logo/x.png") == tmp_path / "templates" / "logo" / "x.png"
    assert source.path("../secret.json") is None and source.path("/etc/passwd") is None
    assert source.path("logo") is None and source.path("absent.json") is None


SOURCE = templates_source()
TODAYS = pytest.mark.skipif(not isinstance(SOURCE, BundledTemplates),
                            reason="today's comfyui-workflow-templates (requirements.txt) is not installed")


@TODAYS
def test_bundled_templates_find_json_in_the_json_package_and_media_through_the_manifest(monkeypatch):
    from comfyui_workflow_templates_core import iter_templates, loader

    assert SOURCE.path("index.json").parent == SOURCE.json_folder
    entry = next(e for e in iter_templates() if any(a.filename.endswith(".webp") for a in e.assets))
    picture = next(a.filename for a in entry.assets if a.filename.endswith(".webp"))
    found = SOURCE.path(picture)
    assert found is not None and found.read_bytes()[:4] == b"RIFF" and found.parent != SOURCE.json_folder
    assert SOURCE.path("not-in-the-manifest.webp") is None and SOURCE.path("../index.json") is None

    def bundle_not_installed(template_id: str, filename: str) -> str:
        raise FileNotFoundError(f"Package for {filename!r} is not installed")

    monkeypatch.setattr(loader, "get_asset_path", bundle_not_installed)
    monkeypatch.setattr("comfyui_workflow_templates_core.get_asset_path", bundle_not_installed)
    assert BundledTemplates(SOURCE.json_folder).path(picture) is None


@TODAYS
async def test_todays_official_templates_are_served_with_the_index_filtered(builtin_server):
    server = builtin_server
    index = await server.get_json("/templates/index.json")
    names = {t["name"] for module in index for t in module["templates"]}
    full = json.loads(SOURCE.path("index.json").read_text(encoding="utf-8"))
    all_names = {t["name"] for module in full for t in module["templates"]}
    assert names < all_names  # the partner (API) templates need nodes that are not built in
    assert {"sdxl_simple_example", "image_z_image_turbo"} <= names
    for name in names:  # every listed template's nodes exist here
        workflow = json.loads(SOURCE.path(f"{name}.json").read_text(encoding="utf-8"))
        assert required_node_types(workflow) <= set(server.state.registry.object_info())
    async with server.session.get(f"{server.url}/templates/sdxl_simple_example.json") as resp:
        assert resp.status == 200 and (await resp.json())["nodes"]
    listed = next(t for module in index for t in module["templates"] if t["name"] == "sdxl_simple_example")
    async with server.session.get(f"{server.url}/templates/sdxl_simple_example-1.{listed['mediaSubtype']}") as resp:
        assert resp.status == 200 and (await resp.read())[:4] == b"RIFF"
    logos = await server.get_json("/templates/index_logo.json")
    assert logos
    async with server.session.get(f"{server.url}/templates/{next(iter(logos.values()))}") as resp:
        assert resp.status == 200 and resp.content_type.startswith("image/")
    async with server.session.get(f"{server.url}/templates/index.ja.json") as resp:
        localized = {t["name"] for module in await resp.json() for t in module["templates"]}
        assert localized == names
    async with server.session.get(f"{server.url}/templates/..%2Fsecret.json") as resp:
        assert resp.status in (400, 404) and "error" in await resp.json()
    async with server.session.get(f"{server.url}/templates/no_such_template-1.webp") as resp:
        assert resp.status == 404 and "error" in await resp.json()


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
