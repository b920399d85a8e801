"""SD3.5 ControlNets in SAI's own format (ControlNetEmbedder) and the SD3 ControlNet loading path:
detection from headers, residuals against diffusers' single-block `SD3ControlNetModel` (the
diffusers conversion of these files) and against the network computed by hand from its weights,
the same residuals from a SAI file and its diffusers conversion, the embedder lent by the main
model for a run (and the shared module left as loaded), the hint pipeline (VAE, latent format,
canny/depth preprocessing) and strength 0 == no control bit-exactly."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.controlnet.dit_embedder import (SD35ControlNetConfig, SD35ControlNetConfigError,
                                                diffusers_single_block_names, is_diffusers_sd35_controlnet,
                                                is_sd35_controlnet, module_names)
from comfy_core.controlnet.load import load_controlnet
from comfy_core.controlnet.load_mmdit import mmdit_controlnet_layout
from comfy_core.controlnet.runner import ControlNet, ControlNetRunError
from comfy_core.controlnet.sd3_runner import ControlNetSD35, canny_hint, depth_hint
from comfy_core.models.diffusion import DiffusionModel
from comfy_core.families.sd3.latent_format import sd3_latent_format
from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig
from comfy_core.models.model_conditions import PooledConditions
from comfy_core.models.model_sampling import FlowModelSampling
from tests.fixtures.mmdit_files import tiny_mmdit_state_dict, write_tiny_sd3_controlnet
from tests.fixtures.sd35_controlnet_files import (sd35_controlnet_shapes, tiny_sd35_controlnet_state_dict,
                                                  to_diffusers, write_tiny_sd35_controlnet)

DEPTH, WIDTH = 2, 128  # the tiny main model and ControlNet: 2 x 64-wide heads


def header(shapes):
    return {k: SimpleNamespace(shape=v) for k, v in shapes.items()}


@pytest.fixture(scope="module")
def main_model():
    state = tiny_mmdit_state_dict("sd35", seed=4, prefix="", depth=DEPTH)
    with torch.device("meta"):
        mmdit = MMDiT.from_config(MMDiTConfig.detect_from_weights(state, prefix=""))
    mmdit.load_state_dict(state, strict=True, assign=True)
    return DiffusionModel(mmdit.eval().requires_grad_(False), FlowModelSampling(3.0), sd3_latent_format(),
                          adm=PooledConditions())


def _inputs(batch=2, size=8):
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(batch, 16, size, size, generator=gen), torch.tensor([800.0, 120.0][:batch]),
            torch.randn(batch, 64, generator=gen), torch.randn(batch, 16, size, size, generator=gen))


def _residuals(cn, main_model, x, t, y, hint):
    """The network's residuals with the main model's embedder lent, as a run has them."""
    cn.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
    try:
        with torch.no_grad(), cn.control_model_wrapped.applied("cpu") as network:
            return network(x=x, timesteps=t, y=y, context=None, hint=hint)["output"]
    finally:
        cn.cleanup()


def _sincos(width, h, w):
    """ComfyUI's `get_2d_sincos_pos_embed_torch` grid (centre 7.5, magnitude 7.5), in numpy."""
    small = min(h, w)
    gh, gw = np.meshgrid(np.linspace(7.5 - 7.5 * h / small, 7.5 + 7.5 * h / small, h),
                         np.linspace(7.5 - 7.5 * w / small, 7.5 + 7.5 * w / small, w), indexing="ij")

    def one(dim, pos):
        omega = 1.0 / 10000 ** (np.arange(dim // 2) / (dim / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    return torch.tensor(np.concatenate([one(width // 2, gw), one(width // 2, gh)], axis=1), dtype=torch.float32)


def _main_tokens(main_model, x):
    """Patch embedding of x with the main model's x_embedder weights, plus the sincos grid."""
    embed = main_model.diffusion_model.x_embedder.proj
    tokens = F.conv2d(x, embed.weight, embed.bias, stride=2).flatten(2).transpose(1, 2)
    return tokens + _sincos(WIDTH, x.shape[-2] // 2, x.shape[-1] // 2)


# --- detection ---

def test_layouts_are_told_apart_from_the_header(tmp_path):
    sai = read_safetensors_header(write_tiny_sd35_controlnet(tmp_path, "sai", blocks=2)).tensors
    conv = read_safetensors_header(write_tiny_sd35_controlnet(tmp_path, "diffusers", blocks=2)).tensors
    joint = read_safetensors_header(write_tiny_sd3_controlnet(tmp_path, "sd35", blocks=2, depth=4)).tensors
    assert [mmdit_controlnet_layout(t) for t in (sai, conv, joint)] == ["sd35", "diffusers_sd35", "diffusers"]
    assert is_sd35_controlnet(sai) and not is_sd35_controlnet(conv) and not is_diffusers_sd35_controlnet(joint)
    assert mmdit_controlnet_layout({"zero_convs.0.0.weight": None}) is None
    config = SD35ControlNetConfig.detect_from_weights({k: sai[v] for k, v in module_names(sai).items()})
    assert config == SD35ControlNetConfig(depth=DEPTH, num_layers=2, patch_size=2, in_channels=16, hint_channels=16,
                                          adm_in_channels=64, double_y_emb=False)
    assert config.borrowed == "x_embedder"
    fused = diffusers_single_block_names(conv)["transformer_blocks.1.attn.qkv.weight"]
    assert fused == tuple(f"transformer_blocks.1.attn.to_{q}.weight" for q in "qkv")
    assert load_controlnet(tmp_path / "tiny_sd35_controlnet_diffusers.safetensors").control_model.config == config


def test_double_y_embedding_variant_is_detected():
    shapes = sd35_controlnet_shapes(embedder_names="sai", double_y=True)
    config = SD35ControlNetConfig.detect_from_weights(header({k: shapes[v] for k, v in module_names(shapes).items()}))
    assert config.double_y_emb and config.borrowed == "orig_y_embedder" and config.adm_in_channels == 2048


@pytest.mark.parametrize("broken, message", [
    (lambda s: s.pop("controlnet_blocks.1.weight"), "controlnet_blocks.1.weight' is missing"),
    (lambda s: s.__setitem__("transformer_blocks.0.attn.qkv.weight", (3 * WIDTH, 64)), "attn.qkv.weight has shape"),
    (lambda s: s.__setitem__("y_embedder.mlp.0.weight", (100, 64)), "not a multiple of 64"),
])
def test_inconsistent_files_are_typed_errors(broken, message):
    shapes = sd35_controlnet_shapes(blocks=2, embedder_names="sai")
    broken(shapes)
    with pytest.raises(SD35ControlNetConfigError, match=message):
        SD35ControlNetConfig.detect_from_weights(header(shapes))
    assert issubclass(SD35ControlNetConfigError, ValueError)


def test_a_file_that_does_not_fit_is_a_shape_mismatch_naming_it(tmp_path):
    state = tiny_sd35_controlnet_state_dict(blocks=2)
    state["transformer_blocks.1.mlp.fc2.weight"] = torch.zeros(WIDTH, 3)
    from safetensors.torch import save_file
    save_file(state, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ShapeMismatchError, match="bad.safetensors"):
        load_controlnet(tmp_path / "bad.safetensors")


# --- numerics ---

@pytest.mark.parametrize("blocks", [1, 2])
def test_residuals_match_diffusers_single_block_controlnet(tmp_path, main_model, blocks):
    diffusers = pytest.importorskip("diffusers")
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=5, blocks=blocks))
    assert isinstance(cn, ControlNetSD35)
    x, t, y, hint = _inputs()
    out = _residuals(cn, main_model, x, t, y, hint)
    theirs = diffusers.SD3ControlNetModel(
        patch_size=2, in_channels=16, num_layers=blocks, attention_head_dim=64, num_attention_heads=DEPTH,
        joint_attention_dim=None, caption_projection_dim=WIDTH, pooled_projection_dim=64, out_channels=16,
        pos_embed_max_size=None, pos_embed_type=None, use_pos_embed=False,
        force_zeros_for_pooled_projection=False).eval()
    theirs.load_state_dict(to_diffusers(tiny_sd35_controlnet_state_dict(seed=5, blocks=blocks)), strict=True)
    with torch.no_grad():
        expected = theirs(hidden_states=_main_tokens(main_model, x), controlnet_cond=hint, pooled_projections=y,
                          timestep=t).controlnet_block_samples
    repeat = math.ceil(DEPTH / blocks)  # each block's residual serves `repeat` main-model blocks
    assert len(out) == repeat * blocks and all(out[i] is out[i - i % repeat] for i in range(len(out)))
    for i, residual in enumerate(expected):
        assert out[i * repeat].abs().max() > 0.05
        assert (out[i * repeat] - residual).abs().max() < 1e-5


def test_one_block_residual_computed_by_hand_from_the_weights(tmp_path, main_model):
    w = tiny_sd35_controlnet_state_dict(seed=6, embedder_names="sai")
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=6, embedder_names="sai"))
    x, t, y, hint = _inputs()
    out = _residuals(cn, main_model, x, t, y, hint)

    def lin(v, name):
        return F.linear(v, w[name + ".weight"], w[name + ".bias"])

    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    t_freq = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)  # cos first
    c = lin(F.silu(lin(t_freq, "t_embedder.mlp.0")), "t_embedder.mlp.2") \
        + lin(F.silu(lin(y, "y_embedder.mlp.0")), "y_embedder.mlp.2")  # [B, D]
    tokens = _main_tokens(main_model, x) + F.conv2d(hint, w["pos_embed_input.proj.weight"],
                                                    w["pos_embed_input.proj.bias"], stride=2).flatten(2).transpose(1, 2)
    b = "transformer_blocks.0."
    shift, scale, gate, shift2, scale2, gate2 = lin(F.silu(c), b + "adaLN_modulation.1")[:, None].chunk(6, dim=-1)
    h = F.layer_norm(tokens, (WIDTH,), eps=1e-6) * (1 + scale) + shift
    q, k, v = (z.unflatten(-1, (DEPTH, 64)).transpose(1, 2) for z in lin(h, b + "attn.qkv").chunk(3, dim=-1))
    attn = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v  # [B, H, L, 64]
    tokens = tokens + gate * lin(attn.transpose(1, 2).flatten(2), b + "attn.proj")
    h = F.layer_norm(tokens, (WIDTH,), eps=1e-6) * (1 + scale2) + shift2
    tokens = tokens + gate2 * lin(F.gelu(lin(h, b + "mlp.fc1"), approximate="tanh"), b + "mlp.fc2")
    expected = lin(tokens, "controlnet_blocks.0")
    assert len(out) == DEPTH and out[0] is out[1]
    assert (out[0] - expected).abs().max() < 1e-5


