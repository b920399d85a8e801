"""Wan Dancer's network (comfy_core/families/wan/dancer.py) on tiny random weights
(tests/fixtures/template_models_wan_dancer.py): detection (fused and split music q/k/v) and family,
then against the equations composed here (ComfyUI's `WanDancerModel`): the music encoder (projection,
pre-norm layers with 1-D RoPE attention and a GELU FFN, bilinear resize to 8 tokens a latent frame),
the music injection (each group of video tokens attends to one music token, so it gets
`scale * o(v(token))`), the reference CLIP-vision tokens before the first frame's, and the frame-rate
switch (global patch embedding / head, RoPE positions on the 30 fps clock). The Wan blocks are the
module's own (tested against diffusers in test_wan_dit.py)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.dancer import DancerError, MusicInjector, WanDancerModel
from comfy_core.families.wan.dancer_family import DancerConditions
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel
from tests.fixtures.template_models_wan_dancer import MUSIC, tiny_dancer_state_dict
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX

TOL = 1e-4
DIM, TEXT, IMAGE = 256, 32, 48


def _split(state: dict) -> dict:
    out = dict(state)
    for i in range(MUSIC["music_layers"]):
        p = f"music_encoder.{i}.self_attn."
        for suffix in ("weight", "bias"):
            for name, part in zip(("q_proj", "k_proj", "v_proj"), out.pop(p + "in_proj_" + suffix).chunk(3)):
                out[f"{p}{name}.{suffix}"] = part.clone()
    return out


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_dancer_state_dict(seed=3)


@pytest.fixture(scope="module")
def model(state) -> WanDancerModel:
    net = WanDancerModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


def test_detection_layouts_family_and_comfy_config(state, model):
    config = WanConfig.detect_from_weights(state)
    assert (config.model_type, config.variant, config.in_dim, config.music_feature_dim, config.music_dim,
            config.music_ffn_dim, config.music_layers, config.music_fused_qkv) == (
        "wandancer", "wandancer", 36, 35, 32, 48, 2, True)
    assert isinstance(model, WanDancerModel) and model.config.has_image_embedding
    split = WanConfig.detect_from_weights(_split(state))
    assert split.model_type == "wandancer" and not split.music_fused_qkv
    unet = config.comfy_unet_config()
    assert unet["model_type"] == "wandancer" and not any(k.startswith("music_") for k in unet)
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    match = default_registry().detect_diffusion_model(header)
    assert match.family.name == "wan22_dancer" and match.family.comfy_model_class == "WAN22_WanDancer"
    assert match.family.supported_model.unet_config["model_type"] == "wandancer"
    missing = {k: v for k, v in state.items() if not k.startswith("music_injector.injector.7.")}
    with pytest.raises(WanConfigError, match="7 music injectors"):
        WanConfig.detect_from_weights(missing)
    # a plain i2v file stays i2v
    plain = {k: v for k, v in state.items() if not k.startswith(("music_", "patch_embedding_global", "head_global",
                                                                  "img_emb_refimage"))}
    assert WanConfig.detect_from_weights(plain).model_type == "i2v"


def test_fused_and_split_music_attention_agree(state, model):
    split_state = _split(state)
    split = WanDancerModel.from_config(WanConfig.detect_from_weights(split_state))
    split.load_state_dict(split_state, strict=True)
    audio = torch.randn(1, 20, 35, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.music_tokens(audio, 2, 1, torch.float32),
                                   split.eval().music_tokens(audio, 2, 1, torch.float32), atol=1e-6, rtol=1e-6)


def _rope_1d(x: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotate channel pairs (2i, 2i+1) of `x` `[B, S, H, D]` by angle `s * theta^(-2i/D)`."""
    d = x.shape[-1]
    pos = torch.arange(x.shape[1], dtype=torch.float64)[:, None]
    angle = pos * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)      # [S, D/2]
    cos, sin = torch.cos(angle)[None, :, None].float(), torch.sin(angle)[None, :, None].float()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


