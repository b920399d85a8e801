"""Today's ComfyUI names popular packs import (survey round 2, a2 a4 a5 a6 a10 a11 a12):
`comfy.ldm.anima.model` (ComfyUI-ppm, comfyui-prompt-control), `comfy.ldm.cosmos.predict2.
apply_rotary_pos_emb`, `comfy_extras.nodes_post_processing.gaussian_kernel` (Image-Filters),
`nodes_tcfg.score_tangential_damping`, `nodes_align_your_steps.loglinear_interp` / `NOISE_LEVELS`,
`nodes_gits.NOISE_LEVELS` (ppm), latent-diffusion's schedule helpers and `LitEma` (CCSR),
`comfy.model_management.unload_model_and_clones` (VLM_nodes), `comfy.sd.save_checkpoint` (art-venture)
and `comfy_extras.nodes_model_merging.save_checkpoint` (mikey_nodes). Pure functions are checked
against independent computations; tiny random networks."""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

# -- comfy.ldm.anima.model / comfy.ldm.cosmos.predict2 --------------------------------------------


@pytest.fixture(scope="module")
def anima():
    from comfy_core.families.anima.dit import AnimaDiT
    from tests.fixtures.template_models_anima import tiny_anima_config, tiny_anima_state_dict

    network = AnimaDiT(tiny_anima_config())
    network.load_state_dict(tiny_anima_state_dict(seed=1))
    return network.eval()


def _inputs(network, tokens=5):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 4, 6, generator=gen)
    context = torch.randn(2, tokens, network.config.crossattn_emb_channels, generator=gen)
    return x, torch.tensor([0.7, 0.3]), context


def test_anima_module_names_are_our_networks(session, anima):
    import comfy.ldm.anima.model as anima_model
    import comfy.ldm.cosmos.predict2 as predict2
    from comfy_core.families.anima import adapter, dit

    assert anima_model.Anima is dit.AnimaDiT is predict2.MiniTrainDIT
    assert isinstance(anima, anima_model.Anima)
    assert anima_model.LLMAdapter is adapter.LLMAdapter and isinstance(anima.llm_adapter, anima_model.LLMAdapter)
    assert all(isinstance(b, anima_model.TransformerBlock) for b in anima.llm_adapter.blocks)
    assert isinstance(anima.llm_adapter.blocks[0].cross_attn, anima_model.Attention)
    cross = [n for n, m in anima.named_modules() if "cross_attn" in n and isinstance(m, predict2.Attention)]
    assert cross == ["blocks.0.cross_attn", "blocks.1.cross_attn"]  # what the packs patch
    assert anima.patch_spatial == 2
    from comfy.ldm.anima.model import RotaryEmbedding, apply_rotary_pos_emb, rotate_half  # noqa: F401


def test_rotate_half_and_the_adapters_rope_are_comfyuis_maths(session):
    from comfy.ldm.anima.model import RotaryEmbedding, apply_rotary_pos_emb, rotate_half
    from comfy_core.families.anima.adapter import rotary

    x = torch.randn(2, 3, 5, 8)  # [B, H, S, d]
    assert torch.equal(rotate_half(x), torch.cat([-x[..., 4:], x[..., :4]], dim=-1))
    cos, sin = RotaryEmbedding(8)(x, torch.arange(5)[None].expand(2, 5))
    assert cos.shape == (2, 5, 8) and cos.dtype == x.dtype
    # independent: angle(p, i) = p / 10000^(2i/d), the 4 frequencies twice over
    angles = torch.tensor([[p / 10000 ** (2 * i / 8) for i in range(4)] * 2 for p in range(5)])
    torch.testing.assert_close(cos[0], angles.cos())
    torch.testing.assert_close(sin[1], angles.sin())
    ours = rotary(5, 8, torch.device("cpu"), torch.float32)  # the table our adapter runs on
    torch.testing.assert_close((cos[0], sin[0]), ours)
    out = apply_rotary_pos_emb(x, cos, sin)
    # independent: each pair (x_i, x_{i+d/2}) turned by its angle
    x1, x2 = x[..., :4], x[..., 4:]
    c, s = angles.cos()[:, :4], angles.sin()[:, :4]
    torch.testing.assert_close(out, torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1))
    # non-consecutive positions
    cos_odd, _ = RotaryEmbedding(8)(x, torch.tensor([[3, 0, 7, 7, 1]]))
    torch.testing.assert_close(cos_odd[0, 2], angles.new_tensor([7 / 10000 ** (2 * i / 8) for i in range(4)] * 2).cos())


