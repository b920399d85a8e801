"""The OmniGen2 family (comfy_core/families/omnigen2): detection from names and shapes, the network
against an independent re-computation (diffusers 0.42.1 has no OmniGen2 transformer, only OmniGen
v1's), ComfyUI's policy and conditions, two sampling steps with and without reference latents, and
the Qwen2.5-VL-3B text encoder (CLIPLoader type "omnigen2") against transformers' Qwen2.5-VL text model.

The re-computation below is written from OmniGen2's description (ComfyUI's omnigen2.py behaviour)
with its own pieces: RoPE as complex rotations (`torch.polar`), attention as an explicit softmax,
norms and the patch order by hand, the weights read from the state dict by name."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.omnigen2 import OmniGen2Conditions
from comfy_core.families.omnigen2.clip import LLAMA_TEMPLATE, OMNIGEN2_TEXT_ENCODERS, Omnigen2Model, Omnigen2Tokenizer
from comfy_core.families.omnigen2.dit import OmniGen2Config, OmniGen2ConfigError, OmniGen2InputError
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.omnigen2_files import (TEXT_WIDTH, UNET, qwen3b_reference_model, tiny_omnigen2_params,
                                           tiny_omnigen2_state_dict, tiny_qwen25vl_3b_state_dict, write_omnigen2_unet,
                                           write_qwen25vl_3b_file)


def _header(state: dict) -> dict:
    return {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in state.items()}


# --- the independent re-computation ---------------------------------------------------------------------


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _linear(sd: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))


def _rotations(positions: list[tuple[int, int, int]], axes: list[int], theta: float = 10000.0) -> torch.Tensor:
    """Complex rotations [L, D/2]: per axis, frequency i of d channels is theta^(-2i/d)."""
    pos = torch.tensor(positions, dtype=torch.float64)
    parts = []
    for axis, d in enumerate(axes):
        freqs = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = pos[:, axis, None] * freqs[None]
        parts.append(torch.polar(torch.ones_like(angles), angles))
    return torch.cat(parts, dim=-1).to(torch.complex64)


def _rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x [B, L, H, D] rotated pairwise by rot [L, D/2]."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * rot[None, :, None]).flatten(-2)


def _attention(sd: dict, name: str, x: torch.Tensor, rot: torch.Tensor, p: dict) -> torch.Tensor:
    b, n, _ = x.shape
    d = p["head"]
    q = _rms(_linear(sd, name + ".to_q", x).view(b, n, p["heads"], d), sd[name + ".norm_q.weight"])
    k = _rms(_linear(sd, name + ".to_k", x).view(b, n, p["kv_heads"], d), sd[name + ".norm_k.weight"])
    v = _linear(sd, name + ".to_v", x).view(b, n, p["kv_heads"], d)
    q, k = _rotate(q, rot), _rotate(k, rot)
    group = p["heads"] // p["kv_heads"]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    weights = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    out = torch.einsum("bhqk,bkhd->bqhd", weights.softmax(-1), v).reshape(b, n, -1)
    return _linear(sd, name + ".to_out.0", out)


def _block(sd: dict, name: str, x: torch.Tensor, rot: torch.Tensor, temb: torch.Tensor | None, p: dict) -> torch.Tensor:
    if temb is not None:
        scale_a, gate_a, scale_f, gate_f = _linear(sd, name + ".norm1.linear", F.silu(temb)).chunk(4, dim=-1)
        h = _rms(x, sd[name + ".norm1.norm.weight"]) * (1 + scale_a[:, None])
    else:
        h = _rms(x, sd[name + ".norm1.weight"])
    attn = _rms(_attention(sd, name + ".attn", h, rot, p), sd[name + ".norm2.weight"])
    x = x + (torch.tanh(gate_a)[:, None] * attn if temb is not None else attn)
    h = _rms(x, sd[name + ".ffn_norm1.weight"])
    if temb is not None:
        h = h * (1 + scale_f[:, None])
    gated = F.silu(_linear(sd, name + ".feed_forward.linear_1", h)) * _linear(sd, name + ".feed_forward.linear_3", h)
    ff = _linear(sd, name + ".feed_forward.linear_2", gated)
    ff = _rms(ff, sd[name + ".ffn_norm2.weight"])
    return x + (torch.tanh(gate_f)[:, None] * ff if temb is not None else ff)


def _patches(x: torch.Tensor) -> torch.Tensor:
    """[B, C, H, W] -> [B, H/2*W/2, 4C]: tokens row by row, each patch (row, col, channel)."""
    b, c, h, w = x.shape
    out = torch.empty(b, (h // 2) * (w // 2), 4 * c)
    for i in range(h // 2):
        for j in range(w // 2):
            patch = x[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2]  # [B, C, 2, 2]
            out[:, i * (w // 2) + j] = patch.permute(0, 2, 3, 1).reshape(b, -1)
    return out


def _grid(shift: int, rows: int, cols: int) -> list[tuple[int, int, int]]:
    return [(shift, r, c) for r in range(rows) for c in range(cols)]


def reference_forward(sd: dict, p: dict, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                      refs: list[torch.Tensor] = ()) -> torch.Tensor:
    """OmniGen2's prediction as ComfyUI returns it (negated), latents padded to even sizes."""
    b, c, h, w = x.shape
    pad = lambda t: F.pad(t, (0, t.shape[-1] % 2, 0, t.shape[-2] % 2), mode="circular")  # noqa: E731
    x = pad(x)
    refs = [pad(r) for r in refs]
    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000.0 * ((1.0 - sigma)[:, None] * freqs[None])
    sinusoid = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    temb = _linear(sd, "time_caption_embed.timestep_embedder.linear_2",
                   F.silu(_linear(sd, "time_caption_embed.timestep_embedder.linear_1", sinusoid)))
    text = _linear(sd, "time_caption_embed.caption_embedder.1",
                   _rms(context, sd["time_caption_embed.caption_embedder.0.weight"]))
    lt = context.shape[1]
    text_pos = [(i, i, i) for i in range(lt)]
    ref_pos, shift, ref_tokens = [], lt, []
    for j, ref in enumerate(refs):
        rows, cols = ref.shape[-2] // 2, ref.shape[-1] // 2
        ref_pos += _grid(shift, rows, cols)
        ref_tokens.append(_linear(sd, "ref_image_patch_embedder", _patches(ref)) + sd["image_index_embedding"][j])
        shift += max(rows, cols)
    hp, wp = x.shape[-2] // 2, x.shape[-1] // 2
    img_pos = _grid(shift, hp, wp)
    axes = p["axes"]
    for i in range(p["refiners"]):
        text = _block(sd, f"context_refiner.{i}", text, _rotations(text_pos, axes), None, p)
    img = _linear(sd, "x_embedder", _patches(x))
    for i in range(p["refiners"]):
        img = _block(sd, f"noise_refiner.{i}", img, _rotations(img_pos, axes), temb, p)
    if refs:
        ref_seq = torch.cat(ref_tokens, dim=1)
        for i in range(p["refiners"]):
            ref_seq = _block(sd, f"ref_image_refiner.{i}", ref_seq, _rotations(ref_pos, axes), temb, p)
        img = torch.cat([ref_seq, img], dim=1)
    seq = torch.cat([text, img], dim=1)
    rot = _rotations(text_pos + ref_pos + img_pos, axes)
    for i in range(p["layers"]):
        seq = _block(sd, f"layers.{i}", seq, rot, temb, p)
    scale = _linear(sd, "norm_out.linear_1", F.silu(temb))
    seq = F.layer_norm(seq, (seq.shape[-1],), eps=1e-6) * (1 + scale[:, None])
    tokens = _linear(sd, "norm_out.linear_2", seq)[:, -hp * wp:]
    out = torch.empty(b, c, 2 * hp, 2 * wp)
    for i in range(hp):
        for j in range(wp):
            out[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = tokens[:, i * wp + j].view(b, 2, 2, c).permute(0, 3, 1, 2)
    return -out[:, :, :h, :w]


# --- config and detection -------------------------------------------------------------------------------


def test_config_is_read_from_names_and_shapes():
    config = OmniGen2Config.detect_from_weights(_header(tiny_omnigen2_state_dict(prefix=UNET)), UNET)
    p = tiny_omnigen2_params()
    assert (config.hidden_size, config.num_attention_heads, config.num_kv_heads) == (48, 4, 2)
    assert (config.num_layers, config.num_refiner_layers, config.ffn_hidden) == (2, 1, p["ffn"])
    assert (config.text_feat_dim, config.t_hidden, config.in_channels, config.out_channels) == (TEXT_WIDTH, 48, 16, 16)
    assert config.axes_dim_rope == (4, 4, 4) and config.index_embeddings == 5
    assert (config.rope_theta, config.timestep_scale) == (10000.0, 1000.0)
    unet_config = config.comfy_unet_config()
    assert unet_config["image_model"] == "omnigen2" and unet_config["axes_lens"] == [1024, 1664, 1664]
    assert unet_config["out_channels"] is None and unet_config["hidden_size"] == 48


def test_inconsistent_weights_are_typed_errors():
    state = tiny_omnigen2_state_dict()
    missing = {k: v for k, v in state.items() if not k.startswith("context_refiner.")}
    with pytest.raises(OmniGen2ConfigError, match="refiner depths differ"):
        OmniGen2Config.detect_from_weights(_header(missing))
    wrong = dict(state)
    wrong["ref_image_patch_embedder.weight"] = torch.zeros(48, 60)
    with pytest.raises(OmniGen2ConfigError, match="ref_image_patch_embedder"):
        OmniGen2Config.detect_from_weights(_header(wrong))
    del wrong["layers.0.attn.norm_q.weight"]
    wrong["ref_image_patch_embedder.weight"] = state["ref_image_patch_embedder.weight"]
    with pytest.raises(OmniGen2ConfigError, match="layers.0.attn.norm_q.weight' is missing"):
        OmniGen2Config.detect_from_weights(_header(wrong))
    with pytest.raises(OmniGen2ConfigError, match="key/value heads"):
        OmniGen2Config(hidden_size=48, num_attention_heads=4, num_kv_heads=3, axes_dim_rope=(4, 4, 4))


def test_single_and_split_files_are_detected_as_omnigen2_not_lumina2(tmp_path):
    from comfy_core.families.lumina2.keys import is_diffusers_lumina2
    from comfy_core.split.diffusion_model import load_diffusion_model

    registry = default_registry()
    single = _header(tiny_omnigen2_state_dict(prefix=UNET))
    assert registry.detect(single).family.name == "omnigen2"
    bare = tiny_omnigen2_state_dict()
    # OmniGen2's names share diffusers' Lumina 2 caption embedder and to_q: not a Lumina 2 file
    assert not is_diffusers_lumina2(bare)
    model = load_diffusion_model(write_omnigen2_unet(tmp_path, seed=2))
    assert model.model.family.name == "omnigen2"
    assert type(model.model.diffusion_model).__name__ == "OmniGen2Transformer2DModel"  # ComfyUI's class name


# --- numerics -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def state():
    return tiny_omnigen2_state_dict(seed=1)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_omnigen2_unet(tmp_path_factory.mktemp("omnigen2"), seed=1))


