"""Qwen-Image ControlNets (comfy_core/controlnet/qwen_image_controlnet.py, load_qwen_image.py):
files detected from names and shapes, InstantX's network against diffusers'
`QwenImageControlNetModel`, VideoX-Fun's against a reference written from diffusers' blocks,
ComfyUI's residual spacing, and the CONTROL_NET objects (latent hint, mask, base model, strength)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.controlnet.load import load_controlnet
from comfy_core.controlnet.load_qwen_image import QwenFunControlNet
from comfy_core.controlnet.qwen_image_controlnet import (QwenImageControlNetError, QwenImageControlNetModel,
                                                         QwenImageFunControlNetModel, fun_hint_tokens)
from comfy_core.controlnet.runner import ControlNetRunError
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.qwen_image_controlnet_files import tiny_fun_state_dict, tiny_instantx_state_dict
from tests.fixtures.qwen_image_files import TXT_WIDTH, diffusers_qwen_image_kwargs, write_qwen_image_unet


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _pack(x: torch.Tensor) -> torch.Tensor:
    """[B, C, H, W] -> diffusers' packed tokens [B, H/2*W/2, 4C]."""
    b, c, h, w = x.shape
    return x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w // 4, c * 4)


def _inputs(size=(8, 12), channels=16, seed=3, batch=2, tokens=7):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 16, *size, generator=gen), torch.tensor([0.7, 0.2][:batch]),
            torch.randn(batch, tokens, TXT_WIDTH, generator=gen), torch.randn(batch, channels, *size, generator=gen))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen_controlnets")
    return {"union": save(tiny_instantx_state_dict(seed=1), root / "Qwen-Image-InstantX-ControlNet-Union.safetensors"),
            "inpaint": save(tiny_instantx_state_dict(seed=2, inpaint=True),
                            root / "Qwen-Image-InstantX-ControlNet-Inpainting.safetensors"),
            "fun": save(tiny_fun_state_dict(seed=3), root / "Qwen-Image-2512-Fun-Controlnet-Union.safetensors"),
            "unet": write_qwen_image_unet(root, seed=4)}


# --- detection ---------------------------------------------------------------------------------------------

def test_the_files_are_told_apart_from_names_and_shapes(files):
    union, inpaint, fun = (load_controlnet(files[k]) for k in ("union", "inpaint", "fun"))
    assert type(union.control_model) is QwenImageControlNetModel and not union.concat_mask
    assert len(union.control_model.transformer_blocks) == 2 and not hasattr(union.control_model, "proj_out")
    assert inpaint.concat_mask and inpaint.control_model.controlnet_x_embedder.in_features == 68
    assert isinstance(fun, QwenFunControlNet) and not fun.concat_mask
    assert isinstance(fun.control_model, QwenImageFunControlNetModel) and len(fun.control_model.control_blocks) == 5
    for control in (union, inpaint, fun):  # a latent hint in the Wan 2.1 VAE's space, latent-sized
        assert control.compression_ratio == 1 and control.latent_format.latent_channels == 16
        assert control.extra_conds == []


def test_a_file_that_does_not_fit_its_structure_is_refused_naming_the_key(tmp_path):
    state = tiny_instantx_state_dict()
    state["controlnet_blocks.1.weight"] = torch.zeros(64, 32)
    with pytest.raises(ShapeMismatchError, match="controlnet_blocks.1.weight"):
        load_controlnet(save(state, tmp_path / "bad.safetensors"))
    state = tiny_fun_state_dict(blocks=2)
    del state["control_blocks.0.before_proj.weight"]
    with pytest.raises(ShapeMismatchError, match="before_proj"):
        load_controlnet(save(state, tmp_path / "bad_fun.safetensors"))
    with pytest.raises(ShapeMismatchError, match="at most 5"):
        load_controlnet(save(tiny_fun_state_dict(blocks=6), tmp_path / "six.safetensors"))


# --- InstantX against diffusers ----------------------------------------------------------------------------

def _diffusers_instantx(state, inpaint=False):
    pytest.importorskip("diffusers")
    from diffusers import QwenImageControlNetModel as Reference

    kwargs = diffusers_qwen_image_kwargs()
    kwargs.pop("zero_cond_t")
    model = Reference(**kwargs, extra_condition_channels=4 if inpaint else 0)
    model.load_state_dict(state, strict=True)  # the released names are diffusers' names
    return model.eval()


