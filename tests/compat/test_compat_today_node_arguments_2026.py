"""Arguments today's ComfyUI's `execute` takes that our nodes lacked (compat/node_facades.py refused
them with UnsupportedNodeArgumentError): ImageScaleToTotalPixels.resolution_steps
(comfy_extras/nodes_post_processing.py@0c85348956e6: each side rounded to a multiple of it),
TripleCLIPLoader.device and QuadrupleCLIPLoader.device (nodes_sd3.py, nodes_hidream.py@f08c8478c741:
"cpu" keeps the text encoders on the CPU), Wan22FunControlToVideo.start_image (nodes_wan.py@ee54641d137d).
Packs call them on the class, positionally, as today."""
from __future__ import annotations

import math

import pytest
import torch


def _image(height: int = 37, width: int = 53) -> torch.Tensor:
    return torch.rand(2, height, width, 3, generator=torch.Generator().manual_seed(0))


def test_resolution_steps_rounds_each_side_to_its_multiple(session):
    from comfy_extras.nodes_post_processing import ImageScaleToTotalPixels

    image = _image()
    out = ImageScaleToTotalPixels.execute(image, "nearest-exact", 0.01, 32)[0]
    # independent: today's sizes, round(side * sqrt(total / (W * H)) / steps) * steps
    scale = math.sqrt(int(0.01 * 1024 * 1024) / (53 * 37))
    width, height = round(53 * scale / 32) * 32, round(37 * scale / 32) * 32
    assert (width, height) == (128, 96)
    assert out.shape == (2, height, width, 3)
    want = torch.nn.functional.interpolate(image.movedim(-1, 1), size=(height, width), mode="nearest-exact").movedim(1, -1)
    assert torch.allclose(out, want)


def test_resolution_steps_one_is_plain_rounding_and_the_default(session):
    from comfy_extras.nodes_post_processing import ImageScaleToTotalPixels

    image = _image()
    plain = ImageScaleToTotalPixels.execute(image, "bilinear", 0.01)[0]
    scale = math.sqrt(int(0.01 * 1024 * 1024) / (53 * 37))
    assert plain.shape == (2, round(37 * scale), round(53 * scale), 3) == (2, 86, 123, 3)
    assert torch.equal(ImageScaleToTotalPixels.execute(image, "bilinear", 0.01, resolution_steps=1)[0], plain)
    assert ImageScaleToTotalPixels.execute(image, "bilinear", 0.01, 16)[0].shape[1:3] == (80, 128)


def test_bad_resolution_steps_is_an_input_error(session):
    from comfy_extras.nodes_post_processing import ImageScaleToTotalPixels
    from nodes.errors import NodeInputError

    with pytest.raises(NodeInputError, match="resolution_steps"):
        ImageScaleToTotalPixels.execute(_image(), "bilinear", 0.01, 0)


@pytest.fixture
def sd3_encoders(session):
    from tests.fixtures.dit_checkpoints import sd3_state_dict, write_split_files

    files = write_split_files(sd3_state_dict(), session.env.output_dir.parent / "models", "tiny_sd3")
    return [files[slot].name for slot in ("clip_l", "clip_g", "t5xxl")]


def test_triple_clip_loader_device_reaches_the_loader(session, sd3_encoders, monkeypatch):
    import comfy_core.split as split
    from comfy_extras.nodes_sd3 import TripleCLIPLoader
    from nodes.errors import NodeInputError

    seen = []
    real = split.load_text_encoders

    def recording(*args, **kwargs):
        seen.append(kwargs.get("load_device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(split, "load_text_encoders", recording)
    cpu = TripleCLIPLoader.execute(*sd3_encoders, device="cpu")[0]
    default = TripleCLIPLoader.execute(*sd3_encoders)[0]
    assert seen == ["cpu", None]
    tokens = cpu.tokenize("a cat")
    assert torch.equal(cpu.encode_from_tokens(tokens), default.encode_from_tokens(default.tokenize("a cat")))
    with pytest.raises(NodeInputError, match="device"):
        TripleCLIPLoader.execute(*sd3_encoders, device="gpu")


def test_quadruple_clip_loader_takes_todays_device(session, monkeypatch):
    import nodes.hidream_nodes as hidream
    from comfy_extras.nodes_hidream import QuadrupleCLIPLoader

    calls = []
    monkeypatch.setattr(hidream, "_load_clip_files", lambda paths, kind, device: calls.append((kind, device)) or "CLIP")
    monkeypatch.setattr(hidream, "model_file", lambda folder, name, input_name: name)
    assert QuadrupleCLIPLoader.execute("a", "b", "c", "d", "cpu")[0] == "CLIP"
    assert QuadrupleCLIPLoader.execute("a", "b", "c", "d")[0] == "CLIP"
    assert calls == [("hidream", "cpu"), ("hidream", "default")]


def test_wan22_fun_control_takes_todays_start_image_positionally(session):
    from comfy_extras.nodes_wan import Wan22FunControlToVideo
    from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames

    vae = FakeVideoVAE(channels=48, downscale=16)
    start = frames(1, 32, 64, seed=5)
    # today's order: (positive, negative, vae, width, height, length, batch_size, ref_image=, start_image=,
    # control_video=) -- the 9th positional argument is the start image
    pos = Wan22FunControlToVideo.execute(cond(), cond(), vae, 64, 32, 5, 1, None, start)[0]
    mask = pos[0][1]["concat_mask"]
    assert not mask[:, :, 0].any() and mask[:, :, 1].all()  # latent frame 0's four slots known, frame 1 not
    assert torch.allclose(pos[0][1]["concat_latent_image"][:, 48:, :1], vae.latent_of(start))
