"""DiffSynth's Qwen-Image block-wise ControlNet: the file read by ModelPatchLoader's loader from
its names and shapes, the patch's residual against the maths written out here (ComfyUI's
`QwenImageBlockWiseControlNet` / `DiffSynthCnetPatch`: Wan 2.1 normalisation with diffusers'
published mean / std, 2x2 patches, RMS norms, exact GELU), its wiring through
QwenImageDiffsynthControlnet into every block of a Qwen-Image MODEL loaded by UNETLoader's path,
the Inpaint release's mask channel, re-encoding at the latent's size, node errors and a 2-step
sample."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from comfy_core.model_patches.diffsynth import DiffSynthControlNetConfig, QwenImageBlockWiseControlNet
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.patch_files import load_model_patch
from nodes.diffsynth_controlnet import qwen_image_diffsynth_controlnet
from nodes.errors import NodeInputError
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.model_patch_files import diffsynth_controlnet_state_dict, write_patch_file
from tests.fixtures.qwen_image_files import TXT_WIDTH, write_qwen_image_unet
from tests.fixtures.wan_vae_files import original_state_dict

# Wan 2.1's latent statistics as diffusers publishes them (AutoencoderKLQwenImage's defaults).
_DEFAULTS = inspect.signature(pytest.importorskip("diffusers").AutoencoderKLQwenImage.__init__).parameters
MEAN = torch.tensor(_DEFAULTS["latents_mean"].default).view(1, 16, 1, 1, 1)
STD = torch.tensor(_DEFAULTS["latents_std"].default).view(1, 16, 1, 1, 1)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from comfy_core.loading import load_vae
    from comfy_core.split.diffusion_model import load_diffusion_model

    root = tmp_path_factory.mktemp("diffsynth")
    model = load_diffusion_model(write_qwen_image_unet(root, seed=1))
    vae = load_vae(save(original_state_dict("2.1", 3, latent_channels=16), root / "vae" / "qwen_image_vae.safetensors"))
    canny = load_model_patch(write_patch_file(root / "model_patches" / "canny.safetensors",
                                              diffsynth_controlnet_state_dict(seed=5)))
    inpaint = load_model_patch(write_patch_file(root / "model_patches" / "inpaint.safetensors",
                                                diffsynth_controlnet_state_dict(seed=6, inpaint=True)))
    return model, vae, canny, inpaint, root


def _rms(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def _reference_residual(state: dict, latent: torch.Tensor, img: torch.Tensor, block: int) -> torch.Tensor:
    """ComfyUI's maths step by step: latent [B, 16 (+1 mask), 1, h, w] as the VAE gives it."""
    z = torch.cat([(latent[:, :16] - MEAN) / STD, latent[:, 16:]], dim=1)[:, :, 0]  # [B, C, h, w]
    b, c, h, w = z.shape
    tokens = z.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w // 4, c * 4)
    y = tokens @ state["img_in.weight"].T + state["img_in.bias"]
    p = f"controlnet_blocks.{block}."
    mixed = _rms(img, state[p + "x_rms.weight"]) + _rms(y, state[p + "y_rms.weight"])
    hidden = F.gelu(mixed @ state[p + "input_proj.weight"].T + state[p + "input_proj.bias"])
    return hidden @ state[p + "output_proj.weight"].T + state[p + "output_proj.bias"]


def test_the_file_is_read_from_names_and_shapes(files, tmp_path):
    _, _, canny, inpaint, _ = files
    assert isinstance(canny.model, QwenImageBlockWiseControlNet)
    assert canny.model.config == DiffSynthControlNetConfig(num_layers=2, dim=64, additional_in_dim=0)
    assert inpaint.model.config.additional_in_dim == 4 and inpaint.model.config.mask_channels == 1
    state = diffsynth_controlnet_state_dict()
    state["controlnet_blocks.1.input_proj.weight"] = torch.zeros(64, 32)
    with pytest.raises(ModelPatchError, match="controlnet_blocks.1.input_proj.weight has shape"):
        load_model_patch(write_patch_file(tmp_path / "bad.safetensors", state))
    state = diffsynth_controlnet_state_dict()
    state["img_in.weight"] = torch.zeros(64, 66)
    with pytest.raises(ModelPatchError, match="takes 66 channels"):
        load_model_patch(write_patch_file(tmp_path / "odd.safetensors", state))
    state = diffsynth_controlnet_state_dict()
    del state["controlnet_blocks.0.x_rms.weight"]
    with pytest.raises(ModelPatchError, match="x_rms.weight' is missing"):
        load_model_patch(write_patch_file(tmp_path / "short.safetensors", state))


def _image(size=(32, 48), seed=0) -> torch.Tensor:
    return torch.rand(1, *size, 3, generator=torch.Generator().manual_seed(seed))


def test_the_residual_is_comfyuis_maths(files):
    model, vae, canny, _, _ = files
    (patched,) = qwen_image_diffsynth_controlnet(model, canny, vae, _image(), 0.7)
    (patch,) = patched.model_options["transformer_options"]["patches"]["double_block"]
    x = torch.zeros(2, 16, 1, 4, 6)  # the latent of the image's size: no resize
    gen = torch.Generator().manual_seed(1)
    img, txt = torch.randn(2, 6 + 3, 64, generator=gen), torch.randn(2, 5, 64, generator=gen)  # 3 reference tokens
    with torch.no_grad():
        out = patch({"x": x, "img": img, "txt": txt, "block_index": 1, "transformer_options": {}})
        latent = vae.encode(_image())
    state = diffsynth_controlnet_state_dict(seed=5)
    expected = img[:, :6] + 0.7 * _reference_residual(state, latent, img[:, :6], 1)
    assert (out["img"][:, :6] - expected).abs().max() < 1e-5
    assert torch.equal(out["img"][:, 6:], img[:, 6:]) and out["txt"] is txt