def test_sai_file_and_its_diffusers_conversion_give_the_same_residuals(tmp_path, main_model):
    x, t, y, hint = _inputs()
    sai = _residuals(load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=7, blocks=2)), main_model,
                     x, t, y, hint)
    conv = _residuals(load_controlnet(write_tiny_sd35_controlnet(tmp_path, "diffusers", seed=7, blocks=2)),
                      main_model, x, t, y, hint)
    assert len(sai) == len(conv) == 2
    for a, b in zip(sai, conv):
        assert torch.equal(a, b)


def test_pooled_vector_is_used_and_context_is_not(tmp_path, main_model):
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=8))
    x, t, y, hint = _inputs()
    one = _residuals(cn, main_model, x, t, y, hint)[0]
    assert not torch.equal(one, _residuals(cn, main_model, x, t, 2 * y, hint)[0])
    cn.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
    with torch.no_grad(), cn.control_model_wrapped.applied("cpu") as network:
        other = network(x=x, timesteps=t, y=y, context=torch.randn(2, 5, 64), hint=hint)["output"][0]
    cn.cleanup()
    assert torch.equal(one, other)


def test_double_y_embedding_variant_runs_the_models_y_embedder_first(tmp_path, main_model):
    w = tiny_sd35_controlnet_state_dict(seed=9, embedder_names="sai", double_y=True, blocks=2)
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=9, embedder_names="sai", double_y=True,
                                                    blocks=2))
    assert cn.borrowed_name() == "orig_y_embedder"
    x, t, y, hint = _inputs()
    out = _residuals(cn, main_model, x, t, y, hint)
    net = cn.control_model
    main = main_model.diffusion_model
    with torch.no_grad():
        c = net.t_embedder(t, dtype=torch.float32) + net.y_embedder(main.y_embedder(y))
        tokens = F.conv2d(x, w["pos_embed.proj.weight"], w["pos_embed.proj.bias"], stride=2).flatten(2).transpose(1, 2)
        tokens = tokens + net.pos_embed_input(hint)  # no position embedding in this variant
        # every block sees the same tokens
        expected = [net.controlnet_blocks[i](net.transformer_blocks[i](tokens, c)) for i in range(2)]
    assert len(out) == 2
    for a, b in zip(out, expected):
        assert (a - b).abs().max() < 1e-5


