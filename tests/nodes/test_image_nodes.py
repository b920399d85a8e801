"""The image nodes: files, names, pixels and masks exactly as ComfyUI's, and no path escapes."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from graph.object_info import node_info
from nodes import builtin_node_functions
from nodes import image as image_nodes
from nodes.environment import Environment
from comfy_core.image.pixels import image_to_uint8
from nodes.errors import NodeInputError


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    environment = Environment.rooted_at(tmp_path / "base")
    environment.ensure_dirs()
    return environment


@contextmanager
def running_in(env: Environment, node_id: str = "1"):
    token = set_current(NodeContext(prompt_id="p", node_id=node_id, display_node_id=node_id,
                                    list_index=None, env=env))
    try:
        yield
    finally:
        reset_current(token)


def _ramp(batch: int = 1, height: int = 4, width: int = 6, channels: int = 3) -> torch.Tensor:
    values = torch.linspace(0, 1, batch * height * width * channels)
    return values.reshape(batch, height, width, channels)


# --- SaveImage -----------------------------------------------------------------------------------

def test_save_image_writes_png_with_prompt_and_workflow_chunks(env: Environment) -> None:
    prompt = {"9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x"}}}
    workflow = {"nodes": [{"id": 9, "type": "SaveImage"}], "links": []}
    with running_in(env):
        images = _ramp()
        out = image_nodes.save_image(images, "ComfyUI", prompt=prompt, extra_pnginfo={"workflow": workflow})
    assert out["ui"] == {"images": [{"filename": "ComfyUI_00001_.png", "subfolder": "", "type": "output"}]}
    assert out["result"][0] is images  # today's SaveImage passes its images on
    with Image.open(env.output_dir / "ComfyUI_00001_.png") as img:
        assert img.format == "PNG" and img.size == (6, 4) and img.mode == "RGB"
        assert json.loads(img.text["prompt"]) == prompt
        assert json.loads(img.text["workflow"]) == workflow


def test_save_image_without_hidden_inputs_writes_no_chunks(env: Environment) -> None:
    with running_in(env):
        image_nodes.save_image(_ramp(), "plain")
    with Image.open(env.output_dir / "plain_00001_.png") as img:
        assert "prompt" not in img.text and "workflow" not in img.text


def test_extra_pnginfo_must_be_an_object(env: Environment) -> None:
    with running_in(env), pytest.raises(NodeInputError, match="'extra_pnginfo' expected an object"):
        image_nodes.save_image(_ramp(), "x", extra_pnginfo=["workflow"])


def test_pixels_are_clipped_then_truncated_not_rounded(env: Environment) -> None:
    values = torch.tensor([0.999, 1.5, -0.2, 0.5, 0.0019, 0.0021]).reshape(1, 1, 2, 3)
    with running_in(env):
        image_nodes.save_image(values, "px")
    pixels = np.array(Image.open(env.output_dir / "px_00001_.png"))
    # 254.745 -> 254, 382.5 -> 255, -51 -> 0, 127.5 -> 127, 0.4845 -> 0, 0.5355 -> 0
    assert pixels.reshape(-1).tolist() == [254, 255, 0, 127, 0, 0]


def test_counter_continues_after_the_largest_existing_number(env: Environment) -> None:
    for name in ("ComfyUI_00005_.png", "ComfyUI_00002_.png", "ComfyUI_temp_abcde_00009_.png",
                 "ComfyUIx_00042_.png", "Other_00077_.png"):
        (env.output_dir / name).write_bytes(b"")
    with running_in(env):
        out = image_nodes.save_image(_ramp(batch=2), "ComfyUI")
    names = [entry["filename"] for entry in out["ui"]["images"]]
    assert names == ["ComfyUI_00006_.png", "ComfyUI_00007_.png"]
    with running_in(env):
        again = image_nodes.save_image(_ramp(), "ComfyUI")
    assert again["ui"]["images"][0]["filename"] == "ComfyUI_00008_.png"


def test_subfolders_in_the_prefix_are_created_and_reported(env: Environment) -> None:
    with running_in(env):
        out = image_nodes.save_image(_ramp(), "portraits/faces/face")
    assert out["ui"]["images"] == [{"filename": "face_00001_.png", "subfolder": "portraits/faces", "type": "output"}]
    assert (env.output_dir / "portraits" / "faces" / "face_00001_.png").is_file()


def test_prefix_variables_and_batch_number(env: Environment) -> None:
    with running_in(env):
        out = image_nodes.save_image(_ramp(batch=2, height=4, width=6), "img_%width%x%height%_b%batch_num%")
    names = [entry["filename"] for entry in out["ui"]["images"]]
    assert names == ["img_6x4_b0_00001_.png", "img_6x4_b1_00002_.png"]


@pytest.mark.parametrize("prefix", ["../escaped", "a/../../escaped", "/tmp/absolute"])
def test_prefix_cannot_leave_the_output_folder(env: Environment, prefix: str) -> None:
    with running_in(env), pytest.raises(NodeInputError, match="filename_prefix"):
        image_nodes.save_image(_ramp(), prefix)
    assert not (env.output_dir.parent / "escaped_00001_.png").exists()


def test_prefix_through_a_symlink_out_of_the_output_folder_is_refused(env: Environment, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (env.output_dir / "link").symlink_to(outside, target_is_directory=True)
    with running_in(env), pytest.raises(NodeInputError, match="outside"):
        image_nodes.save_image(_ramp(), "link/x")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("bad", [torch.zeros(4, 6, 3), torch.zeros(1, 4, 6, 2), "not a tensor"])
def test_save_image_rejects_what_is_not_an_image_batch(env: Environment, bad) -> None:
    with running_in(env), pytest.raises(NodeInputError, match="'images' expected an IMAGE"):
        image_nodes.save_image(bad, "x")


def test_rgba_images_are_saved_with_alpha(env: Environment) -> None:
    with running_in(env):
        image_nodes.save_image(_ramp(channels=4), "rgba")
    with Image.open(env.output_dir / "rgba_00001_.png") as img:
        assert img.mode == "RGBA"


def test_preview_image_goes_to_temp_with_a_random_suffix(env: Environment) -> None:
    with running_in(env):
        shown = image_nodes.preview_image(images := _ramp())
        assert shown["result"][0] is images  # today's PreviewImage passes its images on too
        first = shown["ui"]["images"][0]
        second = image_nodes.preview_image(_ramp())["ui"]["images"][0]
    assert first["type"] == "temp" and first["subfolder"] == ""
    assert first["filename"].startswith("ComfyUI_temp_") and first["filename"].endswith("_00001_.png")
    assert first["filename"] != second["filename"]
    assert (env.temp_dir / first["filename"]).is_file()
    assert list(env.output_dir.iterdir()) == []


# --- LoadImage / LoadImageMask --------------------------------------------------------------------

def _write_rgba(path: Path, alpha: int = 64) -> np.ndarray:
    pixels = np.zeros((3, 5, 4), dtype=np.uint8)
    pixels[..., 0] = 200
    pixels[..., 1] = np.arange(5, dtype=np.uint8)[None, :] * 50
    pixels[..., 2] = 10
    pixels[..., 3] = alpha
    Image.fromarray(pixels, "RGBA").save(path)
    return pixels


def test_load_image_returns_rgb_and_mask_from_alpha(env: Environment) -> None:
    pixels = _write_rgba(env.input_dir / "a.png", alpha=64)
    with running_in(env):
        image, mask = image_nodes.load_image("a.png")
    assert image.shape == (1, 3, 5, 3) and image.dtype == torch.float32
    assert torch.allclose(image[0], torch.from_numpy(pixels[..., :3].astype(np.float32) / 255.0))
    assert mask.shape == (1, 3, 5)
    assert torch.allclose(mask, torch.full((1, 3, 5), 1.0 - 64 / 255.0))


def test_load_image_without_alpha_gives_comfyuis_64x64_empty_mask(env: Environment) -> None:
    Image.new("RGB", (7, 3), (10, 20, 30)).save(env.input_dir / "rgb.jpg", quality=100)
    with running_in(env):
        image, mask = image_nodes.load_image("rgb.jpg")
    assert image.shape == (1, 3, 7, 3)
    assert mask.shape == (1, 64, 64) and mask.abs().sum() == 0


def test_load_image_palette_transparency_becomes_the_mask(env: Environment) -> None:
    img = Image.new("P", (2, 1))
    img.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    img.putpixel((0, 0), 0)
    img.putpixel((1, 0), 1)
    img.info["transparency"] = 0
    img.save(env.input_dir / "pal.png", transparency=0)
    with running_in(env):
        _, mask = image_nodes.load_image("pal.png")
    assert mask.tolist() == [[[1.0, 0.0]]]


def test_load_image_animation_becomes_a_batch(env: Environment) -> None:
    frames = [Image.new("RGB", (4, 4), (c, c, c)) for c in (0, 120, 250)]
    frames[0].save(env.input_dir / "anim.gif", save_all=True, append_images=frames[1:], duration=10)
    with running_in(env):
        image, mask = image_nodes.load_image("anim.gif")
    assert image.shape == (3, 4, 4, 3) and mask.shape == (3, 64, 64)
    assert image[0].max() < image[1].min() and image[1].max() < image[2].min()


def test_load_image_applies_exif_orientation(env: Environment) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    Image.new("RGB", (8, 2), (255, 0, 0)).save(env.input_dir / "rot.jpg", exif=exif)
    with running_in(env):
        image, _ = image_nodes.load_image("rot.jpg")
    assert image.shape == (1, 8, 2, 3)


def test_load_image_reads_annotated_and_subfolder_names(env: Environment) -> None:
    (env.input_dir / "sub").mkdir()
    _write_rgba(env.input_dir / "sub" / "s.png")
    _write_rgba(env.output_dir / "o.png", alpha=255)
    with running_in(env):
        assert image_nodes.load_image("sub/s.png")[0].shape == (1, 3, 5, 3)
        _, mask = image_nodes.load_image("o.png [output]")
    assert mask.abs().sum() == 0


@pytest.mark.parametrize("name", ["../secret.png", "/etc/passwd", "sub/../../secret.png", "a\\..\\secret.png",
                                  "../secret.png [output]", ""])
def test_load_image_refuses_names_outside_the_input_folder(env: Environment, name: str) -> None:
    _write_rgba(env.input_dir.parent / "secret.png")
    with running_in(env), pytest.raises(NodeInputError, match="'image'"):
        image_nodes.load_image(name)
    with running_in(env):
        assert image_nodes.image_exists(name) is not True


def test_load_image_refuses_a_symlink_leading_out(env: Environment, tmp_path: Path) -> None:
    _write_rgba(tmp_path / "outside.png")
    (env.input_dir / "inside.png").symlink_to(tmp_path / "outside.png")
    with running_in(env), pytest.raises(NodeInputError, match="outside"):
        image_nodes.load_image("inside.png")


def test_validate_inputs_reports_missing_files(env: Environment) -> None:
    _write_rgba(env.input_dir / "here.png")
    with running_in(env):
        assert image_nodes.image_exists("here.png") is True
        assert image_nodes.image_exists("gone.png") == "Invalid image file: gone.png"


def test_without_a_context_validation_defers_to_the_run_and_the_node_always_runs() -> None:
    # No context: the folders are unknown, so the loader's own run-time check decides.
    assert image_nodes.image_exists("anything.png") is True
    changed = spec_of(image_nodes.load_image).behaviour.is_changed(image="anything.png")
    assert changed != changed  # NaN: never equal to a previous run's value


def test_is_changed_follows_the_file_content(env: Environment) -> None:
    path = env.input_dir / "c.png"
    _write_rgba(path, alpha=10)
    spec = spec_of(image_nodes.load_image)
    with running_in(env):
        first = spec.behaviour.is_changed(image="c.png")
        assert spec.behaviour.is_changed(image="c.png") == first
        _write_rgba(path, alpha=11)
        assert spec.behaviour.is_changed(image="c.png") != first
        mask_spec = spec_of(image_nodes.load_image_mask)
        assert mask_spec.behaviour.is_changed(image="c.png", channel="red") == spec.behaviour.is_changed(image="c.png")


@pytest.mark.parametrize("channel, expected", [("red", 200 / 255), ("green", None), ("blue", 10 / 255),
                                               ("alpha", 1 - 64 / 255)])
def test_load_image_mask_channels(env: Environment, channel: str, expected) -> None:
    pixels = _write_rgba(env.input_dir / "m.png", alpha=64)
    with running_in(env):
        (mask,) = image_nodes.load_image_mask("m.png", channel)
    assert mask.shape == (1, 3, 5)
    if expected is None:
        expected = torch.from_numpy(pixels[..., 1].astype(np.float32) / 255.0)
    assert torch.allclose(mask[0], torch.as_tensor(expected, dtype=torch.float32).expand(3, 5))


def test_load_image_mask_alpha_of_an_opaque_image_is_empty(env: Environment) -> None:
    Image.new("RGB", (3, 2), (1, 2, 3)).save(env.input_dir / "opaque.png")
    with running_in(env):
        (mask,) = image_nodes.load_image_mask("opaque.png", "alpha")
    assert mask.shape == (1, 2, 3) and mask.abs().sum() == 0


def test_input_folder_listing_is_sorted_top_level_images_with_upload(env: Environment) -> None:
    for name in ("b.png", "a.jpg", "notes.txt", "c.webp"):
        (env.input_dir / name).write_bytes(b"x")
    (env.input_dir / "sub").mkdir()
    (env.input_dir / "sub" / "deep.png").write_bytes(b"x")
    info = node_info(spec_of(image_nodes.load_image), env)
    assert info["input"]["required"]["image"] == [["a.jpg", "b.png", "c.webp"], {"image_upload": True}]
    assert info["output"] == ["IMAGE", "MASK"] and info["category"] == "image"
    assert info["display_name"] == "Load Image" and info["python_module"] == "nodes"


def test_object_info_matches_comfyuis_declarations(env: Environment) -> None:
    save = node_info(spec_of(image_nodes.save_image), env)
    assert save["output_node"] is True and (save["output"], save["output_name"]) == (["IMAGE"], ["images"])
    assert save["essentials_category"] == "Basics" and "export image" in save["search_aliases"]
    assert save["input"]["hidden"] == {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}
    assert save["input"]["required"]["filename_prefix"][1]["default"] == "ComfyUI"
    scale = node_info(spec_of(image_nodes.image_scale), env)
    assert scale["input_order"]["required"] == ["image", "upscale_method", "width", "height", "crop"]
    assert scale["input"]["required"]["upscale_method"][0] == ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
    rebatch = node_info(spec_of(image_nodes.rebatch_images), env)
    assert rebatch["output_is_list"] == [True]
    mask = node_info(spec_of(image_nodes.load_image_mask), env)
    assert mask["input"]["required"]["channel"] == [["alpha", "red", "green", "blue"]]


def test_the_image_nodes_are_builtins() -> None:
    names = {spec_of(fn).node_id for fn in builtin_node_functions()}
    assert {"SaveImage", "PreviewImage", "LoadImage", "LoadImageMask", "ImageScale", "RebatchImages"} <= names


# --- ImageScale / RebatchImages ---------------------------------------------------------------------

def test_image_scale_matches_torch_interpolation() -> None:
    image = _ramp(batch=2, height=4, width=6)
    (out,) = image_nodes.image_scale(image, "bilinear", 12, 8, "disabled")
    expected = torch.nn.functional.interpolate(image.movedim(-1, 1), size=(8, 12), mode="bilinear").movedim(1, -1)
    assert out.shape == (2, 8, 12, 3) and torch.equal(out, expected)


def test_image_scale_zero_side_keeps_the_aspect_ratio() -> None:
    image = _ramp(height=4, width=6)
    assert image_nodes.image_scale(image, "nearest-exact", 0, 8, "disabled")[0].shape == (1, 8, 12, 3)
    assert image_nodes.image_scale(image, "area", 3, 0, "disabled")[0].shape == (1, 2, 3, 3)
    assert image_nodes.image_scale(image, "bicubic", 0, 0, "disabled")[0] is image


def test_image_scale_center_crop_cuts_the_middle() -> None:
    image = torch.zeros(1, 4, 8, 3)
    image[:, :, 2:6] = 1.0  # the centred 4x4 square is white, the sides black
    (out,) = image_nodes.image_scale(image, "nearest-exact", 4, 4, "center")
    assert out.shape == (1, 4, 4, 3) and torch.all(out == 1.0)


def test_image_scale_lanczos_uses_pillow_on_uint8() -> None:
    image = _ramp(height=4, width=6)
    (out,) = image_nodes.image_scale(image, "lanczos", 12, 8, "disabled")
    pixels = Image.fromarray(image_to_uint8(image[0]))
    expected = np.array(pixels.resize((12, 8), Image.Resampling.LANCZOS)).astype(np.float32) / 255.0
    assert torch.allclose(out[0], torch.from_numpy(expected))


def test_rebatch_regroups_all_images() -> None:
    first, second = _ramp(batch=3), _ramp(batch=2) + 5
    (batches,) = image_nodes.rebatch_images([first, second], [2])
    assert [b.shape[0] for b in batches] == [2, 2, 1]
    assert torch.equal(torch.cat(batches), torch.cat([first, second]))


def test_rebatch_refuses_mixed_sizes_in_one_batch() -> None:
    with pytest.raises(NodeInputError, match="one size"):
        image_nodes.rebatch_images([_ramp(height=4), _ramp(height=5)], [2])
    (batches,) = image_nodes.rebatch_images([_ramp(height=4), _ramp(height=5)], [1])
    assert [tuple(b.shape) for b in batches] == [(1, 4, 6, 3), (1, 5, 6, 3)]


async def test_prompt_validation_checks_loadimage_files_in_the_hosts_input_folder(env: Environment) -> None:
    from graph.registry import Registry
    from graph.validation import validate_prompt

    registry = Registry()
    for fn in (image_nodes.load_image, image_nodes.save_image):
        registry.add_native(fn)
    _write_rgba(env.input_dir / "there.png")

    def prompt(name: str) -> dict:
        return {"1": {"class_type": "LoadImage", "inputs": {"image": name}},
                "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}

    assert (await validate_prompt(prompt("there.png"), registry, env=env)).ok
    for bad in ("missing.png", "../there.png"):
        result = await validate_prompt(prompt(bad), registry, env=env)
        assert not result.ok
        error = result.node_errors["1"]["errors"][0]
        assert error["type"] == "custom_validation_failed" and error["extra_info"]["input_name"] == "image"


async def test_loadimage_is_cached_until_its_file_changes(env: Environment) -> None:
    from graph.executor import Executor
    from graph.registry import Registry

    registry = Registry()
    for fn in (image_nodes.load_image, image_nodes.save_image):
        registry.add_native(fn)
    executor = Executor(registry, env=env)
    _write_rgba(env.input_dir / "c.png", alpha=10)
    prompt = {"1": {"class_type": "LoadImage", "inputs": {"image": "c.png"}},
              "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "cache"}}}

    async def executed_nodes(prompt_id: str) -> list[str]:
        events = []
        outcome = await executor.execute(prompt, prompt_id, outputs=["2"], sink=events.append)
        assert outcome.status == "success"
        return [e.data["node"] for e in events if e.type == "executing" and e.data.get("node")]

    assert await executed_nodes("a") == ["1", "2"]
    assert await executed_nodes("b") == []  # same file: LoadImage's hash unchanged, all cached
    _write_rgba(env.input_dir / "c.png", alpha=11)
    assert await executed_nodes("c") == ["1", "2"]
