"""VAEDecodeTiled, VAEEncodeTiled and VAEEncodeForInpaint: ComfyUI's sockets, shapes and
semantics, typed errors, and a workflow through the executor on the tiny SD1 checkpoint."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch

from comfy_core.loading import load_checkpoint
from graph.executor import Executor
from graph.native import Input, Int, Output, node, spec_of
from graph.object_info import node_info
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import builtin_node_functions, register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.latent import vae_decode, vae_encode
from nodes.vae_ops import vae_decode_tiled, vae_encode_for_inpaint, vae_encode_tiled


@pytest.fixture(scope="module")
def vae(tiny_sd1_ckpt):
    return load_checkpoint(tiny_sd1_ckpt, output_clip=False)[2]


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# --- sockets ----------------------------------------------------------------------------------------

def _int(default, lo, hi, step, tooltip=None):
    opts = {"default": default, "min": lo, "max": hi, "step": step}
    return ["INT", {**opts, "tooltip": tooltip} if tooltip else opts]


TEMPORAL_OVERLAP = _int(8, 4, 4096, 4, "Only used for video VAEs: Amount of frames to overlap.")
# ComfyUI's INPUT_TYPES / RETURN_TYPES / CATEGORY / display names at the reference snapshot.
COMFYUI = {
    "VAEDecodeTiled": (vae_decode_tiled, "VAE Decode (Tiled)", "_for_testing", ["IMAGE"], {
        "samples": ["LATENT"], "vae": ["VAE"],
        "tile_size": _int(512, 64, 4096, 32), "overlap": _int(64, 0, 4096, 32),
        "temporal_size": _int(64, 8, 4096, 4, "Only used for video VAEs: Amount of frames to decode at a time."),
        "temporal_overlap": TEMPORAL_OVERLAP}),
    "VAEEncodeTiled": (vae_encode_tiled, "VAE Encode (Tiled)", "_for_testing", ["LATENT"], {
        "pixels": ["IMAGE"], "vae": ["VAE"],
        "tile_size": _int(512, 64, 4096, 64), "overlap": _int(64, 0, 4096, 32),
        "temporal_size": _int(64, 8, 4096, 4, "Only used for video VAEs: Amount of frames to encode at a time."),
        "temporal_overlap": TEMPORAL_OVERLAP}),
    "VAEEncodeForInpaint": (vae_encode_for_inpaint, "VAE Encode (for Inpainting)", "latent/inpaint", ["LATENT"], {
        "pixels": ["IMAGE"], "vae": ["VAE"], "mask": ["MASK"], "grow_mask_by": _int(6, 0, 64, 1)}),
}


@pytest.mark.parametrize("name", sorted(COMFYUI))
def test_sockets_equal_comfyuis(name):
    fn, display, category, outputs, required = COMFYUI[name]
    info = node_info(spec_of(fn))
    assert info["name"] == name and info["display_name"] == display and info["category"] == category
    assert info["input"] == {"required": required}
    assert info["input_order"] == {"required": list(required)}
    assert info["output"] == outputs and info["output_node"] is False


def test_the_nodes_are_builtins():
    assert set(COMFYUI) <= {spec_of(fn).node_id for fn in builtin_node_functions()}


# --- VAEDecodeTiled ---------------------------------------------------------------------------------

def test_decode_tiled_with_one_tile_equals_vae_decode(vae):
    latent = {"samples": torch.randn(1, 4, 13, 9, generator=torch.Generator().manual_seed(1))}
    (tiled,) = vae_decode_tiled(latent, vae, tile_size=512, overlap=64)
    assert tiled.shape == (1, 104, 72, 3)
    assert torch.equal(tiled, vae_decode(latent, vae)[0])


def test_decode_tiled_blends_tiles_and_ignores_the_temporal_inputs(vae):
    latent = {"samples": torch.randn(1, 4, 40, 48, generator=torch.Generator().manual_seed(0))}
    (plain,) = vae_decode(latent, vae)
    (tiled,) = vae_decode_tiled(latent, vae, tile_size=256, overlap=64)
    # Latent tiles of 32 with an overlap of 8; the tolerance is measured in
    # tests/comfy_core/test_vae_tiling.py (mean |difference| 0.016-0.018 over five seeds).
    assert not torch.equal(tiled, plain) and (tiled - plain).abs().mean() < 0.03
    (again,) = vae_decode_tiled(latent, vae, 256, 64, temporal_size=8, temporal_overlap=4)
    assert torch.equal(again, tiled)


def test_decode_tiled_caps_the_overlap_at_a_quarter_of_the_tile(vae):
    latent = {"samples": torch.randn(1, 4, 20, 12, generator=torch.Generator().manual_seed(2))}
    (capped,) = vae_decode_tiled(latent, vae, tile_size=64, overlap=64)  # ComfyUI: overlap -> 16
    assert torch.equal(capped, vae_decode_tiled(latent, vae, tile_size=64, overlap=16)[0])
    assert not torch.equal(capped, vae_decode_tiled(latent, vae, tile_size=64, overlap=0)[0])


@pytest.mark.parametrize("bad", [None, {"samples": 1}, {"samples": torch.zeros(4, 8, 8)}])
def test_decode_tiled_rejects_what_is_not_a_latent(vae, bad):
    with pytest.raises(NodeInputError, match="input 'samples'"):
        vae_decode_tiled(bad, vae)


@pytest.mark.parametrize("tile_size, overlap, input_name", [(8, 0, "tile_size"), (512, -8, "overlap")])
def test_decode_tiled_names_sizes_below_the_minimum(vae, tile_size, overlap, input_name):
    latent = {"samples": torch.zeros(1, 4, 16, 16)}
    with pytest.raises(NodeInputError, match=f"input '{input_name}'"):
        vae_decode_tiled(latent, vae, tile_size=tile_size, overlap=overlap)


# --- VAEEncodeTiled ---------------------------------------------------------------------------------

def test_encode_tiled_with_one_tile_equals_vae_encode(vae):
    pixels = _rand(1, 101, 77, 4, seed=3)  # cropped to 96 x 72, alpha dropped
    (tiled,) = vae_encode_tiled(pixels, vae, tile_size=512, overlap=64)
    assert tiled["samples"].shape == (1, 4, 12, 9)
    assert torch.equal(tiled["samples"], vae_encode(pixels, vae)[0]["samples"])


def test_encode_tiled_blends_tiles(vae):
    pixels = vae_decode({"samples": torch.randn(1, 4, 40, 48, generator=torch.Generator().manual_seed(0))}, vae)[0]
    (plain,) = vae_encode(pixels, vae)
    (tiled,) = vae_encode_tiled(pixels, vae, tile_size=256, overlap=64, temporal_size=16, temporal_overlap=4)
    difference = (tiled["samples"] - plain["samples"]).abs().mean()
    assert 0 < difference < 0.06  # measured 0.029-0.034 (tests/comfy_core/test_vae_tiling.py)


def test_encode_tiled_names_an_overlap_that_leaves_no_step(vae):
    # The half-size tiling (32 px) cannot step with a 32 px overlap; ComfyUI fails or gives NaN.
    with pytest.raises(NodeInputError, match="input 'overlap'"):
        vae_encode_tiled(_rand(1, 96, 96, 3), vae, tile_size=64, overlap=32)
    with pytest.raises(NodeInputError, match="input 'overlap'"):
        vae_encode_tiled(_rand(1, 96, 96, 3), vae, tile_size=512, overlap=-32)


@pytest.mark.parametrize("bad", [None, torch.zeros(8, 8, 3), torch.zeros(1, 8, 8, 2), torch.zeros(1, 7, 16, 3)])
def test_encode_tiled_rejects_what_is_not_an_image(vae, bad):
    with pytest.raises(NodeInputError, match="input 'pixels'"):
        vae_encode_tiled(bad, vae)


# --- VAEEncodeForInpaint ----------------------------------------------------------------------------

class RecordingVae:
    """Stands in for a VAE: keeps the pixels it is asked to encode."""

    first_stage_model = SimpleNamespace(downscale_ratio=8)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.pixels = pixels
        return torch.zeros(pixels.shape[0], 4, pixels.shape[1] // 8, pixels.shape[2] // 8)


def test_inpaint_greys_the_masked_pixels_of_the_centred_crop():
    pixels = _rand(2, 101, 77, 4, seed=4)
    mask = torch.zeros(1, 101, 77)
    mask[0, 40:60, 30:50] = 1.0
    recorder = RecordingVae()
    (latent,) = vae_encode_for_inpaint(pixels, recorder, mask, grow_mask_by=0)
    expected = pixels[:, 2:98, 2:74, :3].clone()  # offsets (101 % 8) // 2 and (77 % 8) // 2
    expected[:, 38:58, 28:48] = 0.5
    assert torch.allclose(recorder.pixels, expected, atol=1e-6)
    assert latent["samples"].shape == (2, 4, 12, 9)
    assert torch.equal(latent["noise_mask"], mask[:, None, 2:98, 2:74])


@pytest.mark.parametrize("grow, first, last", [(6, 8, 13), (3, 9, 11), (1, 10, 10), (0, 10, 10)])
def test_inpaint_grows_the_mask_with_a_box_kernel(grow, first, last):
    # A single masked pixel at (10, 10): a box of `grow` around it, padded by ceil((grow - 1) / 2),
    # so an even size reaches one pixel further down and right than up and left.
    mask = torch.zeros(1, 24, 24)
    mask[0, 10, 10] = 1.0
    (latent,) = vae_encode_for_inpaint(_rand(1, 24, 24, 3), RecordingVae(), mask, grow_mask_by=grow)
    expected = torch.zeros(1, 1, 24, 24)
    expected[..., first:last + 1, first:last + 1] = 1.0
    assert torch.equal(latent["noise_mask"], expected)


def test_inpaint_resizes_the_mask_to_the_image_bilinearly():
    mask = torch.zeros(16, 16)
    mask[:, 8:] = 1.0  # a 2D mask: the right half, at half the resolution
    recorder = RecordingVae()
    (latent,) = vae_encode_for_inpaint(torch.ones(1, 32, 32, 3), recorder, mask, grow_mask_by=0)
    assert latent["noise_mask"].shape == (1, 1, 32, 32)
    assert latent["noise_mask"][0, 0, 0].tolist() == [0.0] * 16 + [1.0] * 16
    assert recorder.pixels[0, 0, [0, 15, 16, 31], 0].tolist() == [1.0, 1.0, 0.5, 0.5]


def test_inpaint_latent_is_the_encoding_of_the_greyed_image(vae):
    pixels = _rand(1, 64, 64, 3, seed=5)
    mask = torch.zeros(1, 64, 64)
    mask[:, 16:48, 16:48] = 1.0
    (latent,) = vae_encode_for_inpaint(pixels, vae, mask, grow_mask_by=6)
    greyed = pixels.clone()
    greyed[:, 16:48, 16:48] = 0.5
    torch.testing.assert_close(latent["samples"], vae.encode(greyed), rtol=1e-5, atol=1e-5)
    assert latent["noise_mask"].sum() == 37 * 37  # 32 grown by 2 up/left and 3 down/right


@pytest.mark.parametrize("pixels, mask, grow, input_name", [
    (torch.zeros(1, 16, 16, 3), torch.zeros(16), 6, "mask"),  # 1D is not a MASK
    (torch.zeros(1, 16, 16, 3), "mask", 6, "mask"),
    (torch.zeros(2, 16, 16, 3), torch.zeros(3, 16, 16), 6, "mask"),  # one mask per image, or one
    (torch.zeros(1, 16, 16, 3), torch.zeros(2, 16, 16), 6, "mask"),
    (torch.zeros(1, 4, 16, 3), torch.zeros(1, 16, 16), 6, "pixels"),  # smaller than 8
    (torch.zeros(1, 16, 16, 3), torch.zeros(1, 16, 16), -1, "grow_mask_by"),
])
def test_inpaint_rejects_bad_input(pixels, mask, grow, input_name):
    with pytest.raises(NodeInputError, match=f"input '{input_name}'"):
        vae_encode_for_inpaint(pixels, RecordingVae(), mask, grow_mask_by=grow)


# --- a workflow through the executor ----------------------------------------------------------------

CAPTURED: dict[str, object] = {}


@node("TestSquareMask", inputs=[Int("size", default=64)], outputs=[Output("MASK")])
def square_mask(size):
    mask = torch.zeros(1, size, size)
    mask[:, size // 4: 3 * size // 4, size // 4: 3 * size // 4] = 1.0
    return (mask,)


@node("TestCaptureVaeOps", inputs=[Input("image", "IMAGE"), Input("latent", "LATENT"),
                                   Input("inpaint", "LATENT"), Input("sampled", "LATENT")], output_node=True)
def capture(image, latent, inpaint, sampled):
    CAPTURED.update(image=image, latent=latent, inpaint=inpaint, sampled=sampled)
    return {"ui": {}}


async def test_tiled_and_inpaint_nodes_run_in_a_workflow(tmp_path, tiny_sd1_ckpt):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(square_mask)
    registry.add_native(capture)
    tiles = {"tile_size": 64, "overlap": 16, "temporal_size": 64, "temporal_overlap": 8}
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 128, "height": 96, "batch_size": 1}},
        "3": {"class_type": "VAEDecodeTiled", "inputs": {"samples": ["2", 0], "vae": ["1", 2], **tiles}},
        "4": {"class_type": "VAEEncodeTiled", "inputs": {"pixels": ["3", 0], "vae": ["1", 2], **tiles}},
        "5": {"class_type": "TestSquareMask", "inputs": {"size": 48}},
        "6": {"class_type": "VAEEncodeForInpaint", "inputs": {"pixels": ["3", 0], "vae": ["1", 2], "mask": ["5", 0],
                                                             "grow_mask_by": 6}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "a door", "clip": ["1", 1]}},
        "8": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 3, "steps": 2, "cfg": 4.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["7", 0], "negative": ["7", 0],
                                                   "latent_image": ["6", 0], "denoise": 1.0}},
        "9": {"class_type": "TestCaptureVaeOps", "inputs": {"image": ["3", 0], "latent": ["4", 0],
                                                            "inpaint": ["6", 0], "sampled": ["8", 0]}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    out = await Executor(registry, env=env).execute(prompt, "p1", outputs=checked.outputs)
    assert out.status == "success", out.error
    assert CAPTURED["image"].shape == (1, 96, 128, 3)
    assert CAPTURED["latent"]["samples"].shape == (1, 4, 12, 16)
    inpaint = CAPTURED["inpaint"]
    assert inpaint["samples"].shape == (1, 4, 12, 16) and inpaint["noise_mask"].shape == (1, 1, 96, 128)
    # KSampler repaints only under the noise mask: the latent's two left columns, far from it,
    # come back as encoded (up to the latent format's scaling in and out of the sampler).
    sampled = CAPTURED["sampled"]["samples"]
    torch.testing.assert_close(sampled[..., :2], inpaint["samples"][..., :2], rtol=1e-5, atol=1e-5)
    assert not torch.equal(sampled, inpaint["samples"])