def _params() -> dict:
    p = tiny_omnigen2_params()
    p["axes"] = [4, 4, 4]
    return p


@pytest.mark.parametrize("size, ref_sizes", [((6, 8), []), ((6, 8), [(4, 6), (8, 4)]), ((7, 5), [(5, 3)])])
def test_network_matches_the_recomputation_on_weights_loaded_from_a_comfyui_file(loaded, state, size, ref_sizes):
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 16, *size, generator=gen)
    sigma = torch.tensor([0.7, 0.15])
    context = torch.randn(2, 9, TEXT_WIDTH, generator=gen)
    refs = [torch.randn(2, 16, *s, generator=gen) for s in ref_sizes]
    with torch.no_grad():
        ours = network(x, sigma, context, 9, ref_latents=refs or None)
        theirs = reference_forward(state, _params(), x, sigma, context, refs)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4
    if refs:  # the references change the image
        with torch.no_grad():
            plain = network(x, sigma, context, 9)
        assert (plain - ours).abs().max() > 1e-3


def test_bad_inputs_are_typed_errors(loaded):
    network = loaded.model.diffusion_model
    x, sigma, context = torch.randn(1, 16, 4, 4), torch.tensor([0.5]), torch.randn(1, 5, TEXT_WIDTH)
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    with pytest.raises(OmniGen2InputError, match="unpadded"):
        network(x, sigma, context, 3, attention_mask=mask)
    with pytest.raises(OmniGen2InputError, match="at most 5"):
        network(x, sigma, context, 5, ref_latents=[torch.randn(1, 16, 2, 2)] * 6)
    with pytest.raises(OmniGen2InputError, match="reference latent 0"):
        network(x, sigma, context, 5, ref_latents=[torch.randn(2, 16, 2, 2)])