def test_every_block_of_the_qwen_image_network_gets_its_residual(files):
    model, vae, canny, _, _ = files
    gen = torch.Generator().manual_seed(2)
    x, sigma = torch.randn(1, 16, 1, 4, 6, generator=gen), torch.tensor([0.6])
    context = torch.randn(1, 5, TXT_WIDTH, generator=gen)
    with torch.no_grad():
        latent = vae.encode(_image())
    state = diffsynth_controlnet_state_dict(seed=5)

    def reference(args):  # the residual written out, as a plain double_block patch
        img = args["img"]
        return {"img": img + 1.5 * _reference_residual(state, latent, img, args["block_index"]), "txt": args["txt"]}

    def run(patcher, extra=None):
        options = dict(patcher.model_options["transformer_options"])
        if extra is not None:
            options["patches"] = {"double_block": [extra]}
        with torch.no_grad(), patcher.applied() as dm:
            return dm.diffusion_model(x, sigma, context, transformer_options=options)

    (patched,) = qwen_image_diffsynth_controlnet(model, canny, vae, _image(), 1.5)
    (off,) = qwen_image_diffsynth_controlnet(model, canny, vae, _image(), 0.0)
    plain, ours = run(model), run(patched)
    assert (ours - run(model, reference)).abs().max() < 1e-4
    assert (ours - plain).abs().max() > 1e-3 and torch.allclose(run(off), plain, atol=1e-6)
    assert "patches" not in model.model_options["transformer_options"]  # the input MODEL is untouched


def test_inpaint_mask_channel_and_reencoding_at_the_latents_size(files):
    from comfy_core.image.resize import upscale_samples

    model, vae, _, inpaint, _ = files
    mask = torch.zeros(1, 32, 48)
    mask[:, :, 24:] = 1.0  # repaint the right half
    (patched,) = qwen_image_diffsynth_controlnet(model, inpaint, vae, _image(), 1.0, mask=mask)
    (patch,) = patched.model_options["transformer_options"]["patches"]["double_block"]
    with torch.no_grad():
        masked = patch.control_latent(32, 48)
        assert masked.shape == (1, 17, 1, 4, 6)
        assert torch.equal(masked[:, 16, 0, :, :3], torch.ones(1, 4, 3))  # kept: 1
        assert torch.equal(masked[:, 16, 0, :, 3:], torch.zeros(1, 4, 3))  # repainted: 0
        (unmasked,) = qwen_image_diffsynth_controlnet(model, inpaint, vae, _image(), 1.0)
        ones = unmasked.model_options["transformer_options"]["patches"]["double_block"][0].control_latent(32, 48)
        assert torch.equal(ones[:, 16], torch.ones(1, 1, 4, 6))
        # a latent of another size: the image resized (area, centred crop) and encoded again
        resized = patch.control_latent(16, 16)
        square = upscale_samples(_image().movedim(-1, 1), 16, 16, "area", "center").movedim(1, -1)
        assert resized.shape == (1, 17, 1, 2, 2)
        assert torch.allclose(resized[:, :16], vae.encode(square), atol=1e-6)


def test_node_errors(files, tmp_path):
    from tests.fixtures.model_patch_files import uso_projector_state_dict

    model, vae, canny, _, root = files
    uso = load_model_patch(write_patch_file(tmp_path / "uso.safetensors", uso_projector_state_dict()))
    with pytest.raises(NodeInputError, match="DiffSynth ControlNet MODEL_PATCH") as info:
        qwen_image_diffsynth_controlnet(model, uso, vae, _image(), 1.0)
    assert info.value.input_name == "model_patch"
    short = load_model_patch(write_patch_file(tmp_path / "one.safetensors", diffsynth_controlnet_state_dict(layers=1)))
    with pytest.raises(NodeInputError, match="at most 1 blocks") as info:
        qwen_image_diffsynth_controlnet(model, short, vae, _image(), 1.0)
    assert info.value.input_name == "model"
    with pytest.raises(NodeInputError, match="strength"):
        qwen_image_diffsynth_controlnet(model, canny, vae, _image(), 11.0)
    with pytest.raises(NodeInputError, match="image"):
        qwen_image_diffsynth_controlnet(model, canny, vae, torch.zeros(32, 48, 3), 1.0)


def test_a_patched_model_samples_two_steps(files):
    from comfy_core.sampling.ksampler import sample

    model, vae, canny, _, _ = files
    (patched,) = qwen_image_diffsynth_controlnet(model, canny, vae, _image(), 1.0)
    gen = torch.Generator().manual_seed(4)
    positive = [[torch.randn(1, 5, TXT_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 3, TXT_WIDTH, generator=gen), {}]]
    noise = torch.randn(1, 16, 1, 4, 6, generator=gen)
    empty = torch.zeros(1, 16, 1, 4, 6)
    out = sample(patched, noise, 2, 2.0, "euler", "simple", positive, negative, empty)
    plain = sample(model, noise, 2, 2.0, "euler", "simple", positive, negative, empty)
    assert torch.isfinite(out).all() and (out - plain).abs().max() > 1e-4