def test_the_adapter_attention_is_comfyuis_forward_over_these_helpers(session, anima):
    """ComfyUI's `Attention.forward` (q/k RMSNorm per head, rotate-half RoPE at the positions, SDPA,
    o_proj) written with the surface's helpers gives our adapter attention's output."""
    from comfy.ldm.anima.model import RotaryEmbedding, apply_rotary_pos_emb

    attention = anima.llm_adapter.blocks[0].cross_attn
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 6, 32, generator=gen)
    context = torch.randn(1, 4, 32, generator=gen)
    rope = RotaryEmbedding(attention.head_dim)
    rq = rope(x, torch.arange(6)[None])
    rk = rope(x, torch.arange(4)[None])
    h, d = attention.n_heads, attention.head_dim
    q = attention.q_norm(attention.q_proj(x).view(1, 6, h, d)).transpose(1, 2)
    k = attention.k_norm(attention.k_proj(context).view(1, 4, h, d)).transpose(1, 2)
    v = attention.v_proj(context).view(1, 4, h, d).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, *rq), apply_rotary_pos_emb(k, *rk)
    expected = attention.o_proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 6, h * d))
    with torch.no_grad():
        got = attention(x, context, tuple(r[0] for r in rq), tuple(r[0] for r in rk))
    torch.testing.assert_close(got, expected.detach(), rtol=1e-4, atol=1e-5)


def _comfy_freqs(cos, sin):
    """ComfyUI's rotation tensor [S, d/2, 2, 2] from angles' cos / sin [S, d/2]."""
    return torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)


