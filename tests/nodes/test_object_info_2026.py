"""The nodes of ComfyUI's 2026 set that exist here render in `/object_info` exactly as today's
ComfyUI renders them. ComfyUI's entries are test data written by hand from its code
(tests/data/object_info_2026/<Node>.json; `_source` names the file and commit read), since a
2026 ComfyUI cannot be run here; every field of V3's `NodeInfoV1` is compared, key order aside."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment

DATA = Path(__file__).resolve().parents[1] / "data" / "object_info_2026"
NODES = sorted(p.stem for p in DATA.glob("*.json"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict:
    registry = Registry()
    register_builtin_nodes(registry)
    info = registry.object_info(Environment.rooted_at(tmp_path_factory.mktemp("base")))
    return json.loads(json.dumps(info))  # tuples as lists, as the route sends them


def expected(name: str) -> dict:
    entry = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    assert entry.pop("_source")
    return entry


def test_the_recorded_set_is_this_slice():
    assert set(NODES) >= {"ComfySwitchNode", "ComfyMathExpression", "ResizeImageMaskNode", "ResolutionSelector",
                          "ImageCompare", "ManualSigmas", "BatchImagesNode", "CustomCombo"}


@pytest.mark.parametrize("name", NODES)
def test_rendered_as_comfyui_renders_it(ours, name):
    want, got = expected(name), ours.get(name)
    assert got is not None, f"{name} is not registered"
    assert {k: got.get(k) for k in want} == want
    assert sorted(set(got) - set(want)) == []
