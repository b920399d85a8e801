"""Mage-Flow's DiT (comfy_core/families/mage/dit.py) against an independent reference written here
from the equations of the stored implementations (vLLM-Omni's `mage_flow` transformer layers:
complex adjacent-pair RoPE on the image stream only, centred `negative[-(n - n//2):] + positive[:n//2]`
grids, Mage's bf16-rounded timestep table; the Scala port: text features RMS-normed then `txt_in`,
references on image index k, the final layer on the target's tokens), on tiny random weights; and
its detection, sampling policy and conditioning."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.mage.dit import (MageFlowConfig, MageFlowConfigError, MageFlowInputError,
                                          MageFlowTransformer, mage_timestep_sinusoid)

TINY = dict(in_channels=128, num_layers=2, attention_head_dim=32, num_attention_heads=2, joint_attention_dim=48,
            mlp_hidden_dim=96, axes_dims_rope=(4, 14, 14))


def tiny_state(seed: int = 0) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        network = MageFlowTransformer(**TINY)
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in network.state_dict().items():
        if name.endswith(".bias") or "norm" in name:
            value = (1.0 if "norm" in name and name.endswith(".weight") else 0.0) + \
                0.1 * torch.randn(tensor.shape, generator=gen)
        else:
            value = torch.randn(tensor.shape, generator=gen) / tensor.shape[-1] ** 0.5
        state[name] = value
    return state


def tiny_network(seed: int = 0) -> tuple[MageFlowTransformer, dict[str, torch.Tensor]]:
    state = tiny_state(seed)
    network = MageFlowTransformer(**TINY)
    network.load_state_dict(state)
    return network.eval(), state


# --- the reference ----------------------------------------------------------------------------------

def ref_timestep(t: torch.Tensor) -> torch.Tensor:
    """upstream `get_timestep_embedding(t.bf16, 256, flip_sin_to_cos=True, shift=0, scale=1000)`."""
    t = t.to(torch.bfloat16)
    half = 128
    exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32) / (half - 0)
    freqs = torch.exp(exponent).to(t.dtype)
    emb = 1000 * t[:, None].float() * freqs[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    return torch.cat([emb[:, half:], emb[:, :half]], dim=-1)


def ref_rope_params(index: torch.Tensor, dim: int, theta: float = 10000) -> torch.Tensor:
    freqs = torch.outer(index.float(), 1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    return torch.polar(torch.ones_like(freqs), freqs)


def ref_grid(frame_index: int, h: int, w: int, axes: tuple[int, int, int]) -> torch.Tensor:
    """`[h*w, d/2]` complex rotations (upstream `MageFlowEmbedRope._compute_grid`, scale_rope)."""
    size = 64
    pos = torch.arange(size)
    neg = torch.arange(size).flip(0) * -1 - 1
    pos_f = [ref_rope_params(pos, a) for a in axes]
    neg_f = [ref_rope_params(neg, a) for a in axes]
    frame = pos_f[0][frame_index].view(1, 1, -1).expand(h, w, -1)
    height = torch.cat([neg_f[1][-(h - h // 2):], pos_f[1][:h // 2]]).view(h, 1, -1).expand(h, w, -1)
    width = torch.cat([neg_f[2][-(w - w // 2):], pos_f[2][:w // 2]]).view(1, w, -1).expand(h, w, -1)
    return torch.cat([frame, height, width], dim=-1).reshape(h * w, -1)


def ref_apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x `[B, S, H, D]` -> rotated (adjacent pairs as complex numbers)."""
    rotated = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(rotated * freqs[None, :, None, :]).flatten(-2).to(x.dtype)


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def lin(s: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, s[name + ".weight"], s[name + ".bias"])


