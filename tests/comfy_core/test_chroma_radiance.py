"""Chroma Radiance (pixel-space Chroma, comfy_core/families/chroma/radiance.py): detection from
names and shapes, and the forward pass against ComfyUI's maths written here: the patch
convolution as Chroma's token trunk on unfolded pixels, then the NeRF head (DCT pixel embedding,
generated gated MLPs, fold, final norm + linear / conv) computed step by step in this file."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.chroma.dit import Chroma, ChromaConfig
from comfy_core.families.chroma.radiance import ChromaRadiance, ChromaRadianceConfig
from tests.fixtures.chroma_files import tiny_chroma_state_dict
from tests.fixtures.chroma_radiance_files import tiny_radiance_state_dict

UNET = "model.diffusion_model."


def _build(state: dict) -> ChromaRadiance:
    with torch.device("meta"):
        model = ChromaRadiance.from_config(ChromaRadianceConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def test_detected_from_names_and_shapes():
    state = tiny_radiance_state_dict(head="conv", freqs=3, nerf_hidden=8, nerf_ratio=2, nerf_depth=2, patch=4)
    detection = default_registry().detect_diffusion_model({UNET + k: v for k, v in state.items()})
    assert detection.family.name == "chroma_radiance"
    config = detection.config
    assert (config.in_channels, config.patch_size, config.hidden_size, config.nerf_hidden_size) == (3, 4, 64, 8)
    assert (config.nerf_mlp_ratio, config.nerf_depth, config.nerf_max_freqs) == (2, 2, 3)
    assert config.nerf_final_head_type == "conv" and config.nerf_tile_size == 32 and not config.use_x0
    assert config.nerf_embedder_dtype == torch.float32 and config.latent_channels == 3
    assert detection.family.latent_format.channels == 3 and detection.family.latent_format.scale_factor == 1.0
    plain = default_registry().detect_diffusion_model({UNET + k: v for k, v in tiny_chroma_state_dict().items()})
    assert plain.family.name == "chroma"


def _dct(p: int, freqs: int) -> torch.Tensor:
    """[P*P, F*F]: pixel k = (row i, col j); column fx*F + fy = cos(pi fx j/(P-1)) cos(pi fy i/(P-1)) / (1 + fx fy)."""
    out = torch.zeros(p * p, freqs * freqs)
    for i in range(p):
        for j in range(p):
            for fx in range(freqs):
                for fy in range(freqs):
                    out[i * p + j, fx * freqs + fy] = (math.cos(math.pi * fx * j / (p - 1)) *
                                                       math.cos(math.pi * fy * i / (p - 1)) / (1 + fx * fy))
    return out


def _rms(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * scale


def reference(state: dict, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, guidance: torch.Tensor,
              p: int, freqs: int, depth: int, ratio: int, head: str = "linear", x0: bool = False) -> torch.Tensor:
    b, c, h, w = x.shape
    hidden = state["txt_in.weight"].shape[0]
    # The trunk: Chroma on tokens = unfolded patches through the patch convolution as a Linear.
    trunk_state = {k: v for k, v in state.items() if not k.startswith(("img_in_patch", "nerf_", "__x0__"))}
    trunk_state["img_in.weight"] = state["img_in_patch.weight"].reshape(hidden, c * p * p)
    trunk_state["img_in.bias"] = state["img_in_patch.bias"]
    with torch.device("meta"):
        trunk = Chroma.from_config(ChromaConfig(**{**ChromaConfig.detect_from_weights(
            {**trunk_state, "final_layer.linear.weight": torch.zeros(4, hidden)}).params()}), final_layer=False)
    trunk.load_state_dict(trunk_state, strict=True, assign=True)
    tokens = F.unfold(x, p, stride=p).transpose(1, 2)  # [B, N, C*P*P]
    hl, wl = h // p, w // p
    ids = torch.stack(torch.meshgrid(torch.arange(hl), torch.arange(wl), indexing="ij"), -1).reshape(-1, 2).float()
    img_ids = torch.cat([torch.zeros(hl * wl, 1), ids], -1)[None].expand(b, -1, -1)
    states = trunk.forward_orig(tokens, img_ids, context, torch.zeros(b, context.shape[1], 3), t, guidance)  # [B, N, D]
    # The NeRF head, per patch.
    dct = _dct(p, freqs)
    out_patches = torch.zeros(b, states.shape[1], state["nerf_blocks.0.norm.scale"].shape[0], p * p)
    for bi in range(b):
        for n in range(states.shape[1]):
            pixels = tokens[bi, n].reshape(c, p * p).T  # [P*P, C]
            e = torch.cat([pixels, dct], -1) @ state["nerf_image_embedder.embedder.0.weight"].T \
                + state["nerf_image_embedder.embedder.0.bias"]
            s = states[bi, n]
            width = e.shape[-1]
            for i in range(depth):
                params = state[f"nerf_blocks.{i}.param_generator.weight"] @ s + state[f"nerf_blocks.{i}.param_generator.bias"]
                g, v, o = params.chunk(3)
                g = g.reshape(width, width * ratio)
                v = v.reshape(width, width * ratio)
                o = o.reshape(width * ratio, width)
                g, v, o = (m / m.norm(dim=0, keepdim=True).clamp_min(1e-12) for m in (g, v, o))
                nx = _rms(e, state[f"nerf_blocks.{i}.norm.scale"])
                e = (F.silu(nx @ g) * (nx @ v)) @ o + e
            out_patches[bi, n] = e.T  # [h, P*P]
    image = F.fold(out_patches.reshape(b, states.shape[1], -1).transpose(1, 2), (h, w), p, stride=p)  # [B, h, H, W]
    if head == "conv":
        normed = _rms(image.movedim(1, -1), state["nerf_final_layer_conv.norm.scale"]).movedim(-1, 1)
        out = F.conv2d(normed, state["nerf_final_layer_conv.conv.weight"], state["nerf_final_layer_conv.conv.bias"],
                       padding=1)
    else:
        out = (_rms(image.movedim(1, -1), state["nerf_final_layer.norm.scale"]) @ state["nerf_final_layer.linear.weight"].T
               + state["nerf_final_layer.linear.bias"]).movedim(-1, 1)
    return (x - out) / t.reshape(-1, 1, 1, 1) if x0 else out


def _inputs(batch: int = 1, h: int = 8, w: int = 12) -> dict:
    gen = torch.Generator().manual_seed(0)
    return dict(x=torch.rand(batch, 3, h, w, generator=gen) * 2 - 1, timestep=torch.full((batch,), 0.7),
                context=torch.randn(batch, 3, 64, generator=gen), guidance=torch.zeros(batch))


@pytest.mark.parametrize("head, x0", [("linear", False), ("conv", False), ("linear", True)])
def test_forward_matches_comfyuis_maths(head, x0):
    state = tiny_radiance_state_dict(seed=1, head=head, x0=x0)
    model = _build(state)
    inputs = _inputs()
    with torch.no_grad():
        got = model(**inputs)
        want = reference(state, inputs["x"], inputs["timestep"], inputs["context"], inputs["guidance"], p=4, freqs=3,
                         depth=2, ratio=2, head=head, x0=x0)
    assert got.shape == (1, 3, 8, 12)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_tiles_and_padding_change_nothing_but_memory():
    model = _build(tiny_radiance_state_dict(seed=2))
    inputs = _inputs(batch=2, h=10, w=13)  # padded to 12 x 16 (circularly), cut back
    with torch.no_grad():
        whole = model(**inputs, transformer_options={"chroma_radiance_options": {"nerf_tile_size": 0}})
        tiled = model(**inputs, transformer_options={"chroma_radiance_options": {"nerf_tile_size": 5}})
        default = model(**inputs)
    assert whole.shape == (2, 3, 10, 13)
    torch.testing.assert_close(tiled, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(default, whole, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(whole[0], whole[1])


def test_option_overrides_are_checked():
    model = _build(tiny_radiance_state_dict())
    with pytest.raises(ValueError, match="Unknown key.*nerf_tiles"):
        model(**_inputs(), transformer_options={"chroma_radiance_options": {"nerf_tiles": 4}})
    with pytest.raises(ValueError, match="Invalid value.*nerf_tile_size"):
        model(**_inputs(), transformer_options={"chroma_radiance_options": {"nerf_tile_size": 4.0}})
    config = model.config.with_overrides({"nerf_embedder_dtype": None, "nerf_tile_size": 3})
    assert config.nerf_embedder_dtype is None and config.nerf_tile_size == 3 and model.config.nerf_tile_size == 32