def _music_reference(state: dict, audio: torch.Tensor, frames: int) -> torch.Tensor:
    x = F.linear(audio, state["music_projection.weight"], state["music_projection.bias"])
    b, s, c = x.shape
    heads = 4
    for i in range(MUSIC["music_layers"]):
        p = f"music_encoder.{i}."
        h = F.layer_norm(x, (c,), state[p + "norm1.weight"], state[p + "norm1.bias"], 1e-5)
        q, k, v = F.linear(h, state[p + "self_attn.in_proj_weight"], state[p + "self_attn.in_proj_bias"]).chunk(3, -1)
        q = _rope_1d(q.view(b, s, heads, -1)).transpose(1, 2)
        k = _rope_1d(k.view(b, s, heads, -1)).transpose(1, 2)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c // heads), dim=-1)
        attn = (weights @ v.view(b, s, heads, -1).transpose(1, 2)).transpose(1, 2).reshape(b, s, c)
        x = x + F.linear(attn, state[p + "self_attn.out_proj.weight"], state[p + "self_attn.out_proj.bias"])
        h = F.layer_norm(x, (c,), state[p + "norm2.weight"], state[p + "norm2.bias"], 1e-5)
        h = F.gelu(F.linear(h, state[p + "linear1.weight"], state[p + "linear1.bias"]))
        x = x + F.linear(h, state[p + "linear2.weight"], state[p + "linear2.bias"])
    # bilinear with half-pixel centres to [8 frames, DIM]: separable linear interpolation
    def resize(t: torch.Tensor, size: int, dim: int) -> torch.Tensor:
        n = t.shape[dim]
        src = ((torch.arange(size, dtype=torch.float64) + 0.5) * n / size - 0.5).clamp(min=0)
        lo = src.floor().long().clamp(max=n - 1)
        hi = (lo + 1).clamp(max=n - 1)
        w = (src - lo).float()
        shape = [1] * t.ndim
        shape[dim] = size
        return t.index_select(dim, lo) * (1 - w).view(shape) + t.index_select(dim, hi) * w.view(shape)
    return resize(resize(x, 8 * frames, 1), DIM, 2)