# --- the run: lending, hint, strength ---

def test_pre_run_lends_the_models_embedder_and_cleanup_leaves_the_network_as_loaded(tmp_path, main_model):
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=10)).copy()
    network = cn.control_model
    placeholder = network.x_embedder
    assert torch.count_nonzero(placeholder.proj.weight) == 0  # not in the file
    loaded = cn.control_model_wrapped
    cn.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
    assert cn.control_model_wrapped is not loaded and cn.copy().control_model_wrapped is loaded
    with cn.control_model_wrapped.applied("cpu") as running:
        lent = running.x_embedder
        assert lent is not placeholder
        assert torch.equal(lent.proj.weight, main_model.diffusion_model.x_embedder.proj.weight)
    assert network.x_embedder is placeholder  # restored after the call
    cn.cleanup()
    assert cn.control_model_wrapped is loaded and torch.count_nonzero(network.x_embedder.proj.weight) == 0


def test_a_model_without_an_mmdit_embedder_is_a_clear_error(tmp_path):
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai"))
    model = SimpleNamespace(diffusion_model=torch.nn.Linear(2, 2), model_sampling=FlowModelSampling(3.0))
    with pytest.raises(ControlNetRunError, match="x_embedder"):
        cn.pre_run(model, model.model_sampling.percent_to_sigma)