def test_predict2_apply_rotary_pos_emb_takes_comfyuis_tensor_and_our_pair(session):
    from comfy.ldm.cosmos.predict2 import apply_rotary_pos_emb

    gen = torch.Generator().manual_seed(2)
    t = torch.randn(2, 7, 3, 8, generator=gen, dtype=torch.float64).to(torch.float16)  # [B, S, H, d]
    angles = torch.rand(7, 4, generator=gen) * 6
    cos, sin = angles.cos(), angles.sin()
    x = t.float()
    c, s = cos[None, :, None], sin[None, :, None]
    expected = torch.cat([x[..., :4] * c - x[..., 4:] * s, x[..., :4] * s + x[..., 4:] * c], dim=-1)
    freqs = _comfy_freqs(cos, sin)[:, None]  # [S, 1, d/2, 2, 2]: broadcast over heads
    out = apply_rotary_pos_emb(t, freqs)
    assert out.dtype == torch.float16 and out.shape == t.shape
    torch.testing.assert_close(out.float(), expected, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(apply_rotary_pos_emb(t, (cos, sin)), out)  # our blocks' rope_emb


def _prompt_control_wrap(network, calls):
    """comfyui-prompt-control's `wrap_forwards` (anima_couple.py): each cross-attention's `forward`
    replaced on the instance by a partial over the previous one."""
    from comfy.ldm.cosmos.predict2 import Attention as CosmosAttention

    def couple(_forward, x, context, rope_emb, transformer_options):
        calls.append((tuple(x.shape), tuple(context.shape), rope_emb, "pc_couple" in transformer_options))
        if "pc_couple" not in transformer_options:
            return _forward(x, context, rope_emb, transformer_options)
        return torch.zeros_like(_forward(x, context, rope_emb, transformer_options))

    backups = {}
    for name, block in ((n, b) for n, b in network.named_modules()
                        if "cross_attn" in n and isinstance(b, CosmosAttention)):
        backups[name] = block.forward
        block.forward = partial(couple, block.forward)
    return backups


def test_prompt_controls_cross_attention_patch_reaches_every_block(session, anima):
    x, t, context = _inputs(anima)
    with torch.no_grad():
        base = anima(x, t, context)
        calls = []
        backups = _prompt_control_wrap(anima, calls)
        try:
            same = anima(x, t, context, transformer_options={})
            zeroed = anima(x, t, context, transformer_options={"pc_couple": {}})
        finally:
            for name, forward in backups.items():
                anima.get_submodule(name).forward = forward
        after = anima(x, t, context)
    assert len(calls) == 4 and calls[0][:2] == ((2, 6, 192), (2, 5, 32))  # 2 x 3 patches of 192
    assert isinstance(calls[0][2], tuple)  # the blocks' rope_emb is passed on (ComfyUI applies it to self-attention only)
    torch.testing.assert_close(same, base)
    assert not torch.allclose(zeroed, base)  # the patched forward ran in place of the module's
    assert torch.equal(after, base)


def test_ppm_negpip_style_compute_qkv_runs_on_our_attention(session, anima):
    """ppm's NegPiP forward (negpip/anima_negpip.py): ComfyUI's compute_qkv rebuilt from `q_proj`,
    `q_norm`, `k_norm`, `v_norm`, `n_heads`, `head_dim`, `is_selfattn`, `apply_rotary_pos_emb` and
    `compute_attention`: with an all-ones mask it is the module's own forward, a negative mask
    flips the values it attends to."""
    import einops
    from comfy.ldm.cosmos.predict2 import apply_rotary_pos_emb

    def forward(self, x, context=None, rope_emb=None, transformer_options={}, mask=None):
        q = self.q_proj(x)
        context_k = x if context is None else context
        context_v = context_k if mask is None else context_k * mask
        k, v = self.k_proj(context_k), self.v_proj(context_v)
        q, k, v = (einops.rearrange(a, "b ... (h d) -> b ... h d", h=self.n_heads, d=self.head_dim) for a in (q, k, v))
        q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)
        if self.is_selfattn and rope_emb is not None:
            q, k = apply_rotary_pos_emb(q, rope_emb), apply_rotary_pos_emb(k, rope_emb)
        return self.compute_attention(q, k, v, transformer_options=transformer_options)

    gen = torch.Generator().manual_seed(8)
    x = torch.randn(1, 6, 192, generator=gen)
    context = torch.randn(1, 5, 32, generator=gen)
    cross, self_attn = anima.blocks[0].cross_attn, anima.blocks[0].self_attn
    with torch.no_grad():
        torch.testing.assert_close(forward(cross, x, context, None, {}, torch.ones(1, 5, 1)), cross(x, context, None, {}))
        flipped = forward(cross, x, context, None, {}, -torch.ones(1, 5, 1))
        torch.testing.assert_close(flipped, -cross(x, context, None, {}), rtol=1e-4, atol=1e-5)  # linear in v
        from comfy_core.families.anima.dit import rope_3d

        rope = rope_3d(1, 2, 3, anima.config.head_dim, (4.0, 4.0, 1.0), x.device)
        torch.testing.assert_close(forward(self_attn, x, None, rope, {}), self_attn(x, None, rope, {}),
                                   rtol=1e-4, atol=1e-5)


# -- comfy_extras helpers -------------------------------------------------------------------------


def test_gaussian_kernel_has_todays_signature_and_the_blur_nodes_kernel(session):
    from comfy_extras.nodes_post_processing import gaussian_kernel

    k = gaussian_kernel(5, 0.8)
    grid = np.linspace(-1, 1, 5)
    d2 = grid[:, None] ** 2 + grid[None, :] ** 2
    expected = np.exp(-d2 / (2 * 0.8 ** 2))
    assert k.shape == (5, 5) and k.dtype == torch.float32
    np.testing.assert_allclose(k.numpy(), expected / expected.sum(), rtol=1e-6)
    assert gaussian_kernel(3, 1.0, device="cpu", dtype=torch.float16).dtype == torch.float16
    assert gaussian_kernel(kernel_size=3, sigma=1.0, dtype=torch.float64).dtype == torch.float64
    import comfy_extras.nodes_post_processing as post

    assert "ImageBlur" in post.NODE_CLASS_MAPPINGS  # still the nodes' module


