"""The image, text and training-set dataset nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026):
each node called as the executor calls it (list inputs as lists), its outputs checked against an
independent computation (Pillow / NumPy / plain Python), plus folder confinement and one workflow
through the executor (list outputs feeding per-item and list nodes)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from nodes.dataset_nodes import (adjust_brightness, adjust_contrast, center_crop_images, image_deduplication,
                                 image_grid, input_subfolders, load_image_dataset_from_folder,
                                 load_image_text_dataset_from_folder, merge_image_lists, normalize_images,
                                 random_crop_images, resize_images_by_longer_edge, resize_images_by_shorter_edge,
                                 save_image_dataset_to_folder, save_image_text_dataset_to_folder, shuffle_dataset,
                                 shuffle_image_text_dataset)
from nodes.dataset_text_nodes import (add_text_prefix, add_text_suffix, merge_text_lists, replace_text,
                                      strip_whitespace, text_to_lowercase, text_to_uppercase, truncate_text)
from nodes.dataset_training_nodes import (list_dataset_folders, load_training_dataset, make_training_dataset,
                                          resolution_bucket, save_training_dataset)
from nodes.errors import NodeInputError
from tests.nodes.node_context import folders_env, running_node
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def env(tmp_path):
    return folders_env(tmp_path)


def pixels(seed: int, height: int, width: int, channels: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, channels), dtype=np.uint8)


def as_image(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array.astype(np.float32) / 255.0)[None]


def to_uint8(image: torch.Tensor) -> np.ndarray:
    """ComfyUI's tensor_to_pil pixels: trunc(clip(255 x))."""
    return (image[0].numpy() * 255).clip(0, 255).astype(np.uint8)


def smooth(seed: int, height: int, width: int) -> torch.Tensor:
    """A random image, random float values (not uint8 steps), so quantization is visible."""
    return torch.rand(1, height, width, 3, generator=torch.Generator().manual_seed(seed))


# -- folders ---------------------------------------------------------------------------------------

