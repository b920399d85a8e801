"""Start-up costs of loading packs (issue 33, bench/pack_startup.py): what a pack import pays on
top of its own code stays small however big the process already is.

- compat/pack_imports.py's watch around each pack import (modules the pack drops that are not
  its own come back) lists only the objects made during the import, not the whole heap twice;
- compat/node_facades.py lists the built-in node functions once, however many ComfyUI names
  (`nodes.KSampler`, `comfy_extras.nodes_*`) packs read.
"""
from __future__ import annotations

import gc
import importlib
import sys
import types

import pytest

from compat import node_facades, pack_imports
from compat.pack_imports import keep_shared_modules


class _CountingGC:
    """`gc` as compat.pack_imports sees it, recording how many objects each listing returned."""

    def __init__(self) -> None:
        self.listed: list[int] = []

    def get_objects(self, *args, **kwargs):
        objects = gc.get_objects(*args, **kwargs)
        self.listed.append(len(objects))
        return objects

    def __getattr__(self, name):
        return getattr(gc, name)


def _library(tmp_path, name: str) -> None:
    folder = tmp_path / "site"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text("VALUE = 3\n")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture
def site(tmp_path):
    yield tmp_path
    sys.path[:] = [p for p in sys.path if p != str(tmp_path / "site")]
    for name in [n for n in sys.modules if n.startswith("ps_lib_")]:
        del sys.modules[name]


def test_the_watch_lists_only_objects_made_during_the_import(site, monkeypatch) -> None:
    _library(site, "ps_lib_made")
    heap = len(gc.get_objects())
    ballast = [types.SimpleNamespace(i=i) for i in range(20_000)]  # made before: never listed
    counting = _CountingGC()
    monkeypatch.setattr(pack_imports, "gc", counting)
    with keep_shared_modules([site / "custom_nodes"]):
        made = importlib.import_module("ps_lib_made")
        del sys.modules["ps_lib_made"]  # a pack's "remove any new modules" clean-up
    assert sys.modules["ps_lib_made"] is made  # not the pack's own: back
    assert counting.listed and max(counting.listed) < min(heap, 20_000) // 4, (counting.listed, heap)
    assert gc.get_freeze_count() == 0  # the collector has every object back
    del ballast


def test_a_module_that_was_there_before_comes_back_when_dropped(site) -> None:
    _library(site, "ps_lib_before")
    importlib.import_module("ps_lib_before")
    own = types.ModuleType("ps_lib_scratch")  # never imported: not put into sys.modules
    with keep_shared_modules([site / "custom_nodes"]):
        previous = sys.modules.pop("ps_lib_before")
        sys.modules["ps_lib_scratch"] = own
        del sys.modules["ps_lib_scratch"]
    assert sys.modules["ps_lib_before"] is previous
    assert "ps_lib_scratch" not in sys.modules


def test_overlapping_watches_each_restore_and_free_the_collector(site) -> None:
    """An import abandoned past its time limit may still run while the next pack imports: the
    second watch cannot use frozen objects and scans the heap, both still restore."""
    _library(site, "ps_lib_outer")
    _library(site, "ps_lib_inner")
    with keep_shared_modules([site / "custom_nodes"]):
        outer = importlib.import_module("ps_lib_outer")
        with keep_shared_modules([site / "custom_nodes"]):
            inner = importlib.import_module("ps_lib_inner")
            del sys.modules["ps_lib_inner"]
        assert sys.modules["ps_lib_inner"] is inner
        del sys.modules["ps_lib_outer"]
    assert sys.modules["ps_lib_outer"] is outer
    assert gc.get_freeze_count() == 0


def test_an_import_that_raises_leaves_the_collector_as_it_was(site, monkeypatch) -> None:
    _library(site, "ps_lib_after_error")
    with pytest.raises(RuntimeError), keep_shared_modules([site / "custom_nodes"]):
        raise RuntimeError("the pack failed")
    assert gc.get_freeze_count() == 0
    # the next watch works as usual (its lock was released)
    counting = _CountingGC()
    monkeypatch.setattr(pack_imports, "gc", counting)
    with keep_shared_modules([site / "custom_nodes"]):
        made = importlib.import_module("ps_lib_after_error")
        del sys.modules["ps_lib_after_error"]
    assert sys.modules["ps_lib_after_error"] is made
    assert len(counting.listed) == 1  # one listing of the new objects, no whole-heap scan before


def _fake_node(node_id: str, module: str):
    def fn():
        return None
    fn.__node_spec__ = types.SimpleNamespace(node_id=node_id, python_module=module)
    return fn


def test_builtin_node_functions_are_listed_once_for_every_name_read(monkeypatch) -> None:
    first_ksampler = _fake_node("KSampler", "nodes")
    second_ksampler = _fake_node("KSampler", "comfy_extras.nodes_x")  # a later one of the same id
    grow = _fake_node("GrowMask", "comfy_extras.nodes_mask")
    feather = _fake_node("FeatherMask", "comfy_extras.nodes_mask")
    calls = []

    def listing():
        calls.append(1)
        yield from (first_ksampler, grow, second_ksampler, feather)

    monkeypatch.setattr(node_facades, "builtin_node_functions", listing)
    monkeypatch.setattr(node_facades, "_facade_for_function", lambda fn: ("facade", fn))
    node_facades._builtin_index.cache_clear()
    try:
        assert node_facades._builtin_function("KSampler") is first_ksampler  # the first of an id
        assert node_facades._builtin_function("GrowMask") is grow
        assert node_facades._builtin_function("NoSuchNode") is None
        masks = node_facades.module_node_classes("comfy_extras.nodes_mask")
        assert masks == {"GrowMask": ("facade", grow), "FeatherMask": ("facade", feather)}
        assert list(masks) == ["GrowMask", "FeatherMask"]  # the listing's order
        assert node_facades.module_node_classes("comfy_extras.nodes_x") == {"KSampler": ("facade", second_ksampler)}
        assert node_facades.module_node_classes("comfy_extras.no_such_module") == {}
        assert len(calls) == 1
    finally:
        node_facades._builtin_index.cache_clear()
