"""Anima LLLite (comfy_core/model_patches/anima_lllite.py, AnimaLLLiteApply in nodes/anima_nodes.py):
ModelPatchLoader's detection and loading of kohya's v2 files (with their metadata), the conditioning
network and the per-layer modules against their equations written here, the hooks the Cosmos-Predict2
blocks call, and the node on a tiny Anima model: strength 0 and sigmas outside the window give the
unpatched sample exactly; inside it the sample changes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.model_patches.anima_lllite import (AnimaLLLite, AnimaLLLiteAttentionPatch, AnimaLLLiteMLPPatch,
                                                   AnimaLLLitePatch)
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.patch_files import ANIMA_LLLITE, detect_model_patch, load_model_patch
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_anima import (ADAPTER_WIDTH, TEXT_WIDTH, TINY_WIDTH, lllite_state_dict,
                                                  tiny_anima_state_dict, write_lllite)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lllite")
    return write_lllite(folder / "anima-lllite-depth.safetensors", seed=11), \
        write_lllite(folder / "anima-lllite-inpainting.safetensors", inpaint=True, seed=12)


@pytest.fixture(scope="module")
def patch_rgb(files):
    return load_model_patch(files[0], mmap=False)


@pytest.fixture(scope="module")
def anima(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(save(tiny_anima_state_dict(seed=1), tmp_path_factory.mktemp("anima") / "a.safetensors"))


def _float_state(patch) -> dict:
    return {k: v.float() for k, v in patch.model.state_dict().items()}


# --- loading --------------------------------------------------------------------------------------------------

def test_modelpatchloader_builds_both_kinds(files, patch_rgb):
    assert detect_model_patch(lllite_state_dict()).name == ANIMA_LLLITE
    network = patch_rgb.model
    assert isinstance(network, AnimaLLLite) and network.cond_in_channels == 3 and not network.inpaint_masked_input
    config = network.config
    assert (config.cond_dim, config.cond_emb_dim, config.resblocks, config.aspp_dilations) == (16, 8, 1, (1, 2, 4, 8))
    assert (config.model_dim, config.block_count, len(config.modules)) == (TINY_WIDTH, 2, 10)
    assert next(network.parameters()).dtype == torch.float16  # stored as the file, cast as the layers run
    inpaint = load_model_patch(files[1], mmap=False).model
    assert inpaint.cond_in_channels == 4 and inpaint.inpaint_masked_input


def test_other_versions_and_names_are_refused(tmp_path):
    from safetensors.torch import save_file

    state = {k: v.half() for k, v in lllite_state_dict().items()}
    save_file(state, str(tmp_path / "v1.safetensors"), metadata={"lllite.version": "1"})
    with pytest.raises(ModelPatchError, match="version '1'"):
        load_model_patch(tmp_path / "v1.safetensors")
    state["lllite_dit_blocks_0_cross_attn_k_proj.down.weight"] = state["lllite_dit_blocks_0_mlp_layer1.down.weight"].clone()
    save_file(state, str(tmp_path / "odd.safetensors"))
    with pytest.raises(ModelPatchError, match="lllite_dit_blocks_0_cross_attn_k_proj"):
        load_model_patch(tmp_path / "odd.safetensors")


# --- the networks against their equations -------------------------------------------------------------------------

def _gn(x, sd, key, channels):
    groups = 8
    while groups > 1 and channels % groups:
        groups //= 2
    return F.group_norm(x, groups, sd[key + ".weight"], sd[key + ".bias"], eps=1e-5)


def _conv(x, sd, key, **kw):
    return F.conv2d(x, sd[key + ".weight"], sd[key + ".bias"], **kw)


def _conditioning_reference(sd, image):
    p = "lllite_conditioning1."
    half, dim = sd[p + "conv1.weight"].shape[0], sd[p + "conv3.weight"].shape[0]
    x = F.silu(_gn(_conv(image, sd, p + "conv1", stride=4), sd, p + "norm1", half))
    x = F.silu(_gn(_conv(x, sd, p + "conv2", padding=1), sd, p + "norm2", half))
    x = F.silu(_gn(_conv(x, sd, p + "conv3", stride=4), sd, p + "norm3", dim))
    r = 0
    while f"{p}resblocks.{r}.conv1.weight" in sd:
        q = f"{p}resblocks.{r}."
        h = _conv(F.silu(_gn(x, sd, q + "norm1", dim)), sd, q + "conv1", padding=1)
        x = x + _conv(F.silu(_gn(h, sd, q + "norm2", dim)), sd, q + "conv2", padding=1)
        r += 1
    outs = []
    for i, d in enumerate((1, 2, 4, 8)):
        q = f"{p}aspp.branches.{i}."
        y = _conv(x, sd, q + "0") if d == 1 else _conv(x, sd, q + "0", padding=d, dilation=d)
        outs.append(F.silu(_gn(y, sd, q + "1", dim)))
    pooled = x.mean(dim=(2, 3), keepdim=True)
    pooled = F.silu(_gn(_conv(pooled, sd, p + "aspp.global_conv.0"), sd, p + "aspp.global_conv.1", dim))
    outs.append(pooled.expand(-1, -1, *x.shape[-2:]))  # bilinear from 1x1 is a constant
    x = F.silu(_gn(_conv(torch.cat(outs, 1), sd, p + "aspp.proj.0"), sd, p + "aspp.proj.1", dim))
    tokens = _conv(x, sd, p + "proj").flatten(2).transpose(1, 2)
    return F.layer_norm(tokens, tokens.shape[-1:], sd[p + "out_norm.weight"], sd[p + "out_norm.bias"])


def _module_reference(sd, name, x, emb, strength):
    def lin(key, v):
        return v @ sd[f"{name}.{key}.weight"].T + sd[f"{name}.{key}.bias"]

    c = emb + sd[f"{name}.depth_embed"]
    gamma, beta = lin("cond_to_film", c).chunk(2, dim=-1)
    hidden = lin("mid", torch.cat([c, F.silu(lin("down", x))], dim=-1))
    return x + lin("up", F.silu(hidden * (1 + gamma) + beta)) * strength


def test_conditioning_and_modules_match_their_equations(patch_rgb):
    network = patch_rgb.model
    sd = _float_state(patch_rgb)
    image = torch.rand(2, 3, 64, 48, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        emb = network.encode_conditioning(image)
    assert emb.shape == (2, 4 * 3, 8)
    assert (emb - _conditioning_reference(sd, image)).abs().max() < 1e-3  # fp16 weights, fp32 maths
    x = torch.randn(4, 12, TINY_WIDTH, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = network.apply(x, emb, 1, "cross_attn_q_proj", 0.7)
    expected = _module_reference(sd, "lllite_dit_blocks_1_cross_attn_q_proj", x, emb.repeat(2, 1, 1), 0.7)
    assert (out - expected).abs().max() < 1e-4
    assert torch.equal(network.apply(x, emb, 5, "mlp_layer1", 1.0), x)  # no module for that block: unchanged
    with pytest.raises(ModelPatchError, match="tokens"):
        network.apply(x[:, :5], emb, 0, "mlp_layer1", 1.0)


def test_hooks_patch_the_projection_inputs_of_the_running_block(patch_rgb):
    network = patch_rgb.model
    patch = AnimaLLLitePatch(patch_rgb, torch.rand(1, 32, 32, 3), None, 0.5, 1.0, 0.0)
    latent = torch.zeros(1, 16, 1, 4, 4)
    options = {"model_patch_data": {}, "sigmas": torch.tensor([0.5])}
    patch({"img": None, "x": latent, "transformer_options": options})
    emb = options["model_patch_data"][patch]
    assert emb.shape == (1, 4, 8)
    x = torch.randn(2, 4, TINY_WIDTH, generator=torch.Generator().manual_seed(3))
    extra = {**options, "block_index": 1}
    out = AnimaLLLiteAttentionPatch(patch, {"q": "self_attn_q_proj", "k": "self_attn_k_proj", "v": "self_attn_v_proj"})(
        x, x, x, pe="rope", extra_options=extra)
    for name in "qkv":
        assert torch.equal(out[name], network.apply(x, emb, 1, f"self_attn_{name}_proj", 0.5))
    assert out["pe"] == "rope"
    cross = AnimaLLLiteAttentionPatch(patch, {"q": "cross_attn_q_proj"})(x, x[:, :3], x[:, :3], extra_options=extra)
    assert torch.equal(cross["k"], x[:, :3]) and not torch.equal(cross["q"], x)
    five = x.view(2, 1, 2, 2, TINY_WIDTH)
    mlp = AnimaLLLiteMLPPatch(patch)({"x": five, "transformer_options": extra})["x"]
    assert mlp.shape == five.shape and torch.equal(mlp.reshape(2, 4, -1), network.apply(x, emb, 1, "mlp_layer1", 0.5))
    # outside its sigma window (end, start] nothing is encoded, so no hook changes anything
    quiet = {"model_patch_data": {}, "sigmas": torch.tensor([1.0])}
    AnimaLLLitePatch(patch_rgb, torch.rand(1, 32, 32, 3), None, 0.5, 0.9, 0.0)({"x": latent, "transformer_options": quiet})
    assert quiet["model_patch_data"] == {}


def test_inpaint_input_masks_the_image_and_appends_the_mask(files):
    patch_file = load_model_patch(files[1], mmap=False)
    image = torch.rand(1, 16, 16, 3)
    mask = torch.zeros(1, 16, 16)
    mask[:, :8] = 1.0
    patch = AnimaLLLitePatch(patch_file, image, mask, 1.0, 1.0, 0.0)
    control = patch.control_input(torch.zeros(1, 16, 1, 2, 2))
    assert control.shape == (1, 4, 16, 16)
    assert torch.equal(control[:, 3, :8], torch.ones(8, 16)[None]) and torch.equal(control[:, 3, 8:], -torch.ones(8, 16)[None])
    assert control[:, :3, :8].abs().max() == 0  # masked RGB zeroed (lllite.inpaint_masked_input)
    assert torch.allclose(control[:, :3, 8:], image.movedim(-1, 1)[:, :, 8:] * 2 - 1, atol=1e-6)


# --- the node on a tiny Anima model --------------------------------------------------------------------------------

def _sample(model, seed=0):
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(9)
    positive = [[torch.randn(1, 7, ADAPTER_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 5, ADAPTER_WIDTH, generator=gen), {}]]
    noise = torch.randn(1, 16, 1, 4, 4, generator=torch.Generator().manual_seed(seed))
    return sample(model, noise, 2, 3.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 1, 4, 4))


def test_node_strength_and_window(anima, patch_rgb):
    from nodes.anima_nodes import anima_lllite_apply

    image = torch.rand(1, 40, 40, 4, generator=torch.Generator().manual_seed(4))  # 4 channels: the first 3 read
    plain = _sample(anima)
    (zero,) = anima_lllite_apply(anima, patch_rgb, image, 0.0, 0.0, 1.0)
    assert torch.equal(_sample(zero), plain)
    # 2 steps at shift 3 evaluate sigmas 1.0 and 0.75; start 0.6 is sigma 0.667: both outside (0, 0.667]
    (late,) = anima_lllite_apply(anima, patch_rgb, image, 1.0, 0.6, 1.0)
    assert torch.equal(_sample(late), plain)
    (full,) = anima_lllite_apply(anima, patch_rgb, image, 1.0, 0.0, 1.0)
    changed = _sample(full)
    assert changed.shape == plain.shape and (changed - plain).abs().max() > 1e-4
    assert torch.equal(_sample(anima), plain)  # the input model is not changed


def test_node_refuses_other_models_and_patches(patch_rgb, tmp_path):
    from nodes.anima_nodes import anima_lllite_apply
    from nodes.errors import NodeInputError
    from comfy_core.split.diffusion_model import load_diffusion_model

    wide = load_diffusion_model(save(tiny_anima_state_dict(seed=2, width=96 * 4), tmp_path / "wide.safetensors"))
    with pytest.raises(NodeInputError, match="width 192"):
        anima_lllite_apply(wide, patch_rgb, torch.rand(1, 8, 8, 3), 1.0, 0.0, 1.0)
    with pytest.raises(NodeInputError, match="Anima LLLite MODEL_PATCH"):
        anima_lllite_apply(wide, object(), torch.rand(1, 8, 8, 3), 1.0, 0.0, 1.0)
    assert TEXT_WIDTH == 32