@pytest.mark.parametrize("inpaint", [False, True])
def test_instantx_residuals_match_diffusers(files, inpaint):
    state = tiny_instantx_state_dict(seed=2 if inpaint else 1, inpaint=inpaint)
    reference = _diffusers_instantx(state, inpaint)
    network = load_controlnet(files["inpaint" if inpaint else "union"]).control_model
    x, sigma, context, hint = _inputs(channels=17 if inpaint else 16)
    with torch.no_grad():
        ours = network(x=x, timesteps=sigma, context=context, hint=hint)["input"]
        ours5 = network(x=x.unsqueeze(2), timesteps=sigma, context=context, hint=hint.unsqueeze(2))["input"]
        theirs = reference(hidden_states=_pack(x), controlnet_cond=_pack(hint), encoder_hidden_states=context,
                           timestep=sigma, img_shapes=[[(1, 4, 6)]] * 2, return_dict=False)
    assert len(ours) == 60 and len(theirs) == 2
    for i, residual in enumerate(ours):  # 2 blocks over ComfyUI's 60: 30 main blocks each
        assert residual is ours[30 * (i // 30)]
    assert (ours[0] - theirs[0]).abs().max() < 1e-4 and (ours[30] - theirs[1]).abs().max() < 1e-4
    assert ours[0].abs().max() > 1e-2 and torch.equal(ours5[30], ours[30])


def test_instantx_text_mask_matches_diffusers(files):
    state = tiny_instantx_state_dict(seed=1)
    reference = _diffusers_instantx(state)
    network = load_controlnet(files["union"]).control_model
    x, sigma, context, hint = _inputs()
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        ours = network(x=x, timesteps=sigma, context=context, hint=hint, attention_mask=mask)["input"]
        unmasked = network(x=x, timesteps=sigma, context=context, hint=hint)["input"]
        theirs = reference(hidden_states=_pack(x), controlnet_cond=_pack(hint), encoder_hidden_states=context,
                           encoder_hidden_states_mask=mask, timestep=sigma, img_shapes=[[(1, 4, 6)]] * 2,
                           return_dict=False)
    assert (ours[30] - theirs[1]).abs().max() < 1e-4
    assert (ours[30][0] - unmasked[30][0]).abs().max() > 1e-4


def test_instantx_residuals_reach_the_qwen_image_network(files):
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(files["unet"]).model.diffusion_model
    network = load_controlnet(files["union"]).control_model
    x, sigma, context, hint = _inputs()
    with torch.no_grad():
        control = network(x=x, timesteps=sigma, context=context, hint=hint)
        plain = model(x, sigma, context)
        controlled = model(x, sigma, context, control=control)
    assert (controlled - plain).abs().max() > 1e-3
    with pytest.raises(QwenImageControlNetError, match="hint"):
        network(x=x, timesteps=sigma, context=context, hint=hint[:, :, :4])


# --- VideoX-Fun ----------------------------------------------------------------------------------------------

def _fun_reference(state, base_state, x, sigma, context, hint):
    """The Fun side stream written with diffusers' Qwen-Image pieces (see the module docstring
    of comfy_core/controlnet/qwen_image_controlnet.py)."""
    pytest.importorskip("diffusers")
    from diffusers import QwenImageTransformer2DModel
    from diffusers.models.transformers.transformer_qwenimage import QwenImageTransformerBlock

    base = QwenImageTransformer2DModel(**diffusers_qwen_image_kwargs())
    base.load_state_dict(base_state, strict=True)
    b, _, h, w = x.shape
    img = base.img_in(_pack(x))
    temb = base.time_text_embed(sigma, img)
    rope = base.pos_embed([[(1, h // 2, w // 2)]] * b, max_txt_seq_len=context.shape[1], device=x.device)
    txt = base.txt_in(base.txt_norm(context))
    full = torch.cat([hint, torch.zeros_like(hint[:, :1]), torch.zeros_like(hint)], dim=1)  # 33 channels
    c = torch.nn.functional.linear(_pack(full), state["control_img_in.weight"], state["control_img_in.bias"])
    skips = []
    for i in range(5):
        prefix = f"control_blocks.{i}."
        block = QwenImageTransformerBlock(dim=64, num_attention_heads=2, attention_head_dim=32)
        block.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)
                               and not k[len(prefix):].startswith(("before_proj.", "after_proj."))}, strict=True)
        if i == 0:
            c = torch.nn.functional.linear(c, state[prefix + "before_proj.weight"], state[prefix + "before_proj.bias"])
            c = c + img
        txt, c = block(hidden_states=c, encoder_hidden_states=txt, encoder_hidden_states_mask=None, temb=temb,
                       image_rotary_emb=rope)
        after = (state[prefix + "after_proj.weight"], state[prefix + "after_proj.bias"])
        skips.append(torch.nn.functional.linear(c, *after))
    return skips


def test_fun_residuals_match_a_reference_from_diffusers_blocks(files):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.qwen_image_files import tiny_qwen_image_state_dict

    base = load_diffusion_model(files["unet"]).model.diffusion_model
    network = load_controlnet(files["fun"]).control_model
    x, sigma, context, hint = _inputs()
    with torch.no_grad():
        ours = network(x=x, timesteps=sigma, context=context, hint=hint, base_model=base)["input"]
        theirs = _fun_reference(tiny_fun_state_dict(seed=3), tiny_qwen_image_state_dict(seed=4), x, sigma, context,
                                hint)
    assert len(ours) == 60
    assert [i for i, r in enumerate(ours) if r is not None] == [0, 12, 24, 36, 48]
    for k in range(5):
        assert (ours[12 * k] - theirs[k]).abs().max() < 1e-4
    with pytest.raises(QwenImageControlNetError, match="base_model"):
        network(x=x, timesteps=sigma, context=context, hint=hint)


def test_fun_hint_tokens_fill_the_mask_and_inpaint_channels_with_zeros():
    hint = torch.randn(1, 16, 3, 5)  # odd sizes: zero-padded to 4 x 6
    tokens = fun_hint_tokens(hint, 132)
    assert tokens.shape == (1, 6, 132)
    assert torch.equal(tokens[..., 64:], torch.zeros(1, 6, 68))
    assert torch.equal(tokens[0, 0, :4], torch.tensor([hint[0, 0, 0, 0], hint[0, 0, 0, 1], hint[0, 0, 1, 0],
                                                       hint[0, 0, 1, 1]]))
    assert tokens[0, -1, 3] == 0  # the padded corner
    assert fun_hint_tokens(torch.randn(1, 16, 4, 4), 100).shape == (1, 4, 100)  # cut to the file's width
    assert torch.equal(fun_hint_tokens(torch.ones(1, 8, 2, 2), 40)[..., 32:], torch.zeros(1, 1, 8))  # zero-filled


# --- the CONTROL_NET objects ---------------------------------------------------------------------------------

class _Sampling:
    def timestep(self, sigma):
        return sigma

    def calculate_input(self, sigma, x):
        return x

    def percent_to_sigma(self, percent):
        return 1.0 - percent


class _Model:
    def __init__(self, diffusion_model):
        self.diffusion_model = diffusion_model
        self.model_sampling = _Sampling()


class _Vae:
    """Stands for the Wan 2.1 VAE: a fixed 8x downscale to 16 channels, 5-D as the real one."""

    def spacial_compression_encode(self):
        return 8

    def encode(self, pixels):  # [B, H, W, 3] -> [B, 16, 1, H/8, W/8]
        x = torch.nn.functional.avg_pool2d(pixels.movedim(-1, 1), 8)
        return x.repeat(1, 6, 1, 1)[:, :16].unsqueeze(2)


def test_the_fun_controlnet_gets_the_run_model_and_a_square_root_strength(files):
    from comfy_core.split.diffusion_model import load_diffusion_model

    base = load_diffusion_model(files["unet"]).model.diffusion_model
    image = torch.rand(1, 3, 64, 96)
    x, sigma, context, _ = _inputs(batch=1, size=(8, 12))
    x = x.unsqueeze(2)  # the 5-D one-frame latent Qwen-Image samples
    results = {}
    for strength in (1.0, 4.0):
        control = load_controlnet(files["fun"]).copy()
        assert isinstance(control, QwenFunControlNet)
        control.set_cond_hint(image, strength, (0.0, 1.0), vae=_Vae())
        with pytest.raises(ControlNetRunError, match="Qwen-Image model"):
            control.pre_run(_Model(torch.nn.Linear(2, 2)), _Sampling().percent_to_sigma)
        control.pre_run(_Model(base), _Sampling().percent_to_sigma)
        assert control.extra_args["base_model"] is base
        with torch.no_grad():
            out = control.get_control(x, sigma, {"c_crossattn": context}, 1, {})
        assert control.strength == strength
        control.cleanup()
        assert "base_model" not in control.extra_args
        results[strength] = out["input"]
    assert results[1.0][1] is None and results[1.0][0].shape == (1, 24, 64)
    assert torch.allclose(results[4.0][0], results[1.0][0] * math.sqrt(4.0), atol=1e-5)


def test_the_inpainting_controlnet_concatenates_the_mask_to_a_5d_hint_latent(files):
    control = load_controlnet(files["inpaint"]).copy()
    image = torch.rand(1, 3, 64, 96)
    mask = torch.zeros(1, 1, 64, 96)
    mask[..., :32, :] = 1.0
    control.set_cond_hint(image, 1.0, (0.0, 1.0), vae=_Vae(), extra_concat=[mask])
    control.pre_run(_Model(None), _Sampling().percent_to_sigma)
    x, sigma, context, _ = _inputs(batch=1, size=(8, 12))
    with torch.no_grad():
        out = control.get_control(x.unsqueeze(2), sigma, {"c_crossattn": context}, 1, {})
    assert control.cond_hint.shape == (1, 17, 1, 8, 12)
    assert torch.equal(control.cond_hint[0, 16, 0, :4], torch.ones(4, 12))
    assert torch.equal(control.cond_hint[0, 16, 0, 4:], torch.zeros(4, 12))
    assert len(out["input"]) == 60 and out["input"][0].shape == (1, 24, 64)


# --- the template fixtures' files ------------------------------------------------------------------------------

def test_the_template_fixtures_qwen_files_load_and_fit_the_template_dit(tmp_path):
    """tests/fixtures/template_models_qwen.py's writers: each file is read by its loader and fits
    the template fixtures' tiny Qwen-Image DiT (64 wide, 256-wide text) or Z-Image."""
    from comfy_core.loading import load_vae
    from comfy_core.model_patches.diffsynth import QwenImageBlockWiseControlNet
    from comfy_core.model_patches.patch_files import load_model_patch
    from comfy_core.model_patches.zimage_fun import ZImageFunControlNet
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_qwen import WRITERS_QWEN, file_kind_qwen

    def write(folder, name):
        kind = file_kind_qwen(folder, name)
        path = tmp_path / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        WRITERS_QWEN[kind](path)
        return kind, path

    kind, path = write("controlnet", "Qwen-Image-InstantX-ControlNet-Inpainting.safetensors")
    inpaint = load_controlnet(path)
    assert kind == "controlnet_qwen_image" and inpaint.concat_mask
    assert inpaint.control_model.txt_in.in_features == 256 and inpaint.control_model.inner_dim == 64
    kind, path = write("controlnet", "Qwen-Image-2512-Fun-Controlnet-Union-2602.safetensors")
    assert kind == "controlnet_qwen_image_fun" and isinstance(load_controlnet(path), QwenFunControlNet)
    kind, path = write("model_patches", "qwen_image_canny_diffsynth_controlnet.safetensors")
    assert kind == "diffsynth_qwen_image" and isinstance(load_model_patch(path).model, QwenImageBlockWiseControlNet)
    kind, path = write("model_patches", "Z-Image-Turbo-Fun-Controlnet-Union.safetensors")
    patch = load_model_patch(path).model
    assert kind == "zimage_fun_controlnet" and isinstance(patch, ZImageFunControlNet) and patch.n_control_layers == 6
    kind, path = write("diffusion_models", "qwen_image_layered_control_bf16.safetensors")
    model = load_diffusion_model(path).model.diffusion_model
    assert kind == "unet_qwen_image_layered" and model.config.use_additional_t_cond
    assert model.config.joint_attention_dim == 256
    kind, path = write("vae", "qwen_image_layered_vae.safetensors")
    vae = load_vae(path)
    with torch.no_grad():
        latent = vae.encode(torch.rand(1, 16, 16, 4))  # RGBA in, the DiT's 16 channels out
    assert kind == "vae_qwen_image_layered" and latent.shape[1] == 16
    assert file_kind_qwen("controlnet", "control_v11p_sd15_canny.pth") is None