def reference(s: dict, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
              refs: list[torch.Tensor] = ()) -> torch.Tensor:
    heads, head_dim = TINY["num_attention_heads"], TINY["attention_head_dim"]
    b, c, h, w = x.shape
    latents = [x, *refs]
    img = torch.cat([l.permute(0, 2, 3, 1).reshape(b, -1, c) for l in latents], dim=1)
    freqs = torch.cat([ref_grid(i, l.shape[2], l.shape[3], TINY["axes_dims_rope"]) for i, l in enumerate(latents)])
    hs = lin(s, "img_in", img)
    enc = lin(s, "txt_in", rms(context, s["txt_norm.weight"]))
    temb = lin(s, "time_text_embed.timestep_embedder.linear_2",
               F.silu(lin(s, "time_text_embed.timestep_embedder.linear_1", ref_timestep(t))))
    for i in range(TINY["num_layers"]):
        p = f"transformer_blocks.{i}."
        img_mod = lin(s, p + "img_mod.1", F.silu(temb))
        txt_mod = lin(s, p + "txt_mod.1", F.silu(temb))
        (i1, i2), (t1, t2) = img_mod.chunk(2, dim=-1), txt_mod.chunk(2, dim=-1)

        def modulate(v, m):
            shift, scale, gate = m.chunk(3, dim=-1)
            return F.layer_norm(v, (v.shape[-1],), eps=1e-6) * (1 + scale[:, None]) + shift[:, None], gate[:, None]

        img_n, ig1 = modulate(hs, i1)
        txt_n, tg1 = modulate(enc, t1)

        def project(v, q, k, vv, nq, nk):
            qq = rms(lin(s, p + "attn." + q, v).unflatten(-1, (heads, head_dim)), s[p + f"attn.{nq}.weight"])
            kk = rms(lin(s, p + "attn." + k, v).unflatten(-1, (heads, head_dim)), s[p + f"attn.{nk}.weight"])
            return qq, kk, lin(s, p + "attn." + vv, v).unflatten(-1, (heads, head_dim))

        iq, ik, iv = project(img_n, "to_q", "to_k", "to_v", "norm_q", "norm_k")
        tq, tk, tv = project(txt_n, "add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k")
        iq, ik = ref_apply_rope(iq, freqs), ref_apply_rope(ik, freqs)
        q, k, v = (torch.cat(pair, dim=1).transpose(1, 2) for pair in ((tq, iq), (tk, ik), (tv, iv)))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        n_txt = enc.shape[1]
        hs = hs + ig1 * lin(s, p + "attn.to_out.0", out[:, n_txt:])
        enc = enc + tg1 * lin(s, p + "attn.to_add_out", out[:, :n_txt])
        img_n, ig2 = modulate(hs, i2)
        txt_n, tg2 = modulate(enc, t2)
        mlp = lambda stream, v: lin(s, p + f"{stream}_mlp.net.2",  # noqa: E731
                                    F.gelu(lin(s, p + f"{stream}_mlp.net.0.proj", v), approximate="tanh"))
        hs = hs + ig2 * mlp("img", img_n)
        enc = enc + tg2 * mlp("txt", txt_n)
    scale, shift = lin(s, "norm_out.linear", F.silu(temb)).chunk(2, dim=-1)
    target = hs[:, :h * w]
    out = F.layer_norm(target, (target.shape[-1],), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    return lin(s, "proj_out", out).reshape(b, h, w, c).permute(0, 3, 1, 2)


# --- tests --------------------------------------------------------------------------------------------

def test_timestep_table_is_rounded_to_bf16() -> None:
    t = torch.tensor([0.123456, 0.87654321, 1.0])
    assert torch.allclose(mage_timestep_sinusoid(t), ref_timestep(t), atol=1e-5)
    # the fp32 table differs: the rounding is load-bearing
    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000 * t[:, None] * freqs[None]
    assert (torch.cat([args.cos(), args.sin()], -1) - mage_timestep_sinusoid(t)).abs().max() > 1e-2


@pytest.mark.parametrize("size", [(4, 6), (5, 3)])  # even and odd grids (centred as r - ceil(n/2))
def test_forward_matches_reference(size: tuple[int, int]) -> None:
    network, state = tiny_network()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 128, *size, generator=gen)
    context = torch.randn(2, 7, 48, generator=gen)
    t = torch.tensor([0.7, 0.25])
    with torch.no_grad():
        ours = network(x, t, context)
        want = reference(state, x, t, context)
    assert ours.shape == x.shape
    assert torch.allclose(ours, want, atol=1e-4, rtol=1e-4), (ours - want).abs().max()


