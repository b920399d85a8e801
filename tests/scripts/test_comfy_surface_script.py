"""scripts/comfy_surface.py: ComfyUI's Python surface read from a checkout with `ast` (names,
signatures, node classes, folder kinds), on a miniature checkout."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def _generator():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "comfy_surface.py"
    spec = importlib.util.spec_from_file_location("comfy_surface_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generator_records_names_signatures_nodes_and_folder_kinds(tmp_path):
    script = _generator()
    (tmp_path / "comfyui_version.py").write_text('__version__ = "9.9.9"\n')
    (tmp_path / "comfy" / "k").mkdir(parents=True)
    (tmp_path / "comfy" / "__init__.py").write_text("")
    (tmp_path / "comfy" / "k" / "__init__.py").write_text("")
    (tmp_path / "comfy" / "k" / "util.py").write_text(
        "import numpy as np\nfrom . import sibling\nfrom comfy.x import y as z\nLIMIT = 3\n_private = 1\n"
        "try:\n    import fast\nexcept ImportError:\n    fast = None\n"
        "def f(a, b=1, /, c=2, *args, d, e=3, **kw): pass\n"
        "class C(Base):\n    KIND = 'x'\n    field: int\n"
        "    def __init__(self, root, transform=None): pass\n"
        "    @classmethod\n    def make(cls, n): pass\n    @staticmethod\n    def helper(v): pass\n"
        "    @property\n    def size(self): return 1\n    def run(self, x): pass\n    go = run\n"
        "    def _hidden(self): pass\n")
    (tmp_path / "comfy_extras").mkdir()
    (tmp_path / "comfy_extras" / "nodes_demo.py").write_text(
        "class Old:\n    FUNCTION = 'do'\n    def do(self, image): pass\n"
        "class New(io.ComfyNode):\n    @classmethod\n    def define_schema(cls):\n"
        "        return io.Schema(node_id='NewNode')\n"
        "NODE_CLASS_MAPPINGS = {'OldNode': Old}\n")
    (tmp_path / "folder_paths.py").write_text(
        "folder_names_and_paths = {}\nfolder_names_and_paths['checkpoints'] = ([], set())\n"
        "folder_names_and_paths['model_patches'] = ([], set())\n")
    surface = script.read_surface(tmp_path)
    util = surface["modules"]["comfy.k.util"]
    assert surface["comfyui_version"] == "9.9.9"
    assert util["functions"] == {"f": "(a, b=, /, c=, *args, d, e=, **kw)"}
    assert util["constants"] == ["LIMIT", "fast"]  # `fast` rebound in the except branch
    assert util["imports"] == {"np": "numpy", "sibling": "comfy.k:sibling", "z": "comfy.x:y"}
    c = util["classes"]["C"]
    assert c["bases"] == ["Base"] and c["attributes"] == ["KIND", "field", "size"]
    assert c["methods"] == {"__init__": ["method", "(root, transform=)"], "go": ["method", "(x)"],
                            "helper": ["static", "(v)"], "make": ["classmethod", "(n)"], "run": ["method", "(x)"]}
    assert surface["node_classes"] == {"comfy_extras.nodes_demo": {"New": "NewNode", "Old": "OldNode"}}
    assert surface["folder_kinds"] == ["checkpoints", "model_patches"]
    assert script.reexports(surface) == {"comfy.k.util": {"sibling": "comfy.k:sibling", "z": "comfy.x:y"}}
    assert script.node_class_members(surface)["OldNode"] == {
        "class": "Old", "module": "comfy_extras.nodes_demo", "methods": {"do": ["method", "(image)"]},
        "attributes": ["FUNCTION"]}
    assert json.loads(script.dump(surface)) == surface
    with pytest.raises(script.SurfaceError):
        script.read_surface(tmp_path / "comfy")  # not a checkout