def test_score_tangential_damping_is_the_projection_on_the_first_singular_vector(session):
    from comfy_extras.nodes_tcfg import score_tangential_damping

    gen = torch.Generator().manual_seed(4)
    cond = torch.randn(2, 3, 4, 4, generator=gen)
    uncond = torch.randn(2, 3, 4, 4, generator=gen)
    out = score_tangential_damping(cond, uncond)
    for b in range(2):
        matrix = np.stack([uncond[b].reshape(-1).numpy(), cond[b].reshape(-1).numpy()]).astype(np.float64)
        v1 = np.linalg.svd(matrix, full_matrices=False)[2][0]
        expected = (matrix[0] @ v1) * v1
        np.testing.assert_allclose(out[b].reshape(-1).numpy(), expected, rtol=1e-4, atol=1e-5)
    import comfy_extras.nodes_tcfg as tcfg

    assert "TCFG" in tcfg.NODE_CLASS_MAPPINGS


def test_ays_and_gits_tables_and_loglinear_interp_are_the_schedulers_own(session):
    from comfy_core.sampling import schedule_tables, sigma_schedules
    from comfy_extras.nodes_align_your_steps import NOISE_LEVELS, loglinear_interp
    from comfy_extras.nodes_gits import NOISE_LEVELS as GITS_NOISE_LEVELS
    from comfy_extras.nodes_gits import loglinear_interp as gits_interp

    assert NOISE_LEVELS is schedule_tables.AYS_NOISE_LEVELS and set(NOISE_LEVELS) == {"SD1", "SDXL", "SVD"}
    assert GITS_NOISE_LEVELS is schedule_tables.GITS_NOISE_LEVELS
    assert sorted(GITS_NOISE_LEVELS)[0] == 0.80 and sorted(GITS_NOISE_LEVELS)[-1] == 1.50
    assert [len(s) for s in GITS_NOISE_LEVELS[1.2][:3]] == [3, 4, 5]  # 2, 3, 4 steps
    assert loglinear_interp is sigma_schedules.loglinear_interp is gits_interp
    levels = [10.0, 1.0, 0.1]
    out = loglinear_interp(levels, 5)  # log10: 1, 0, -1 resampled at 5 even points
    np.testing.assert_allclose(out, [10.0, 10 ** 0.5, 1.0, 10 ** -0.5, 0.1], rtol=1e-12)
    assert isinstance(out, np.ndarray)


# -- comfy.ldm.modules.diffusionmodules.util, comfy.ldm.modules.ema -----------------------------