# --- policy, conditions, sampling -----------------------------------------------------------------------


def test_family_policy_is_comfyuis(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    model = loaded.model
    assert type(model.model_sampling) is FlowModelSampling and model.model_sampling.shift == 2.6
    config = model.model_config
    assert type(config).__name__ == "Omnigen2" and config.memory_usage_factor == 1.95
    assert config.unet_config["image_model"] == "omnigen2" and config.sampling_settings == {"multiplier": 1.0,
                                                                                             "shift": 2.6}
    family = default_registry().get("omnigen2")
    assert family.comfy_model_class == "Omnigen2" and family.inference_dtypes == ("bf16", "fp32")
    assert family.vae_prefix == "vae." and family.geometry.latent_channels == 16
    assert family.latent_format.scale_factor == pytest.approx(0.3611) and family.text_encoders is OMNIGEN2_TEXT_ENCODERS


def test_conditions_are_model_base_omnigen2s(loaded):
    conditions = OmniGen2Conditions()
    ref = torch.randn(1, 16, 4, 4)
    out = conditions.extra_conds(loaded.model, cross_attn=torch.zeros(1, 6, TEXT_WIDTH), reference_latents=[ref],
                                 attention_mask=torch.ones(1, 6))
    assert set(out) == {"num_tokens", "ref_latents"} and out["num_tokens"] == 6  # an all-ones mask is left out
    assert torch.allclose(out["ref_latents"][0], loaded.model.process_latent_in(ref))
    masked = conditions.extra_conds(loaded.model, cross_attn=torch.zeros(1, 6, TEXT_WIDTH),
                                    attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]))
    assert masked["num_tokens"] == 4 and masked["attention_mask"].shape == (1, 6)


