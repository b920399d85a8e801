"""A pack's own folder kind through `folder_paths.folder_names_and_paths`, as
ComfyUI-VideoHelperSuite and ComfyUI-AnimateDiff-Evolved use it (fixture pack
tests/compat/api_packs/format_kind_pack): a kind declared with no folder is known and lists
nothing, and an extension added in place to the kind's set is what later listings filter by."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PACK = Path(__file__).parent / "api_packs" / "format_kind_pack" / "__init__.py"


@pytest.fixture
def pack(session):
    spec = importlib.util.spec_from_file_location("format_kind_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("format_kind_pack_under_test", None)


def test_a_kind_declared_with_no_folder_is_known_and_empty(pack):
    import folder_paths

    assert pack.KIND in folder_paths.folder_names_and_paths
    paths, extensions = folder_paths.folder_names_and_paths[pack.KIND]
    assert paths == [] and extensions == {".json"}
    assert folder_paths.get_filename_list(pack.KIND) == []
    assert folder_paths.get_full_path(pack.KIND, "h264.json") is None
    assert pack.ListFormats.INPUT_TYPES()["required"]["format"][0] == ["default"]


def test_files_appear_once_a_folder_is_added_and_in_place_extensions_count(pack, tmp_path):
    import folder_paths

    formats = tmp_path / "my_formats"
    formats.mkdir()
    for name in ("h264.json", "av1.yaml", "notes.txt"):
        (formats / name).write_text("{}")
    folder_paths.add_model_folder_path(pack.KIND, str(formats))
    assert folder_paths.get_filename_list(pack.KIND) == ["h264.json"]
    pack.add_extension(pack.KIND, ".yaml")  # the set the mapping holds, changed in place
    assert folder_paths.folder_names_and_paths[pack.KIND][1] == {".json", ".yaml"}
    assert folder_paths.get_filename_list(pack.KIND) == ["av1.yaml", "h264.json"]
    assert folder_paths.get_full_path(pack.KIND, "av1.yaml") == str((formats / "av1.yaml").resolve())


def test_in_place_extensions_of_a_built_in_kind_count(pack, tmp_path):
    import folder_paths

    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    (loras / "a.safetensors").write_bytes(b"x")
    (loras / "b.bin").write_bytes(b"x")
    (loras / "c.txt").write_bytes(b"x")
    assert folder_paths.get_filename_list("loras") == ["a.safetensors", "b.bin"]
    pack.add_extension("loras", ".txt")
    assert folder_paths.get_filename_list("loras") == ["a.safetensors", "b.bin", "c.txt"]


def test_a_malformed_declaration_is_refused(session):
    import folder_paths

    with pytest.raises(TypeError, match="must be"):
        folder_paths.folder_names_and_paths["fixture_bad"] = ((),)