def test_music_encoder_equations(state, model):
    audio = torch.randn(1, 23, 35, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        tokens = model.music_tokens(audio, 3, 2, torch.float32)
        expected = _music_reference(state, audio, 3)
    assert tokens.shape == (2, 24, DIM)
    torch.testing.assert_close(tokens, expected.expand(2, -1, -1), atol=TOL, rtol=TOL)
    with pytest.raises(DancerError, match="35"):
        model.music_tokens(torch.zeros(1, 5, 34), 1, 1, torch.float32)


def test_music_injection_adds_scaled_value_of_its_token(state):
    torch.manual_seed(0)
    injector = MusicInjector(DIM, 2, (0, 4), False)
    for p in injector.parameters():
        torch.nn.init.normal_(p, std=0.05)
    x = torch.randn(2, 48, DIM)
    music = torch.randn(2, 8, DIM)
    inj = injector.injector[1]
    with torch.no_grad():
        out = injector(x, 4, music, seq_len=32, scale=0.7)
        value = inj.o(inj.v(music))                                              # [B, 8, C]: softmax over 1 key is 1
    expected = x.clone()
    expected[:, :32] += 0.7 * value.repeat_interleave(4, dim=1)
    torch.testing.assert_close(out, expected, atol=TOL, rtol=TOL)
    assert torch.equal(injector(x, 1, music, seq_len=32), x)                    # no injector after block 1
    with pytest.raises(DancerError, match="music groups"):
        injector(x, 0, music, seq_len=36)


def _inputs(frames: int = 2, h: int = 8, w: int = 8):
    g = torch.Generator().manual_seed(7)
    return (torch.randn(1, 36, frames, h, w, generator=g), torch.tensor([500.0]),
            torch.randn(1, 5, TEXT, generator=g), torch.randn(1, 4, IMAGE, generator=g),
            torch.randn(1, 3, IMAGE, generator=g), torch.randn(1, 20, 35, generator=g))


def test_forward_composed_from_blocks(state, model):
    """The whole forward at 10 fps: global patch embedding, RoPE frames 0 and 5 (2 frames x 3 - 1),
    context [ref, clip, text] with 7 image tokens, injection after block 0 only, the global head."""
    x, t, context, clip, ref, audio = _inputs()
    with torch.no_grad():
        out = model(x, t, context, clip_fea=clip, clip_fea_ref=ref, audio_embed=audio, fps=10.0,
                    audio_inject_scale=0.5)
        tokens = model.patch_embedding_global(x).flatten(2).transpose(1, 2)      # [1, 2*4*4, C]
        e, e0 = model.time_modulation(t, tokens.dtype)
        ids = torch.zeros(2, 4, 4, 3)
        ids[..., 0] = torch.tensor([0.0, 5.0]).view(-1, 1, 1)
        ids[..., 1] = torch.arange(4.0).view(1, -1, 1)
        ids[..., 2] = torch.arange(4.0).view(1, 1, -1)
        freqs = model.rope_embedder(ids.reshape(1, -1, 3)).movedim(1, 2)
        ctx = torch.cat([model.img_emb_refimage(ref), model.img_emb(clip), model.text_embedding(context)], dim=1)
        music = _music_reference(state, audio, 2)
        h = model.blocks[0](tokens, e=e0, freqs=freqs, context=ctx, context_img_len=7)
        inj = model.music_injector.injector[0]
        h = h + 0.5 * inj.o(inj.v(music)).repeat_interleave(2, dim=1)            # 32 tokens, 16 groups of 2
        h = model.blocks[1](h, e=e0, freqs=freqs, context=ctx, context_img_len=7)
        expected = model.unpatchify(model.head_global(h, e), (2, 4, 4))
    torch.testing.assert_close(out, expected, atol=TOL, rtol=TOL)


def test_thirty_fps_uses_the_local_embedding_and_scale_zero_no_music(model):
    x, t, context, clip, ref, audio = _inputs()
    with torch.no_grad():
        plain = WanModel.forward(model, x, t, context, clip_fea=clip)           # the i2v path: Wan's RoPE, head
        local = model(x, t, context, clip_fea=clip, fps=30.0)
        silent = model(x, t, context, clip_fea=clip, audio_embed=audio, fps=29.6, audio_inject_scale=0.0)
        music = model(x, t, context, clip_fea=clip, audio_embed=audio, fps=30.0)
        other = model(x, t, context, clip_fea=clip, fps=24.0)
    torch.testing.assert_close(local, plain, atol=TOL, rtol=TOL)
    torch.testing.assert_close(silent, plain, atol=TOL, rtol=TOL)
    assert not torch.allclose(music, plain, atol=1e-3) and not torch.allclose(other, plain, atol=1e-3)


def test_conditions_map_comfy_keys():
    model = SimpleNamespace(process_latent_in=lambda x: x)
    states = torch.randn(1, 257, 1280)
    out = DancerConditions().extra_conds(model, audio_embed=torch.ones(1, 9, 35), fps=10,
                                         clip_vision_output_ref=SimpleNamespace(penultimate_hidden_states=states),
                                         audio_inject_scale=0.5)
    assert out["clip_fea_ref"] is states and out["fps"] == 10.0 and out["audio_inject_scale"] == 0.5
    assert out["audio_embed"].shape == (1, 9, 35) and "clip_fea" not in out
    assert DancerConditions().image_to_video


def test_a_loaded_file_samples_with_the_dancer_inputs(tmp_path, monkeypatch):
    """The template's file (scaled fp8, fused music q/k/v) loads as the Dancer family, and a sampling run
    hands the network WanDancerVideo's values: music features, reference CLIP states, fps, scale."""
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.sampling import ksampler
    from tests.fixtures.template_models_wan_dancer import WRITERS_WAN_DANCER
    from tests.fixtures.wan_template_models import IMAGE_WIDTH, TEXT_WIDTH

    path = tmp_path / "wan2.2_dancer_14b_local_fp8_scaled.safetensors"
    WRITERS_WAN_DANCER["unet_wan_dancer_scaled"](path)
    model = load_diffusion_model(path)
    assert model.model.family.name == "wan22_dancer" and isinstance(model.model.diffusion_model, WanDancerModel)
    seen: list[dict] = []
    original = WanDancerModel.forward_orig

    def spy(self, *args, **kwargs):
        seen.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(WanDancerModel, "forward_orig", spy)
    g = torch.Generator().manual_seed(4)
    states = SimpleNamespace(penultimate_hidden_states=torch.randn(1, 3, IMAGE_WIDTH, generator=g))
    values = {"audio_embed": torch.randn(1, 12, 35, generator=g), "fps": 10.0, "audio_inject_scale": 0.5,
              "clip_vision_output": states, "clip_vision_output_ref": states}
    text = torch.randn(1, 4, TEXT_WIDTH, generator=g)
    latent = {"samples": torch.zeros(1, 16, 2, 8, 8)}

    def run(extra: dict) -> torch.Tensor:
        conds = [[text, dict(extra)]], [[text * 0.5, dict(extra)]]
        return ksampler(model, 1, 2, 1.0, "euler", "simple", *conds, latent)[0]["samples"]

    with_music = run(values)
    kwargs = seen[-1]
    assert kwargs["audio_embed"].shape[-2:] == (12, 35) and kwargs["fps"] == 10.0
    assert float(kwargs["audio_inject_scale"]) == 0.5 and kwargs["clip_fea_ref"].shape[-1] == IMAGE_WIDTH
    silent = run({k: v for k, v in values.items() if k != "audio_embed"})
    assert torch.isfinite(with_music).all() and (with_music - silent).abs().max() > 1e-4