def test_ldm_schedule_helpers(session):
    from comfy.ldm.modules.diffusionmodules import util

    betas = util.make_beta_schedule("linear", 1000, linear_start=0.00085, linear_end=0.012)
    expected = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000) ** 2
    assert betas.dtype == torch.float64
    np.testing.assert_allclose(betas.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(util.make_beta_schedule("sqrt_linear", 4, 0.1, 0.4).numpy(), [0.1, 0.2, 0.3, 0.4])
    # ComfyUI's parameter name, and its return type for the unCLIP prior's schedule (a NumPy array)
    squared = util.make_beta_schedule(schedule="squaredcos_cap_v2", n_timestep=5)
    assert isinstance(squared, np.ndarray) and squared.dtype == np.float64
    alpha_bar = [math.cos((i / 5 + 0.008) / 1.008 * math.pi / 2) ** 2 for i in range(6)]
    np.testing.assert_allclose(squared, [min(1 - alpha_bar[i + 1] / alpha_bar[i], 0.999) for i in range(5)])
    with pytest.raises(ValueError):
        util.make_beta_schedule("cubic", 10)
    cap = util.betas_for_alpha_bar(3, lambda t: 1 - t / 2)
    assert isinstance(cap, np.ndarray)
    np.testing.assert_allclose(cap, [1 - (5 / 6), 1 - (4 / 6) / (5 / 6), 1 - (3 / 6) / (4 / 6)])
    np.testing.assert_array_equal(util.make_ddim_timesteps("uniform", 4, 1000, verbose=False), [1, 251, 501, 751])
    quad = util.make_ddim_timesteps("quad", 3, 50, verbose=False)
    np.testing.assert_array_equal(quad, [int(x) + 1 for x in np.linspace(0, math.sqrt(40), 3) ** 2])
    with pytest.raises(NotImplementedError):
        util.make_ddim_timesteps("cubic", 3, 50)
    alphacums = np.array([0.9, 0.8, 0.6, 0.5, 0.3])
    sigmas, alphas, prev = util.make_ddim_sampling_parameters(alphacums, np.array([1, 3, 4]), eta=0.5, verbose=False)
    np.testing.assert_allclose(alphas, [0.8, 0.5, 0.3])
    np.testing.assert_allclose(prev, [0.9, 0.8, 0.5])
    np.testing.assert_allclose(sigmas[1], 0.5 * math.sqrt((1 - 0.8) / (1 - 0.5) * (1 - 0.5 / 0.8)))
    torch.manual_seed(0)
    repeated = util.noise_like((3, 2, 4), "cpu", repeat=True)
    assert repeated.shape == (3, 2, 4) and torch.equal(repeated[0], repeated[2])
    torch.manual_seed(0)
    assert torch.equal(util.noise_like((1, 2, 4), "cpu")[0], repeated[0])  # the same generator draw
    assert util.mean_flat(torch.arange(6.0).reshape(2, 3)).tolist() == [1.0, 4.0]
    assert isinstance(util.avg_pool_nd(2, 2), torch.nn.AvgPool2d)


def test_lit_ema_averages_trainable_parameters(session):
    from comfy.ldm.modules.ema import LitEma

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[1].bias.requires_grad_(False)
    ema = LitEma(model, decay=0.9)
    assert set(ema.m_name2s_name) == {"0.weight", "0.bias", "1.weight"} and ema.m_name2s_name["0.weight"] == "0weight"
    start = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    ema(model)  # first update: decay min(0.9, 2/11)
    d = 2 / 11
    torch.testing.assert_close(getattr(ema, "0weight"), start - (1 - d) * (start - model[0].weight))
    assert int(ema.num_updates) == 1
    fixed = LitEma(model, decay=0.5, use_num_upates=False)
    assert int(fixed.num_updates) == -1
    ema.store(model.parameters())
    ema.copy_to(model)
    torch.testing.assert_close(model[0].weight, getattr(ema, "0weight"))
    ema.restore(model.parameters())
    torch.testing.assert_close(model[0].weight, start + 1)
    with pytest.raises(ValueError):
        LitEma(model, decay=1.5)


# -- comfy.model_management.unload_model_and_clones ----------------------------------------------


def test_unload_model_and_clones_offloads_the_model_and_its_clones_only(session):
    import comfy.model_management as mm
    from comfy_core.memory import MemoryManager
    from comfy_core.patching import ModelPatcher as Patcher

    session.env.memory = MemoryManager(device="cpu")
    a = Patcher(torch.nn.Linear(4, 3))
    a_clone = a.clone()
    b = Patcher(torch.nn.Linear(2, 2))
    extra = Patcher(torch.nn.Linear(3, 3))
    mm.load_models_gpu([a, b, extra])
    mm.load_models_gpu([a_clone])
    # one record per base module here: the clone that used it last stands for both
    assert set(map(id, mm.loaded_models())) == set(map(id, [a_clone, b, extra]))
    mm.unload_model_and_clones(a)  # a's clone's record goes with it
    assert set(map(id, mm.loaded_models())) == {id(b), id(extra)}
    # its additional models go too (the default), or stay
    b.set_additional_models("test", [extra])
    mm.load_models_gpu([a])
    mm.unload_model_and_clones(b, unload_additional_models=False)
    assert set(map(id, mm.loaded_models())) == {id(a), id(extra)}
    mm.load_models_gpu([b])
    mm.unload_model_and_clones(b, all_devices=True)
    assert [id(m) for m in mm.loaded_models()] == [id(a)]


# -- comfy.sd.save_checkpoint and comfy_extras.nodes_model_merging.save_checkpoint ---------------


def _read(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(tiny_sd1_ckpt)


def test_sd_save_checkpoint_writes_the_checkpoint_with_extra_keys(session, sd1, tmp_path):
    import comfy.sd
    from comfy_core.saving import checkpoint_tensors

    model, clip, vae = sd1
    path = tmp_path / "out.safetensors"
    comfy.sd.save_checkpoint(str(path), model, clip, vae, metadata={"a": "b"}, extra_keys={"x.marker": torch.ones(2)})
    tensors, metadata = _read(path)
    assert metadata == {"a": "b"}
    with checkpoint_tensors(model, clip, vae) as expected:
        assert set(tensors) == set(expected) | {"x.marker"}
        key = next(k for k in expected if k.startswith("model.diffusion_model."))
        assert torch.equal(tensors[key], expected[key])
    assert torch.equal(tensors["x.marker"], torch.ones(2))


def test_checkpoint_save_writes_through_a_replaced_comfy_sd_save_checkpoint(session, sd1, tmp_path):
    """art-venture's AVCheckpointSave: `comfy.sd.save_checkpoint` replaced by a wrapper around the
    original, CheckpointSave run, the original put back."""
    import comfy.sd
    from nodes.model_save import checkpoint_save
    from tests.nodes.node_context import running_node

    model, clip, vae = sd1
    original = comfy.sd.save_checkpoint
    calls = []

    def fp16(output_path, model, clip=None, vae=None, clip_vision=None, metadata=None, extra_keys={}):
        calls.append((output_path, clip_vision, sorted(metadata), dict(extra_keys)))
        return original(output_path, model, clip, vae, clip_vision, metadata={**metadata, "fp16": "yes"},
                        extra_keys=extra_keys)

    comfy.sd.save_checkpoint = fp16
    try:
        assert comfy.sd.save_checkpoint is fp16 and session.extension_points.save_checkpoint is fp16
        with running_node("CheckpointSave", "9", env=session.env):
            checkpoint_save(model, clip, vae, "checkpoints/av", prompt={"1": {}})
    finally:
        comfy.sd.save_checkpoint = original
    path = session.env.output_dir / "checkpoints" / "av_00001_.safetensors"
    assert calls == [(str(path), None, ["modelspec.predict_key", "prompt"], {})]  # SD1 is eps: no markers
    _, metadata = _read(path)
    assert metadata == {"modelspec.predict_key": "epsilon", "prompt": '{"1": {}}', "fp16": "yes"}
    del comfy.sd.save_checkpoint  # the built-in again, as without a pack
    with running_node("CheckpointSave", "9", env=session.env):
        checkpoint_save(model, clip, vae, "checkpoints/av")
    assert _read(session.env.output_dir / "checkpoints" / "av_00002_.safetensors")[1] == {
        "modelspec.predict_key": "epsilon", "prompt": ""}
    assert len(calls) == 1


def test_nodes_model_merging_save_checkpoint_is_checkpoint_saves_writer(session, sd1, tmp_path):
    """mikey_nodes' CheckpointSaveModelOnly: no CLIP, its own output folder."""
    import comfy.sd
    import comfy_extras.nodes_model_merging as merging

    model, _, vae = sd1
    seen = []
    original = comfy.sd.save_checkpoint
    comfy.sd.save_checkpoint = lambda *a, **k: seen.append(a[0]) or original(*a, **k)
    try:
        merging.save_checkpoint(model, vae=vae, filename_prefix="mine/ckpt", output_dir=str(tmp_path / "out"),
                                prompt=None, extra_pnginfo={"workflow": {"n": 1}})
    finally:
        del comfy.sd.save_checkpoint
    path = tmp_path / "out" / "mine" / "ckpt_00001_.safetensors"
    assert seen == [str(path)]
    tensors, metadata = _read(path)
    assert metadata == {"modelspec.predict_key": "epsilon", "prompt": "", "workflow": '{"n": 1}'}
    assert any(k.startswith("first_stage_model.") for k in tensors)
    assert not any(k.startswith("cond_stage_model.") for k in tensors)
    assert "CheckpointSave" in merging.NODE_CLASS_MAPPINGS


def test_validate_node_input_is_comfyuis(session):
    # ComfyUI-sonar probes it to declare union noise types
    from comfy_execution.validation import validate_node_input

    class AnyType(str):
        def __ne__(self, other):
            return False

    assert validate_node_input("IMAGE", "IMAGE") and not validate_node_input("IMAGE", "MASK")
    assert validate_node_input("SONAR_CUSTOM_NOISE", "SONAR_CUSTOM_NOISE, OCS_NOISE")
    assert validate_node_input("A,B", "B, C") and not validate_node_input("A,B", "B, C", strict=True)
    assert validate_node_input("B", "B, C", strict=True)
    assert validate_node_input(AnyType("*"), "LATENT") and not validate_node_input(["a"], "COMBO")


def test_raise_non_oom_and_intermediate_dtype(session):
    # Comfyui_TTP_Toolset's tiled upscale retries on out-of-memory only
    import comfy.model_management as mm

    mm.raise_non_oom(torch.OutOfMemoryError("CUDA out of memory"))  # swallowed: the caller retries smaller
    with pytest.raises(ValueError, match="not memory"):
        mm.raise_non_oom(ValueError("not memory"))
    assert mm.is_oom(torch.OutOfMemoryError("x")) and not mm.is_oom(RuntimeError("x"))
    assert mm.intermediate_dtype() == torch.float32


def test_latent_formats_of_families_not_implemented_are_comfyuis_data(session):
    # ComfyUI-bleh lists Mochi and Cosmos1CV8x8x8 at import; jankhidiffusion checks SDXL_Playground_2_5
    import comfy.latent_formats as lf

    mochi, cosmos, playground = lf.Mochi(), lf.Cosmos1CV8x8x8(), lf.SDXL_Playground_2_5()
    assert (mochi.latent_channels, mochi.latent_dimensions, len(mochi.latent_rgb_factors)) == (12, 3, 12)
    assert (cosmos.latent_channels, cosmos.latent_dimensions, cosmos.scale_factor) == (16, 3, 1.0)
    assert playground.latents_mean.shape == (1, 4, 1, 1) and mochi.latents_std.shape == (1, 12, 1, 1, 1)
    z = torch.randn(1, 4, 2, 2)
    expected = (z - playground.latents_mean) * 0.5 / playground.latents_std  # ComfyUI's process_in
    torch.testing.assert_close(playground.process_in(z), expected)
    torch.testing.assert_close(playground.process_out(playground.process_in(z)), z)
    assert not isinstance(playground, lf.SDXL) and playground.taesd_decoder_name == "taesdxl_decoder"


def test_a_models_layer_hooks_copy_onto_a_packs_layer(session):
    """jankhidiffusion's RAUNet: a strided copy of a UNet Downsample's convolution, built with
    `openaimodel.ops.conv_nd`, takes the model layer's `comfy_cast_weights`, `weight_function`,
    `bias_function`, weight and bias, and convolves with them."""
    import torch.nn.functional as F
    from comfy.ldm.modules.diffusionmodules import openaimodel

    block = openaimodel.Downsample(4, True, dims=2, out_channels=4)
    tempop = openaimodel.ops.conv_nd(2, 4, 4, 3, stride=(4, 4), padding=(2, 2), dilation=(2, 2))
    for key in ("comfy_cast_weights", "weight_function", "bias_function", "weight", "bias"):
        setattr(tempop, key, getattr(block.op, key))
    x = torch.randn(1, 4, 16, 16)
    out = tempop(x)
    torch.testing.assert_close(out, F.conv2d(x, block.op.weight, block.op.bias, stride=4, padding=2, dilation=2))
    block.op.weight_function.append(lambda w: w * 0)  # the copied list is the model layer's own
    assert torch.equal(tempop(x), F.conv2d(x, block.op.weight * 0, block.op.bias, stride=4, padding=2, dilation=2))


def test_execution_format_value_and_its_nodes_module(session):
    """`execution.format_value` (Workflow-Component imports it) reports values as ComfyUI's
    execution errors do; `execution.nodes` is the `nodes` module packs import (Fill-Nodes reads
    `execution.nodes.NODE_CLASS_MAPPINGS`)."""
    import execution
    import nodes

    assert [execution.format_value(v) for v in (None, 3, 2.5, True, "a")] == [None, 3, 2.5, True, "a"]
    assert execution.format_value([1, 2]) == "[1, 2]" and execution.format_value(torch.zeros(1)) == str(torch.zeros(1))
    assert execution.nodes is nodes and execution.nodes.MAX_RESOLUTION == nodes.MAX_RESOLUTION > 8000