def write_png(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_load_image_dataset_reads_the_subfolder_in_name_order(env):
    folder = env.input_dir / "set"
    arrays = {"b.png": pixels(1, 6, 5), "a.PNG": pixels(2, 4, 7), "c.webp": None, "notes.txt": None}
    write_png(folder / "b.png", arrays["b.png"])
    write_png(folder / "a.PNG", arrays["a.PNG"])
    Image.fromarray(pixels(3, 3, 3)).save(folder / "c.webp", lossless=True)
    (folder / "notes.txt").write_text("x")
    Image.fromarray(pixels(4, 3, 3)).save(folder / "skip.bmp")
    with running_node("LoadImageDataSetFromFolder", env=env):
        (images,) = load_image_dataset_from_folder("set")
    assert [tuple(i.shape) for i in images] == [(1, 4, 7, 3), (1, 6, 5, 3), (1, 3, 3, 3)]
    assert torch.equal(images[0], as_image(arrays["a.PNG"]))
    assert torch.equal(images[1], as_image(arrays["b.png"]))
    assert torch.equal(images[2], as_image(pixels(3, 3, 3)))


def test_loaded_images_are_rgb_and_grey_or_alpha_is_converted(env):
    folder = env.input_dir / "modes"
    grey = pixels(5, 4, 4, 1)[..., 0]
    rgba = pixels(6, 4, 4, 4)
    write_png(folder / "g.png", grey)
    write_png(folder / "r.png", rgba)
    with running_node("LoadImageDataSetFromFolder", env=env):
        (images,) = load_image_dataset_from_folder("modes")
    assert torch.equal(images[0], as_image(np.stack([grey] * 3, axis=-1)))
    assert torch.equal(images[1], as_image(rgba[..., :3]))


def test_load_image_text_dataset_pairs_captions_and_repeats_kohya_folders(env):
    folder = env.input_dir / "captioned"
    write_png(folder / "one.png", pixels(1, 4, 4))
    (folder / "one.txt").write_text("  a red cube \n", encoding="utf-8")
    write_png(folder / "two.jpg", pixels(2, 4, 4))  # no caption
    write_png(folder / "3_person" / "p.png", pixels(3, 5, 4))
    (folder / "3_person" / "p.txt").write_text("a person", encoding="utf-8")
    write_png(folder / "misc" / "m.png", pixels(4, 2, 2))
    with running_node("LoadImageTextDataSetFromFolder", env=env):
        images, texts = load_image_text_dataset_from_folder("captioned")
    assert texts == ["a person"] * 3 + ["", "a red cube", ""]  # "3_person" < "misc" < "one.png" < "two.jpg"
    assert [tuple(i.shape[1:3]) for i in images] == [(5, 4)] * 3 + [(2, 2), (4, 4), (4, 4)]
    assert torch.equal(images[4], as_image(pixels(1, 4, 4)))


def test_the_folder_combo_lists_input_subfolders(env):
    (env.input_dir / "a" / "b").mkdir(parents=True)
    (env.input_dir / "c").mkdir()
    assert input_subfolders(env) == ["a", "a/b", "c"]


@pytest.mark.parametrize("name", ["../outside", "/etc", "a/../../x"])
def test_folders_outside_the_input_folder_are_refused(env, name):
    (env.input_dir.parent / "outside").mkdir(exist_ok=True)
    write_png(env.input_dir.parent / "outside" / "x.png", pixels(1, 2, 2))
    with running_node("LoadImageDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="folder"):
        load_image_dataset_from_folder(name)
    with running_node("LoadImageTextDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="folder"):
        load_image_text_dataset_from_folder(name)


def test_a_link_out_of_the_input_folder_is_refused(env, tmp_path):
    outside = tmp_path / "elsewhere"
    write_png(outside / "x.png", pixels(1, 2, 2))
    os.symlink(outside, env.input_dir / "link")
    with running_node("LoadImageDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="outside"):
        load_image_dataset_from_folder("link")


def test_a_folder_without_images_is_an_input_error(env):
    (env.input_dir / "empty").mkdir()
    with running_node("LoadImageDataSetFromFolder", env=env), pytest.raises(NodeInputError, match="no valid images"):
        load_image_dataset_from_folder("empty")


def read_png(path) -> np.ndarray:
    with Image.open(path) as img:
        return np.array(img)


def test_save_image_dataset_overwrites_numbered_pngs(env):
    images = [smooth(1, 4, 5), smooth(2, 3, 3)]
    with running_node("SaveImageDataSetToFolder", env=env):
        assert save_image_dataset_to_folder(images, ["ds"], ["pic"], ["overwrite"]) == ()
        save_image_dataset_to_folder(images, ["ds"], ["pic"], ["overwrite"])
    folder = env.output_dir / "ds"
    assert sorted(os.listdir(folder)) == ["pic_00000.png", "pic_00001.png"]
    assert np.array_equal(read_png(folder / "pic_00000.png"), to_uint8(images[0]))
    assert np.array_equal(read_png(folder / "pic_00001.png"), to_uint8(images[1]))


def test_save_image_text_dataset_increments_and_writes_captions(env):
    images = [smooth(1, 4, 4), smooth(2, 4, 4)]
    with running_node("SaveImageTextDataSetToFolder", env=env):
        save_image_text_dataset_to_folder(images, ["ds"], ["img"], ["increment"], texts=["first", "second"])
        save_image_text_dataset_to_folder(images[:1], ["ds"], ["img"], ["increment"], texts=["again"])
    folder = env.output_dir / "ds"
    assert sorted(os.listdir(folder)) == ["img_00001_00000.png", "img_00001_00000.txt", "img_00001_00001.png",
                                          "img_00001_00001.txt", "img_00002_00000.png", "img_00002_00000.txt"]
    assert (folder / "img_00001_00001.txt").read_text(encoding="utf-8") == "second"
    assert (folder / "img_00002_00000.txt").read_text(encoding="utf-8") == "again"
    assert np.array_equal(read_png(folder / "img_00002_00000.png"), to_uint8(images[0]))


def test_saving_accepts_channels_first_and_refuses_batches(env):
    image = smooth(3, 6, 7)
    with running_node("SaveImageDataSetToFolder", env=env):
        save_image_dataset_to_folder([image[0].permute(2, 0, 1)], ["cf"], ["x"], ["overwrite"])
        with pytest.raises(NodeInputError, match="images"):
            save_image_dataset_to_folder([torch.zeros(2, 4, 4, 3)], ["cf"], ["x"], ["overwrite"])
    assert np.array_equal(read_png(env.output_dir / "cf" / "x_00000.png"), to_uint8(image))


@pytest.mark.parametrize("folder_name, prefix, mode", [("../escape", "x", "overwrite"), ("/tmp", "x", "overwrite"),
                                                      ("ok", "../../x", "overwrite"), ("ok", "../../x", "increment")])
def test_saving_outside_the_output_folder_is_refused(env, folder_name, prefix, mode):
    with running_node("SaveImageTextDataSetToFolder", env=env), pytest.raises(NodeInputError):
        save_image_text_dataset_to_folder([smooth(1, 2, 2)], [folder_name], [prefix], [mode], texts=["t"])
    assert not (env.output_dir.parent / "escape").exists() and not (env.output_dir.parent / "x_00000.png").exists()


# -- image transforms ------------------------------------------------------------------------------

def pil_resize(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    resized = Image.fromarray(to_uint8(image)).resize((width, height), Image.Resampling.LANCZOS)
    return as_image(np.array(resized))


@pytest.mark.parametrize("height, width, edge, expected", [(30, 50, 20, (20, 33)), (50, 30, 20, (33, 20)),
                                                           (40, 40, 25, (25, 25))])
def test_resize_by_shorter_edge(height, width, edge, expected):
    image = smooth(1, height, width)
    (out,) = resize_images_by_shorter_edge(image, edge)
    assert tuple(out.shape[1:3]) == expected
    assert torch.equal(out, pil_resize(image, expected[1], expected[0]))


@pytest.mark.parametrize("height, width, edge, expected", [(30, 50, 20, (12, 20)), (50, 30, 20, (20, 12)),
                                                           (40, 40, 64, (64, 64))])
def test_resize_by_longer_edge(height, width, edge, expected):
    image = smooth(2, height, width)
    (out,) = resize_images_by_longer_edge(image, edge)
    assert tuple(out.shape[1:3]) == expected
    assert torch.equal(out, pil_resize(image, expected[1], expected[0]))


def test_a_batch_is_processed_frame_by_frame():
    batch = torch.cat([smooth(1, 20, 30), smooth(2, 20, 30)])
    (out,) = resize_images_by_shorter_edge(batch, 10)
    assert out.shape == (2, 10, 15, 3)
    assert torch.equal(out[1:], pil_resize(batch[1:], 15, 10))


def quantized(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((array * 255).clip(0, 255).astype(np.uint8).astype(np.float32) / 255.0)


@pytest.mark.parametrize("width, height", [(10, 6), (40, 6), (10, 40)])
def test_center_crop(width, height):
    image = smooth(3, 21, 17)
    (out,) = center_crop_images(image, width, height)
    array = image[0].numpy()
    left, top = max(0, (17 - width) // 2), max(0, (21 - height) // 2)
    expected = quantized(array[top:top + height, left:left + width])[None]
    assert torch.equal(out, expected)


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
def test_random_crop_follows_numpys_legacy_generator(seed):
    image = smooth(4, 30, 25)
    (out,) = random_crop_images(image, 10, 12, seed)
    np.random.seed(seed % (2**32 - 1))
    left = np.random.randint(0, 25 - 10 + 1)
    top = np.random.randint(0, 30 - 12 + 1)
    assert torch.equal(out, quantized(image[0].numpy()[top:top + 12, left:left + 10])[None])


def test_random_crop_draws_nothing_for_a_side_that_fits():
    image = smooth(5, 30, 8)
    (out,) = random_crop_images(image, 10, 12, 3)
    np.random.seed(3)
    top = np.random.randint(0, 30 - 12 + 1)  # the first draw goes to the height
    assert torch.equal(out, quantized(image[0].numpy()[top:top + 12, :])[None])


def test_normalize_brightness_contrast():
    image = smooth(6, 5, 5)
    assert torch.allclose(normalize_images(image, 0.25, 0.5)[0], (image - 0.25) / 0.5)
    assert torch.equal(adjust_brightness(image, 1.7)[0], torch.clamp(image * 1.7, 0, 1))
    assert torch.equal(adjust_contrast(image, 1.5)[0], torch.clamp((image - 0.5) * 1.5 + 0.5, 0, 1))
    assert torch.equal(adjust_contrast(image, 1.0)[0], image)


def test_shuffle_dataset_flattens_batches_and_permutes_with_the_seed():
    items = [torch.full((1, 2, 2, 3), float(i)) for i in range(5)]
    incoming = [torch.cat(items[:2]), items[2], torch.cat(items[3:])]
    (out,) = shuffle_dataset(incoming, [42])
    np.random.seed(42)
    order = np.random.permutation(5)
    assert [float(t[0, 0, 0, 0]) for t in out] == [float(i) for i in order]
    assert all(t.shape == (1, 2, 2, 3) for t in out)


def test_shuffle_image_text_keeps_pairs():
    images = [torch.full((1, 2, 2, 3), float(i)) for i in range(6)]
    texts = [f"t{i}" for i in range(6)]
    out_images, out_texts = shuffle_image_text_dataset(images, texts, [9])
    np.random.seed(9)
    order = np.random.permutation(6)
    assert out_texts == [f"t{i}" for i in order]
    assert [int(t[0, 0, 0, 0]) for t in out_images] == list(order)
    with pytest.raises(NodeInputError, match="texts"):
        shuffle_image_text_dataset(images, texts[:3], [9])


def pil_hash(image: torch.Tensor) -> list[bool]:
    grey = np.array(Image.fromarray(to_uint8(image)).resize((8, 8), Image.Resampling.LANCZOS).convert("L"))
    return list((grey > grey.mean()).ravel())


def test_deduplication_drops_images_as_similar_as_the_threshold():
    a = smooth(1, 32, 32)
    b = a.clone()
    b[:, :2] = 1 - b[:, :2]  # a small change
    c = torch.flip(smooth(2, 32, 32), dims=[1])
    distance = sum(x != y for x, y in zip(pil_hash(a), pil_hash(b)))
    similarity = 1 - distance / 64
    assert 0.5 < similarity < 1.0
    (kept,) = image_deduplication([a, torch.cat([a, b]), c], [similarity])  # a, a, b, c: the copy and b go
    assert len(kept) == 2 and torch.equal(kept[0], a) and torch.equal(kept[1], c)
    (strict,) = image_deduplication([a, b, c], [1.0])  # only identical hashes are duplicates
    assert len(strict) == 3
    (none,) = image_deduplication([], [0.9])
    assert none == []


def test_image_grid_matches_pillow_pasting():
    images = [smooth(i, 10 + i, 12) for i in range(5)]
    (grid,) = image_grid(images, [2], [8], [6], [3])
    expected = Image.new("RGB", (2 * 8 + 3, 3 * 6 + 2 * 3), (0, 0, 0))
    for index, image in enumerate(images):
        cell = Image.fromarray(to_uint8(image)).resize((8, 6), Image.Resampling.LANCZOS)
        expected.paste(cell, ((index % 2) * 11, (index // 2) * 9))
    assert torch.equal(grid, as_image(np.array(expected)))
    with pytest.raises(NodeInputError):
        image_grid([], [2], [8], [6], [3])


def test_merge_image_lists_flattens():
    a, b = torch.zeros(2, 3, 3, 3), torch.ones(1, 4, 4, 3)
    (out,) = merge_image_lists([a, b])
    assert [tuple(t.shape) for t in out] == [(1, 3, 3, 3)] * 2 + [(1, 4, 4, 3)]


def test_bad_images_are_input_errors():
    with pytest.raises(NodeInputError, match="images"):
        center_crop_images("not an image", 4, 4)
    with pytest.raises(NodeInputError, match="images"):
        shuffle_dataset([torch.zeros(3, 3)], [0])


# -- text ------------------------------------------------------------------------------------------

def test_text_transforms():
    assert text_to_lowercase("A Red CUBE") == ("a red cube",)
    assert text_to_uppercase("a red cube") == ("A RED CUBE",)
    assert truncate_text("abcdefgh", 3) == ("abc",)
    assert add_text_prefix("cube", "photo of a ") == ("photo of a cube",)
    assert add_text_suffix("cube", ", 4k") == ("cube, 4k",)
    assert replace_text("a cat and a cat", "cat", "dog") == ("a dog and a dog",)
    assert strip_whitespace("  \t cube \n") == ("cube",)
    assert merge_text_lists(["a", "b", "c"]) == (["a", "b", "c"],)
    with pytest.raises(NodeInputError, match="texts"):
        text_to_lowercase(3)


# -- training sets ---------------------------------------------------------------------------------

def conditioning(value: float, entries: int = 1) -> list:
    return [[torch.full((1, 2, 4), value + i), {"pooled_output": torch.full((1, 4), value)}] for i in range(entries)]


def test_resolution_bucket_groups_samples_by_size():
    latents = [{"samples": torch.full((1, 4, 8, 8), 1.0)}, {"samples": torch.full((2, 4, 8, 6), 2.0)},
               {"samples": torch.full((1, 4, 8, 8), 3.0)}]
    conds = [conditioning(10), conditioning(20, 2), conditioning(30)]
    out_latents, out_conds = resolution_bucket(latents, conds)
    assert [tuple(l["samples"].shape) for l in out_latents] == [(2, 4, 8, 8), (2, 4, 8, 6)]
    assert out_latents[0]["samples"][:, 0, 0, 0].tolist() == [1.0, 3.0]
    assert [c[0][0, 0, 0].item() for c in out_conds[0]] == [10.0, 30.0]
    assert [c[0][0, 0, 0].item() for c in out_conds[1]] == [20.0, 21.0]
    with pytest.raises(NodeInputError, match="conditioning"):
        resolution_bucket(latents, conds[:2])
    with pytest.raises(NodeInputError, match="conditioning"):
        resolution_bucket(latents[1:2], [conditioning(1)])  # 2 samples, 1 entry


def test_training_dataset_round_trip_in_shards(env):
    latents = [{"samples": torch.randn(1, 4, 8, 8)} for _ in range(5)]
    conds = [conditioning(float(i)) for i in range(5)]
    with running_node("SaveTrainingDataset", env=env):
        assert save_training_dataset(latents, conds, ["proj/run1"], [2]) == ()
    folder = env.folders.paths("datasets")[0] / "proj" / "run1"
    assert sorted(os.listdir(folder)) == ["metadata.json", "shard_0000.pkl", "shard_0001.pkl", "shard_0002.pkl"]
    assert json.loads((folder / "metadata.json").read_text()) == {"num_samples": 5, "num_shards": 3, "shard_size": 2}
    assert list_dataset_folders(env) == ["proj/run1"]
    with running_node("LoadTrainingDataset", env=env):
        back_latents, back_conds = load_training_dataset("proj/run1")
    assert len(back_latents) == 5 and all(torch.equal(a["samples"], b["samples"]) for a, b in zip(latents, back_latents))
    assert all(torch.equal(a[0][0], b[0][0]) and torch.equal(a[0][1]["pooled_output"], b[0][1]["pooled_output"])
               for a, b in zip(conds, back_conds))


def test_dataset_folders_listing_stops_at_datasets_and_skips_plain_folders(env):
    root = env.folders.paths("datasets")[0]
    (root / "a" / "inner").mkdir(parents=True)
    (root / "a" / "metadata.json").write_text("{}")
    (root / "a" / "inner" / "metadata.json").write_text("{}")  # inside a dataset: not listed
    (root / "b" / "c").mkdir(parents=True)
    (root / "b" / "c" / "x.safetensors").write_bytes(b"")
    (root / "plain").mkdir()
    os.symlink(root / "b", root / "loop_to_b")  # the same folder through a link is walked once
    assert list_dataset_folders(env) in (["a", "b/c"], ["a", "loop_to_b/c"])


@pytest.mark.parametrize("name", ["", ".", "../x", "/tmp/x"])
def test_dataset_folders_must_be_inside_the_datasets_folder(env, name):
    with running_node("SaveTrainingDataset", env=env), pytest.raises(NodeInputError, match="folder_name"):
        save_training_dataset([{"samples": torch.zeros(1, 4, 2, 2)}], [conditioning(0)], [name], [10])
    with running_node("LoadTrainingDataset", env=env), pytest.raises(NodeInputError, match="folder_name"):
        load_training_dataset(name)


def test_save_training_dataset_needs_matching_lengths(env):
    with running_node("SaveTrainingDataset", env=env), pytest.raises(NodeInputError, match="conditioning"):
        save_training_dataset([{"samples": torch.zeros(1, 4, 2, 2)}], [], ["x"], [10])


@pytest.fixture(scope="module")
def sd1_parts(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    _model, clip, vae = load_checkpoint(tiny_sd1_ckpt)
    return clip, vae


def test_make_training_dataset_encodes_as_vae_encode_and_clip_text_encode(sd1_parts):
    from nodes.conditioning import clip_text_encode
    from nodes.latent import vae_encode

    clip, vae = sd1_parts
    images = [smooth(1, 64, 64), torch.cat([smooth(2, 64, 64), smooth(3, 64, 64)])]
    latents, conds = make_training_dataset(images, [vae], [clip], ["a red cube", "a blue ball"])
    assert len(latents) == 2 and len(conds) == 2
    assert torch.allclose(latents[1]["samples"], vae_encode(images[1], vae)[0]["samples"])
    expected = clip_text_encode("a blue ball", clip)[0]
    assert torch.allclose(conds[1][0][0], expected[0][0])
    _l, single = make_training_dataset(images, [vae], [clip], ["a red cube"])  # one caption for all
    assert len(single) == 2 and torch.allclose(single[1][0][0], clip_text_encode("a red cube", clip)[0][0][0])
    _l, empty = make_training_dataset(images[:1], [vae], [clip], None)  # no caption: the empty prompt
    assert torch.allclose(empty[0][0][0], clip_text_encode("", clip)[0][0][0])
    with pytest.raises(NodeInputError, match="texts"):
        make_training_dataset(images, [vae], [clip], ["a", "b", "c"])


def test_an_encoded_dataset_saves_and_loads_back(sd1_parts, env):
    clip, vae = sd1_parts
    latents, conds = make_training_dataset([smooth(4, 64, 64)], [vae], [clip], ["a red cube"])
    with running_node("SaveTrainingDataset", env=env):
        save_training_dataset(latents, conds, ["encoded"], [1000])
    with running_node("LoadTrainingDataset", env=env):
        back_latents, back_conds = load_training_dataset("encoded")  # weights_only: plain tensors and dicts
    assert torch.equal(back_latents[0]["samples"], latents[0]["samples"])
    assert torch.equal(back_conds[0][0][0], conds[0][0][0])
    assert back_conds[0][0][1].keys() == conds[0][0][1].keys()


# -- through the executor --------------------------------------------------------------------------

async def test_a_dataset_workflow_runs_per_item_and_per_list(tmp_path):
    runner = Runner(tmp_path)
    folder = runner.env.input_dir / "set"
    for i in range(3):
        write_png(folder / f"{i}.png", pixels(i, 20, 30))
        (folder / f"{i}.txt").write_text(f"caption {i}", encoding="utf-8")
    prompt = {
        "load": node("LoadImageTextDataSetFromFolder", folder="set"),
        "resize": node("ResizeImagesByShorterEdge", images=["load", 0], shorter_edge=10),
        "upper": node("TextToUppercase", texts=["load", 1]),
        "save": node("SaveImageTextDataSetToFolder", images=["resize", 0], texts=["upper", 0], folder_name="out",
                     filename_prefix="img", mode="overwrite"),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert runner.ran.count("resize") == 3 and runner.ran.count("upper") == 3 and runner.ran.count("save") == 1
    saved = runner.env.output_dir / "out"
    assert sorted(os.listdir(saved)) == [f"img_0000{i}.{ext}" for i in range(3) for ext in ("png", "txt")]
    assert (saved / "img_00002.txt").read_text(encoding="utf-8") == "CAPTION 2"
    expected = np.array(Image.fromarray(pixels(2, 20, 30)).resize((15, 10), Image.Resampling.LANCZOS))
    assert np.array_equal(read_png(saved / "img_00002.png"), expected)
