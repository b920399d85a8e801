"""ComfyUI's top-level `utils` package (ComfyUI-Manager imports it) without breaking the packs
that carry their own `utils`: ours answers unless a `utils` on a non-installed `sys.path` entry
comes first, and our own code never imports `utils` or `execution`."""
from __future__ import annotations

import sys

import pytest

import compat.finder as finder


@pytest.fixture
def no_cached_utils(monkeypatch):
    """`utils` and its submodules out of sys.modules for the test, put back after it."""
    for name in [n for n in sys.modules if n == "utils" or n.startswith("utils.")]:
        monkeypatch.delitem(sys.modules, name)


def test_utils_is_comfyuis_when_no_pack_has_its_own(session, no_cached_utils):
    import utils.install_util
    import utils.json_util

    assert utils.__file__.startswith(str(finder.SURFACE))
    assert utils.json_util.merge_json_recursive({"a": {"b": [1]}, "x": 1}, {"a": {"b": [2], "c": 3}, "x": [0]}) == {
        "a": {"b": [1, 2], "c": 3}, "x": [0]}
    assert utils.install_util.requirements_path.name == "requirements.txt"


def test_extra_config_adds_the_yaml_folders_to_this_server(session, tmp_path, no_cached_utils):
    import folder_paths
    import utils.extra_config

    (tmp_path / "elsewhere" / "my_loras").mkdir(parents=True)
    (tmp_path / "elsewhere" / "my_loras" / "a.safetensors").write_bytes(b"x")
    (tmp_path / "extra.yaml").write_text("mine:\n  base_path: elsewhere\n  loras: my_loras\n  custom_nodes: nodes\n")
    utils.extra_config.load_extra_path_config(tmp_path / "extra.yaml")
    assert str((tmp_path / "elsewhere" / "my_loras").resolve()) in folder_paths.get_folder_paths("loras")
    assert "a.safetensors" in folder_paths.get_filename_list("loras")
    assert str((tmp_path / "elsewhere" / "nodes").resolve()) in folder_paths.get_folder_paths("custom_nodes")


def test_a_packs_own_utils_on_sys_path_wins(session, tmp_path, monkeypatch, no_cached_utils):
    pack = tmp_path / "some_pack"
    (pack / "utils").mkdir(parents=True)
    (pack / "utils" / "__init__.py").write_text("MARK = 'the pack'\n")
    (pack / "utils" / "helpers.py").write_text("def f():\n    return 42\n")
    monkeypatch.syspath_prepend(str(pack))  # what packs do before `import utils`
    import utils
    import utils.helpers

    assert utils.MARK == "the pack" and utils.helpers.f() == 42


def test_a_utils_in_installed_packages_does_not_shadow_comfyuis(session, tmp_path, monkeypatch, no_cached_utils):
    site = tmp_path / "site-packages"
    (site / "utils").mkdir(parents=True)
    (site / "utils" / "__init__.py").write_text("MARK = 'an installed distribution'\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(finder, "_installed_package_roots", lambda: {str(site.resolve())})
    import utils.json_util

    assert not hasattr(utils, "MARK") and utils.__file__.startswith(str(finder.SURFACE))


def test_our_own_code_never_imports_the_top_level_utils_or_execution():
    from tests.test_import_graph import edges, modules

    ours = modules()
    wrong = [f"{e.source} -> {e.target}" for e in edges()
             if e.target.split(".")[0] in ("utils", "execution") and not ours[e.source].path.is_relative_to(finder.SURFACE)]
    assert not wrong, wrong
