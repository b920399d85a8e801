"""Custom node pack loading: discovery, isolation, registration, hooks, extra_model_paths."""
from __future__ import annotations

import contextlib
import logging
import textwrap
from pathlib import Path

import pytest

from graph.native import Output, node
from graph.packs import load_custom_nodes
from graph.registry import Registry

NODE = '''
class {cls}:
    @classmethod
    def INPUT_TYPES(cls):
        return {{"required": {{}}}}
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    def run(self):
        return ({value},)
'''


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@node("BuiltinNode", outputs=[Output("INT")])
def builtin_node():
    return (1,)


@pytest.fixture
def packs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "custom_nodes"
    write(root / "single.py", NODE.format(cls="Single", value=1) +
          'NODE_CLASS_MAPPINGS = {"Single": Single}\nNODE_DISPLAY_NAME_MAPPINGS = {"Single": "Single node"}\n')
    write(root / "my-pack" / "helper.py", NODE.format(cls="Helped", value=2))
    write(root / "my-pack" / "__init__.py",
          'from .helper import Helped\nNODE_CLASS_MAPPINGS = {"Helped": Helped}\nWEB_DIRECTORY = "./js"\n')
    (root / "my-pack" / "js").mkdir()
    write(root / "broken.py", "raise RuntimeError('this pack is broken')\n")
    write(root / "exits.py", "import sys\nsys.exit(3)\n")
    write(root / "off.py.disabled", NODE.format(cls="Off", value=0) + 'NODE_CLASS_MAPPINGS = {"Off": Off}\n')
    write(root / "old-pack.disabled" / "__init__.py", 'NODE_CLASS_MAPPINGS = {}\n')
    write(root / ".hidden.py", 'raise RuntimeError("hidden files are never imported")\n')
    write(root / "notes.txt", "not a pack")
    write(root / "no-init" / "clipseg.py", NODE.format(cls="Loose", value=4) + 'NODE_CLASS_MAPPINGS = {"Loose": Loose}\n')
    write(root / "overrides.py", NODE.format(cls="BuiltinNode", value=9) +
          NODE.format(cls="Mine", value=3) + 'NODE_CLASS_MAPPINGS = {"BuiltinNode": BuiltinNode, "Mine": Mine}\n')
    return root


def test_loads_packs_and_isolates_failures(packs_dir, caplog):
    registry = Registry()
    registry.add_native(builtin_node)
    with caplog.at_level(logging.INFO, logger="graph.packs"):
        results = load_custom_nodes(registry, [packs_dir])
    by_name = {r.name: r for r in results}
    assert sorted(by_name) == ["broken", "exits", "my-pack", "no-init", "overrides", "single"]
    # a folder without __init__.py is listed as a failed pack (ComfyUI's IMPORT FAILED), not skipped
    assert not by_name["no-init"].ok and "without __init__.py" in by_name["no-init"].error
    assert "Loose" not in registry
    assert by_name["single"].ok and by_name["single"].nodes == ["Single"]
    assert by_name["my-pack"].ok and by_name["my-pack"].web_directory == (packs_dir / "my-pack" / "js").resolve()
    assert not by_name["broken"].ok and "this pack is broken" in by_name["broken"].error
    assert "Traceback" in by_name["broken"].error
    assert not by_name["exits"].ok and "SystemExit" in by_name["exits"].error
    assert by_name["overrides"].ok and by_name["overrides"].skipped == ["BuiltinNode"]
    assert registry.get("BuiltinNode").source is builtin_node  # built-ins are never overridden
    assert registry.get("Single").display_name == "Single node"
    assert registry.get("Helped").python_module == "custom_nodes.my-pack"
    assert "Off" not in registry and all(r.seconds >= 0 for r in results)
    assert "Import times for custom nodes:" in caplog.text and "(IMPORT FAILED)" in caplog.text


def test_a_later_pack_cannot_take_an_earlier_packs_name(tmp_path):
    root = tmp_path / "nodes"
    write(root / "a_first.py", NODE.format(cls="Same", value=1) + 'NODE_CLASS_MAPPINGS = {"Same": Same}\n')
    write(root / "b_second.py", NODE.format(cls="Same", value=2) + 'NODE_CLASS_MAPPINGS = {"Same": Same}\n')
    registry = Registry()
    results = load_custom_nodes(registry, [root])
    assert results[1].skipped == ["Same"] and registry.get("Same").python_module == "custom_nodes.a_first"


def test_whitelist_import_context_and_module_hooks(packs_dir):
    entered = []

    @contextlib.contextmanager
    def context():
        entered.append("in")
        yield
        entered.append("out")

    hooked = []
    registry = Registry()
    results = load_custom_nodes(registry, [packs_dir], whitelist=["single", "my-pack"], import_context=context,
                                module_hooks=[lambda module, name, reg: hooked.append((name, reg.registry is registry))])
    assert [r.name for r in results] == ["my-pack", "single"]
    assert entered == ["in", "out", "in", "out"]
    assert hooked == [("my-pack", True), ("single", True)]


def test_failing_module_hook_fails_that_pack(packs_dir):
    def hook(module, name, registry):
        if name == "single":
            raise ValueError("entrypoint failed")

    results = load_custom_nodes(Registry(), [packs_dir], whitelist=["single", "my-pack"], module_hooks=[hook])
    assert [r.ok for r in results] == [True, False] and "entrypoint failed" in results[1].error


def test_missing_folder_is_skipped(tmp_path):
    assert load_custom_nodes(Registry(), [tmp_path / "nope"]) == []


def test_extra_model_paths_custom_nodes_entries_load(tmp_path):
    from comfy_core.folders import load_extra_model_paths

    write(tmp_path / "elsewhere" / "packs" / "remote.py",
          NODE.format(cls="Remote", value=7) + 'NODE_CLASS_MAPPINGS = {"Remote": Remote}\n')
    yaml_path = tmp_path / "config" / "extra_model_paths.yaml"
    write(yaml_path, """
        mine:
            base_path: ../elsewhere
            custom_nodes: packs
        """)
    _, custom_dirs = load_extra_model_paths(yaml_path)
    registry = Registry()
    results = load_custom_nodes(registry, custom_dirs)
    assert [r.name for r in results] == ["remote"] and "Remote" in registry


def test_the_test_pack_loads_as_a_custom_node_folder():
    from tests.graph.packs.testing_pack import NODE_CLASS_MAPPINGS

    registry = Registry()
    [result] = load_custom_nodes(registry, [Path(__file__).parent / "packs"])
    assert result.ok and result.name == "testing_pack"
    assert sorted(result.nodes) == sorted(NODE_CLASS_MAPPINGS)
    assert result.web_directory is None  # its WEB_DIRECTORY does not exist
    assert registry.get("Add").python_module == "custom_nodes.testing_pack"