def test_reference_latents_on_their_own_index() -> None:
    network, state = tiny_network(3)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, 128, 4, 4, generator=gen)
    refs = [torch.randn(1, 128, 4, 4, generator=gen), torch.randn(1, 128, 3, 5, generator=gen)]
    context = torch.randn(1, 5, 48, generator=gen)
    t = torch.tensor([0.5])
    with torch.no_grad():
        ours = network(x, t, context, ref_latents=refs)
        want = reference(state, x, t, context, refs)
        plain = network(x, t, context)
    assert torch.allclose(ours, want, atol=1e-4, rtol=1e-4), (ours - want).abs().max()
    assert not torch.allclose(ours, plain, atol=1e-3)
    with pytest.raises(MageFlowInputError, match="ref_latents_method"):
        network(x, t, context, ref_latents=refs, ref_latents_method="offset")


def test_detection_from_weights_and_split_file() -> None:
    state = tiny_state()
    config = MageFlowConfig.detect_from_weights(state)
    assert config == MageFlowConfig(**TINY)
    detection = default_registry().detect_diffusion_model({"model.diffusion_model." + k: v for k, v in state.items()})
    assert detection.family.name == "mage"
    family = detection.family
    assert family.sampling.schedule == "flow" and family.sampling.shift == 6.0 and family.sampling.multiplier == 1.0
    assert family.latent_format.channels == 128 and family.geometry.downscale == 16
    # Qwen-Image's 64-channel input is not Mage-Flow's
    qwen = dict(state)
    qwen["img_in.weight"] = torch.zeros(64, 64)
    with pytest.raises(MageFlowConfigError, match="img_in"):
        MageFlowConfig.detect_from_weights(qwen)


def test_conditions_pass_reference_latents() -> None:
    from comfy_core.families.mage import MageConditions

    class Model:
        def process_latent_in(self, latent):
            return latent * 2

    ref = torch.ones(1, 128, 2, 2)
    out = MageConditions().extra_conds(Model(), reference_latents=[ref], attention_mask=torch.ones(1, 3))
    assert torch.equal(out["ref_latents"][0], ref * 2) and out["attention_mask"].shape == (1, 3)


def test_int8_convrot_file_loads_quantized_and_samples_as_mage(tmp_path) -> None:
    """A UNETLoader file as released (the blocks' linears int8 ConvRot) stays quantised, computes like its
    dequantised weights, and carries Mage's sampling (flow, shift 6, multiplier 1) and model class."""
    from safetensors.torch import save_file

    from comfy_core.models.model_sampling import FlowModelSampling
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.qwen3vl_files import TEXT_WIDTH
    from tests.fixtures.template_models_mage import WRITERS_MAGE, tiny_mage_state_dict
    from tests.fixtures.template_models_quant import true_state

    path = tmp_path / "mage_flow_int8_convrot.safetensors"
    WRITERS_MAGE["unet_mage_int8"](path)
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        metadata = f.metadata() or {}
    shapes = {k: tuple(v.shape) for k, v in tiny_mage_state_dict().items() if k.endswith(".weight")}
    plain_path = tmp_path / "plain.safetensors"
    save_file({k: v.float().contiguous() for k, v in true_state(tensors, metadata, shapes).items()}, str(plain_path))
    quantised, plain = load_diffusion_model(path), load_diffusion_model(plain_path)
    network = quantised.model.diffusion_model
    assert isinstance(network, MageFlowTransformer)
    assert network.transformer_blocks[0].attn.to_q.weight.dtype == torch.int8
    sampling = quantised.model.model_sampling
    assert isinstance(sampling, FlowModelSampling) and sampling.shift == 6.0 and sampling.multiplier == 1.0
    gen = torch.Generator().manual_seed(4)
    x, ctx = torch.randn(1, 128, 3, 4, generator=gen), torch.randn(1, 5, TEXT_WIDTH, generator=gen)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx) for m in (quantised, plain))
    assert (a - b).abs().max() < 1e-4 * b.abs().max()


def test_single_file_is_mage_not_qwen_image() -> None:
    """A single-file layout (`model.diffusion_model.` + the text encoder) is Mage-Flow's alone."""
    state = {"model.diffusion_model." + k: v for k, v in tiny_state().items()}
    state["text_encoders.qwen3vl_4b.transformer.model.language_model.norm.weight"] = torch.ones(4)
    assert default_registry().detect(state).family.name == "mage"
