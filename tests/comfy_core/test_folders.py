from pathlib import Path

import pytest

from comfy_core.folders import ModelFolderError, ModelFolders, load_extra_model_paths


def test_default_layout_lists_model_files_relative_and_sorted(tmp_path: Path):
    folders = ModelFolders.default(tmp_path / "models")
    ckpts = tmp_path / "models" / "checkpoints"
    (ckpts / "sub").mkdir(parents=True)
    (ckpts / "b.safetensors").write_bytes(b"x")
    (ckpts / "sub" / "a.ckpt").write_bytes(b"x")
    (ckpts / "notes.txt").write_text("not a model")
    (ckpts / ".hidden.safetensors").write_bytes(b"x")
    assert folders.filenames("checkpoints") == ["b.safetensors", "sub/a.ckpt"]
    assert folders.full_path("checkpoints", "sub/a.ckpt") == (ckpts / "sub" / "a.ckpt").resolve()


def test_full_path_never_leaves_the_folder(tmp_path: Path):
    folders = ModelFolders.default(tmp_path / "models")
    (tmp_path / "models" / "loras").mkdir(parents=True)
    (tmp_path / "secret.safetensors").write_bytes(b"x")
    assert folders.full_path("loras", "../../secret.safetensors") is None
    assert folders.full_path("loras", str(tmp_path / "secret.safetensors")) is None
    with pytest.raises(ModelFolderError, match="not found"):
        folders.full_path_or_raise("loras", "missing.safetensors")


def test_unknown_kind_is_a_clear_error(tmp_path: Path):
    with pytest.raises(ModelFolderError, match="unknown model folder kind"):
        ModelFolders.default(tmp_path).paths("nope")


def test_extra_model_paths_yaml_resolves_relative_to_the_yaml(tmp_path: Path):
    conf = tmp_path / "conf"
    conf.mkdir()
    yaml_file = conf / "extra_model_paths.yaml"
    yaml_file.write_text(
        "a111:\n"
        "    base_path: ../webui\n"
        "    checkpoints: models/Stable-diffusion\n"
        "    loras: |\n"
        "        models/Lora\n"
        "        models/LyCORIS\n"
        "other:\n"
        "    custom_nodes: my_nodes\n"
    )
    mapping, custom = load_extra_model_paths(yaml_file)
    webui = (tmp_path / "webui").resolve()
    assert mapping["checkpoints"] == [webui / "models" / "Stable-diffusion"]
    assert mapping["loras"] == [webui / "models" / "Lora", webui / "models" / "LyCORIS"]
    assert custom == [(conf / "my_nodes").resolve()]

    folders = ModelFolders.default(tmp_path / "models")
    folders.extend_from_yaml(yaml_file)
    (webui / "models" / "Stable-diffusion").mkdir(parents=True)
    (webui / "models" / "Stable-diffusion" / "v1.safetensors").write_bytes(b"x")
    assert "v1.safetensors" in folders.filenames("checkpoints")


def test_bad_yaml_is_a_typed_error(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ModelFolderError, match="mapping"):
        load_extra_model_paths(bad)


def test_links_inside_model_folders_are_followed(tmp_path: Path):
    target = tmp_path / "elsewhere"
    (target / "deep").mkdir(parents=True)
    (target / "deep" / "m.safetensors").write_bytes(b"x")
    (target / "file.safetensors").write_bytes(b"x")
    folders = ModelFolders.default(tmp_path / "models")
    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True)
    (loras / "linked.safetensors").symlink_to(target / "file.safetensors")
    (loras / "dir").symlink_to(target, target_is_directory=True)
    assert folders.filenames("loras") == ["dir/deep/m.safetensors", "dir/file.safetensors", "linked.safetensors"]
    assert folders.full_path("loras", "linked.safetensors") == loras / "linked.safetensors"
    assert folders.full_path("loras", "dir/deep/m.safetensors").read_bytes() == b"x"
    # The name is still confined lexically: a link does not open `..` or absolute names.
    assert folders.full_path("loras", "dir/../../elsewhere/file.safetensors") is None
    assert folders.full_path("loras", "") is None


def test_a_link_loop_in_a_model_folder_does_not_hang_the_listing(tmp_path: Path):
    folders = ModelFolders.default(tmp_path / "models")
    loras = tmp_path / "models" / "loras"
    (loras / "a").mkdir(parents=True)
    (loras / "a" / "x.safetensors").write_bytes(b"x")
    (loras / "a" / "loop").symlink_to(loras, target_is_directory=True)
    assert folders.filenames("loras") == ["a/x.safetensors"]


def test_a_declared_kind_is_known_with_no_folder_until_one_is_added(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    with pytest.raises(ModelFolderError):
        folders.paths("video_formats")
    folders.declare("video_formats")
    assert "video_formats" in folders.kinds()
    assert folders.paths("video_formats") == [] and folders.filenames("video_formats", None) == []
    (tmp_path / "formats").mkdir()
    (tmp_path / "formats" / "h264.json").write_text("{}")
    folders.add("video_formats", tmp_path / "formats")
    folders.declare("video_formats")  # declaring again keeps the folders
    assert folders.filenames("video_formats", {".json"}) == ["h264.json"]
