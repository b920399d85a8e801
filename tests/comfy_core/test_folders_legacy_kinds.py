"""ComfyUI's split-model folders: `diffusion_models` holds models/unet and models/diffusion_models,
`text_encoders` models/text_encoders and models/clip (in ComfyUI's order), the legacy names
`unet` / `clip` are the same kinds, and `diffusers` folders are found by their model_index.json
(what UNETLoader, CLIPLoader and DiffusersLoader list, and packs see through folder_paths)."""
from __future__ import annotations

from comfy_core.folders import ModelFolders, canonical_kind


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def test_split_kinds_include_their_legacy_folders_in_comfyuis_order(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    models = (tmp_path / "models").resolve()
    assert folders.paths("diffusion_models") == [models / "unet", models / "diffusion_models"]
    assert folders.paths("text_encoders") == [models / "text_encoders", models / "clip"]
    assert folders.paths("unet") == folders.paths("diffusion_models")
    assert folders.paths("clip") == folders.paths("text_encoders")
    assert canonical_kind("clip") == "text_encoders" and canonical_kind("vae") == "vae"


def test_listings_and_lookups_reach_the_legacy_folders(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    _touch(tmp_path / "models" / "unet" / "old.safetensors")
    _touch(tmp_path / "models" / "diffusion_models" / "new.safetensors")
    _touch(tmp_path / "models" / "clip" / "clip_l.safetensors")
    _touch(tmp_path / "models" / "text_encoders" / "t5.safetensors")
    assert folders.filenames("diffusion_models") == ["new.safetensors", "old.safetensors"]
    assert folders.filenames("unet") == ["new.safetensors", "old.safetensors"]
    assert folders.filenames("text_encoders") == ["clip_l.safetensors", "t5.safetensors"]
    assert folders.full_path("text_encoders", "clip_l.safetensors") == tmp_path.resolve() / "models/clip/clip_l.safetensors"
    assert [e.path_index for e in folders.entries("diffusion_models")] == [0, 1]  # unet first, as ComfyUI


def test_legacy_names_add_to_their_kind(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    extra = tmp_path / "shared" / "clip"
    folders.add("clip", extra)
    assert folders.paths("text_encoders")[-1] == extra.resolve()
    yaml_file = tmp_path / "extra_model_paths.yaml"
    yaml_file.write_text("a111:\n  base_path: webui\n  unet: models/Unet\n", encoding="utf-8")
    folders.extend_from_yaml(yaml_file)
    assert folders.paths("diffusion_models")[-1] == (tmp_path / "webui" / "models" / "Unet").resolve()


def test_kinds_list_the_diffusers_folder_and_the_legacy_names(tmp_path):
    kinds = ModelFolders.default(tmp_path / "models").kinds()
    assert {"diffusion_models", "unet", "text_encoders", "clip", "diffusers"} <= set(kinds)


def test_diffusers_pipelines_are_the_folders_with_a_model_index(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    root = tmp_path / "models" / "diffusers"
    _touch(root / "sd15" / "model_index.json")
    _touch(root / "sd15" / "unet" / "diffusion_pytorch_model.safetensors")
    _touch(root / "vendor" / "sdxl" / "model_index.json")
    _touch(root / "notes" / "readme.txt")
    _touch(root / ".cache" / "model_index.json")
    assert folders.folders_holding("diffusers", "model_index.json") == ["sd15", "vendor/sdxl"]
    assert folders.full_folder_path("diffusers", "vendor/sdxl") == (root / "vendor" / "sdxl").resolve()
    assert folders.full_folder_path("diffusers", "../diffusers/sd15") is None
    assert folders.full_folder_path("diffusers", "missing") is None


def test_folder_paths_face_answers_legacy_names_as_comfyui(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    _touch(tmp_path / "models" / "clip" / "clip_l.safetensors")
    with compat.install(env, Registry()).activate():
        import folder_paths

        assert folder_paths.get_folder_paths("clip") == folder_paths.get_folder_paths("text_encoders")
        assert folder_paths.get_filename_list("text_encoders") == ["clip_l.safetensors"]
        assert folder_paths.get_filename_list("clip") == ["clip_l.safetensors"]
        assert folder_paths.get_folder_paths("diffusers") == [str((tmp_path / "models" / "diffusers").resolve())]