def test_unetloader_file_samples_two_steps_with_and_without_references(loaded):
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 11, TEXT_WIDTH, generator=gen), {"attention_mask": torch.ones(1, 11)}]]
    negative = [[torch.randn(1, 5, TEXT_WIDTH, generator=gen), {"attention_mask": torch.ones(1, 5)}]]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(1, 16, 8, 8)
    plain = sample(loaded, noise, 2, 4.0, "euler", "simple", positive, negative, empty)
    assert plain.shape == (1, 16, 8, 8) and torch.isfinite(plain).all()
    reference = torch.randn(1, 16, 6, 10, generator=gen)  # a VAE-encoded input image (ReferenceLatent)
    edited_positive = [[positive[0][0], dict(positive[0][1], reference_latents=[reference])]]
    edited = sample(loaded, noise, 2, 4.0, "euler", "simple", edited_positive, negative, empty)
    assert torch.isfinite(edited).all() and (edited - plain).abs().max() > 1e-4


# --- the Qwen2.5-VL-3B text encoder ---------------------------------------------------------------------


def test_the_3b_tower_is_detected_from_its_shapes_and_matches_transformers():
    from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig
    from comfy_core.text_encoders.towers import build_tower

    state = tiny_qwen25vl_3b_state_dict(seed=5, vocab_size=300)
    config = Qwen25VLConfig.detect_from_weights(_header(state))
    assert config.slot == "qwen25_3b" and config.vision is None
    assert (config.hidden_size, config.num_heads, config.num_kv_heads, config.num_layers) == (256, 2, 2, 2)
    tower = build_tower(config, state, None)
    ids = torch.tensor([[3, 17, 250, 9, 9, 120, 44]])
    with torch.no_grad():
        ours = tower.encode_ids(ids)
        theirs = qwen3b_reference_model(state, vocab_size=300)(input_ids=ids).last_hidden_state
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def te_state():
    return tiny_qwen25vl_3b_state_dict(seed=3)


@pytest.fixture(scope="module")
def te_file(tmp_path_factory, te_state):
    return write_qwen25vl_3b_file(tmp_path_factory.mktemp("omnigen2_te") / "qwen_2.5_vl_fp16.safetensors", te_state)


def test_cliploader_omnigen2_gives_comfyuis_conditioning(te_file, te_state):
    from comfy_core.split.text_encoder_files import load_text_encoders

    clip = load_text_encoders([te_file], "omnigen2")
    assert isinstance(clip.cond_stage_model, Omnigen2Model) and isinstance(clip.tokenizer, Omnigen2Tokenizer)
    assert clip.cond_stage_model.clip == "qwen25_3b"
    prompt = "a cat with a crown"
    tokens = clip.tokenize(prompt)
    ids = [t for t, _ in tokens["qwen25_3b"][0]]
    assert ids == clip.tokenizer.qwen25_3b.encode(LLAMA_TEMPLATE.format(prompt))
    assert LLAMA_TEMPLATE.endswith("<|im_end|>\n")  # no assistant turn opened (ComfyUI's template)
    extra = clip.encode_from_tokens(tokens, return_dict=True)
    cond = extra["cond"]
    assert cond.shape == (1, len(ids), 256) and extra["pooled_output"] is None
    assert extra["attention_mask"].tolist() == [[1] * len(ids)]
    reference = qwen3b_reference_model({k: v.to(torch.float16) for k, v in te_state.items()})
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids])).last_hidden_state  # the final norm: layer "last"
    torch.testing.assert_close(cond, expected, atol=1e-5, rtol=1e-5)


def test_a_7b_file_is_refused_under_omnigen2(tmp_path):
    from comfy_core.split.text_encoder_files import ClipFilesError, load_text_encoders
    from tests.fixtures.qwen25vl_files import tiny_qwen25vl_state_dict, write_qwen25vl_file

    path = write_qwen25vl_file(tmp_path / "qwen_2.5_vl_7b.safetensors", tiny_qwen25vl_state_dict(vision=False))
    with pytest.raises(ClipFilesError, match="Qwen2.5-VL-3B"):
        load_text_encoders([path], "omnigen2")