@pytest.fixture(scope="module")
def vae():
    from comfy_core.patching.vae import VaePatcher
    from comfy_core.patching.vae_build import vae_module_from
    from tests.fixtures.vae16_files import tiny_vae16_state_dict

    return VaePatcher(vae_module_from(tiny_vae16_state_dict("bfl", seed=2)), load_device="cpu", offload_device="cpu")


@pytest.mark.parametrize("control_type, preprocess", [(0, lambda a: a), (1, canny_hint), (2, depth_hint)])
def test_hint_is_the_vae_latent_of_the_preprocessed_image(tmp_path, main_model, vae, control_type, preprocess):
    cn = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", control_type=control_type))
    assert cn.compression_ratio == 1 and cn.latent_format == sd3_latent_format()
    image = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    c = cn.copy().set_cond_hint(image, 1.0, (0.0, 1.0), vae=vae)
    x, t, y, _ = _inputs(batch=1, size=4)
    c.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
    with torch.no_grad():
        c.get_control(x, torch.tensor([0.5]), {"c_crossattn": torch.zeros(1, 4, 64), "y": y}, 1, {})
        expected = sd3_latent_format().process_in(vae.encode(preprocess(image).movedim(1, -1)))
    assert torch.equal(c.cond_hint, expected)
    c.cleanup()
    if control_type == 1:
        assert torch.allclose(canny_hint(torch.tensor([0.0, 1.0])), torch.tensor([0.5, 128.0]))


def test_without_a_vae_the_run_says_to_connect_one(tmp_path, main_model):
    c = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai")).copy().set_cond_hint(torch.rand(1, 3, 32, 32))
    c.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
    x, _, y, _ = _inputs(batch=1, size=4)
    with pytest.raises(ControlNetRunError, match="VAE"):
        c.get_control(x, torch.tensor([0.5]), {"c_crossattn": torch.zeros(1, 4, 64), "y": y}, 1, {})
    c.cleanup()


def test_diffusers_layout_loads_as_an_sd3_controlnet_with_an_unshifted_latent(tmp_path):
    cn = load_controlnet(write_tiny_sd3_controlnet(tmp_path, "sd35", blocks=2, extra_channels=1, depth=4))
    assert type(cn) is ControlNet and cn.compression_ratio == 1 and cn.concat_mask
    assert cn.latent_format.shift_factor == 0.0 and cn.latent_format.scale_factor == sd3_latent_format().scale_factor


@pytest.mark.parametrize("strength", [0.0, 0.5])
def test_strength_scales_the_residuals_and_zero_is_no_control_bit_exactly(tmp_path, main_model, vae, strength):
    base = load_controlnet(write_tiny_sd35_controlnet(tmp_path, "sai", seed=11))
    image = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    x, _, y, _ = _inputs(batch=1, size=4)
    sigma = torch.tensor([0.6])
    cond = {"c_crossattn": torch.randn(1, 4, 64, generator=torch.Generator().manual_seed(3)), "y": y}
    results = {}
    for s in (1.0, strength):
        c = base.copy().set_cond_hint(image, s, (0.0, 1.0), vae=vae)
        c.pre_run(main_model, main_model.model_sampling.percent_to_sigma)
        with torch.no_grad():
            results[s] = c.get_control(x, sigma, cond, 1, {})
        c.cleanup()
    for full, scaled in zip(results[1.0]["output"], results[strength]["output"]):
        assert torch.allclose(scaled, strength * full, atol=1e-7)
    with torch.no_grad():
        plain = main_model.apply_model(x, sigma, c_crossattn=cond["c_crossattn"], y=y)
        controlled = main_model.apply_model(x, sigma, c_crossattn=cond["c_crossattn"], y=y, control=results[strength])
    if strength == 0.0:
        assert torch.equal(plain, controlled)
    else:
        assert (plain - controlled).abs().max() > 1e-3
