"""The Boogu-Image family (comfy_core/families/boogu): detection from names and shapes (told apart
from OmniGen2, whose blocks it reuses), the network against an independent re-computation (diffusers
0.42.1 has no Boogu transformer), ComfyUI's policy and conditions, quantised files, two sampling
steps with a reference latent, and the Qwen3-VL 8B text encoder under CLIPLoader type "boogu"
(templates as ComfyUI's `BooguTokenizer`, states against transformers' Qwen3-VL).

The re-computation reuses tests/comfy_core/test_omnigen2.py's independent pieces (complex RoPE,
explicit softmax attention, norms and patches by hand) for the OmniGen2 parts and writes the
dual-stream block here from its description (ComfyUI's comfy/ldm/boogu/model.py behaviour)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.boogu.clip import (BOOGU_TEXT_ENCODERS, DROP_SYSTEM, T2I_SYSTEM, BooguTEModel,
                                            BooguTokenizer)
from comfy_core.families.boogu.dit import BooguConfig, BooguConfigError, BooguInputError
from tests.comfy_core.test_omnigen2 import _block, _grid, _linear, _patches, _rms, _rotate, _rotations
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.template_models_boogu import TINY, quantized_boogu, text_width, tiny_boogu_state_dict

UNET = "model.diffusion_model."
P = {"head": 12, "heads": 8, "kv_heads": 4, "axes": [4, 4, 4], "refiners": 1, "double": 2, "layers": 2}


def _header(state: dict) -> dict:
    return {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in state.items()}


def _save(state: dict, path) -> object:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path))
    return path


# --- the independent re-computation ---------------------------------------------------------------------

def _softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [B, L, H, D], k / v [B, L, Hkv, D] -> [B, L, H*D] (grouped heads repeated)."""
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    weights = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", weights.softmax(-1), v).flatten(2)


def _modulation(sd: dict, name: str, x: torch.Tensor, temb: torch.Tensor) -> tuple:
    """`rms(x) * (1 + a)` and the rows b, c, d of `linear(silu(t)) = [a, b, c, d]`."""
    a, b, c, d = _linear(sd, name + ".linear", F.silu(temb)).chunk(4, dim=-1)
    return _rms(x, sd[name + ".norm.weight"]) * (1 + a[:, None]), b, c, d


def _double_block(sd: dict, name: str, img: torch.Tensor, txt: torch.Tensor, joint_rot: torch.Tensor,
                  img_rot: torch.Tensor, temb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, lt, d = img.shape[0], txt.shape[1], P["head"]
    n1, g_attn, s_mlp, g_mlp = _modulation(sd, name + ".img_norm1", img, temb)
    n2, shift, _, _ = _modulation(sd, name + ".img_norm2", img, temb)
    n3, g_self, _, _ = _modulation(sd, name + ".img_norm3", img, temb)
    t1, tg_attn, ts_mlp, tg_mlp = _modulation(sd, name + ".instruct_norm1", txt, temb)
    t2, tshift, _, _ = _modulation(sd, name + ".instruct_norm2", txt, temb)
    pre = name + ".img_instruct_attn"
    proj = lambda stream, what, x: _linear(sd, f"{pre}.processor.{stream}_to_{what}", x)  # noqa: E731
    q = torch.cat([proj("instruct", "q", t1), proj("img", "q", n1)], 1).view(b, -1, P["heads"], d)
    k = torch.cat([proj("instruct", "k", t1), proj("img", "k", n1)], 1).view(b, -1, P["kv_heads"], d)
    v = torch.cat([proj("instruct", "v", t1), proj("img", "v", n1)], 1).view(b, -1, P["kv_heads"], d)
    q, k = _rms(q, sd[pre + ".norm_q.weight"]), _rms(k, sd[pre + ".norm_k.weight"])
    joint = _softmax_attention(_rotate(q, joint_rot), _rotate(k, joint_rot), v)
    joint = torch.cat([_linear(sd, pre + ".processor.instruct_out", joint[:, :lt]),
                       _linear(sd, pre + ".processor.img_out", joint[:, lt:])], 1)
    joint = _linear(sd, pre + ".to_out.0", joint)
    sa = name + ".img_self_attn"
    sq = _rms(_linear(sd, sa + ".to_q", n3).view(b, -1, P["heads"], d), sd[sa + ".norm_q.weight"])
    sk = _rms(_linear(sd, sa + ".to_k", n3).view(b, -1, P["kv_heads"], d), sd[sa + ".norm_k.weight"])
    sv = _linear(sd, sa + ".to_v", n3).view(b, -1, P["kv_heads"], d)
    self_out = _linear(sd, sa + ".to_out.0", _softmax_attention(_rotate(sq, img_rot), _rotate(sk, img_rot), sv))

    def ffn(stream: str, hidden: torch.Tensor) -> torch.Tensor:
        h = _rms(hidden, sd[f"{name}.{stream}_ffn_norm1.weight"])
        f = f"{name}.{stream}_feed_forward"
        out = _linear(sd, f + ".linear_2", F.silu(_linear(sd, f + ".linear_1", h)) * _linear(sd, f + ".linear_3", h))
        return _rms(out, sd[f"{name}.{stream}_ffn_norm2.weight"])

    w = lambda n: sd[f"{name}.{n}.weight"]  # noqa: E731
    img_new = img + torch.tanh(g_attn)[:, None] * _rms(joint[:, lt:], w("img_attn_norm"))
    img_new = img_new + torch.tanh(g_self)[:, None] * _rms(self_out, w("img_self_attn_norm"))
    img_new = img_new + torch.tanh(g_mlp)[:, None] * ffn("img", (1 + s_mlp[:, None]) * n2 + shift[:, None])
    txt_new = txt + torch.tanh(tg_attn)[:, None] * _rms(joint[:, :lt], w("instruct_attn_norm"))
    txt_new = txt_new + torch.tanh(tg_mlp)[:, None] * ffn("instruct", (1 + ts_mlp[:, None]) * t2 + tshift[:, None])
    return img_new, txt_new


def reference_forward(sd: dict, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                      refs: list[torch.Tensor] = ()) -> torch.Tensor:
    """Boogu's prediction as ComfyUI returns it (negated); latent sizes even."""
    b, c, h, w = x.shape
    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000.0 * ((1.0 - sigma)[:, None] * freqs[None])
    sinusoid = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    temb = _linear(sd, "time_caption_embed.timestep_embedder.linear_2",
                   F.silu(_linear(sd, "time_caption_embed.timestep_embedder.linear_1", sinusoid)))
    text = _linear(sd, "time_caption_embed.caption_embedder.1", _rms(context, sd["time_caption_embed.caption_embedder.0.weight"]))
    lt = context.shape[1]
    text_pos = [(i, i, i) for i in range(lt)]
    ref_pos, shift, ref_tokens = [], lt, []
    for j, ref in enumerate(refs):
        rows, cols = ref.shape[-2] // 2, ref.shape[-1] // 2
        ref_pos += _grid(shift, rows, cols)
        ref_tokens.append(_linear(sd, "ref_image_patch_embedder", _patches(ref)) + sd["image_index_embedding"][j])
        shift += max(rows, cols)
    hp, wp = h // 2, w // 2
    img_pos = _grid(shift, hp, wp)
    axes = P["axes"]
    for i in range(P["refiners"]):
        text = _block(sd, f"context_refiner.{i}", text, _rotations(text_pos, axes), None, P)
    img = _linear(sd, "x_embedder", _patches(x))
    for i in range(P["refiners"]):
        img = _block(sd, f"noise_refiner.{i}", img, _rotations(img_pos, axes), temb, P)
    if refs:
        ref_seq = torch.cat(ref_tokens, dim=1)
        for i in range(P["refiners"]):
            ref_seq = _block(sd, f"ref_image_refiner.{i}", ref_seq, _rotations(ref_pos, axes), temb, P)
        img = torch.cat([ref_seq, img], dim=1)
    joint_rot, img_rot = _rotations(text_pos + ref_pos + img_pos, axes), _rotations(ref_pos + img_pos, axes)
    for i in range(P["double"]):
        img, text = _double_block(sd, f"double_stream_layers.{i}", img, text, joint_rot, img_rot, temb)
    seq = torch.cat([text, img], dim=1)
    for i in range(P["layers"]):
        seq = _block(sd, f"single_stream_layers.{i}", seq, joint_rot, temb, P)
    scale = _linear(sd, "norm_out.linear_1", F.silu(temb))
    seq = F.layer_norm(seq, (seq.shape[-1],), eps=1e-6) * (1 + scale[:, None])
    tokens = _linear(sd, "norm_out.linear_2", seq)[:, -hp * wp:]
    out = torch.empty(b, c, h, w)
    for i in range(hp):
        for j in range(wp):
            out[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = tokens[:, i * wp + j].view(b, 2, 2, c).permute(0, 3, 1, 2)
    return -out


# --- config and detection -------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes():
    config = BooguConfig.detect_from_weights(_header(tiny_boogu_state_dict(prefix=UNET)), UNET)
    expected = dict(TINY, axes_dim_rope=(4, 4, 4), text_feat_dim=text_width())
    assert {k: getattr(config, k) for k in expected} == expected
    assert config.in_channels == config.out_channels == 16 and config.index_embeddings == 5
    unet = config.comfy_unet_config()
    assert unet["image_model"] == "boogu" and unet["num_double_stream_layers"] == 2
    assert unet["instruction_feat_dim"] == text_width() and "text_feat_dim" not in unet


def test_inconsistent_weights_are_typed_errors():
    state = _header(tiny_boogu_state_dict())
    del state["single_stream_layers.0.attn.norm_q.weight"]
    with pytest.raises(BooguConfigError, match="single_stream_layers.0.attn.norm_q.weight"):
        BooguConfig.detect_from_weights(state)
    state = _header(tiny_boogu_state_dict())
    del state["ref_image_refiner.0.attn.to_q.weight"]
    for key in [k for k in state if k.startswith("ref_image_refiner.0.")]:
        del state[key]
    with pytest.raises(BooguConfigError, match="refiner depths differ"):
        BooguConfig.detect_from_weights(state)


def test_single_and_split_files_are_detected_as_boogu_not_omnigen2():
    registry = default_registry()
    header = {UNET + k: v for k, v in _header(tiny_boogu_state_dict()).items()}
    assert registry.detect(header).family.name == "boogu"
    assert registry.detect_diffusion_model(header).family.name == "boogu"
    from tests.fixtures.omnigen2_files import tiny_omnigen2_state_dict

    omnigen = _header(tiny_omnigen2_state_dict(prefix=UNET))
    assert registry.detect_diffusion_model(omnigen).family.name == "omnigen2"


# --- numerics -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def state():
    return tiny_boogu_state_dict(seed=1)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, state):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(_save(state, tmp_path_factory.mktemp("boogu") / "boogu_image_bf16.safetensors"))


@pytest.mark.parametrize("size, ref_sizes", [((6, 8), []), ((4, 6), [(4, 6), (6, 2)])])
def test_network_matches_the_recomputation_on_weights_loaded_from_a_comfyui_file(loaded, state, size, ref_sizes):
    network = loaded.model.diffusion_model
    assert type(network).__name__ == "BooguTransformer2DModel"  # ComfyUI's class name
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 16, *size, generator=gen)
    sigma = torch.tensor([0.7, 0.15])
    context = torch.randn(2, 7, text_width(), generator=gen)
    refs = [torch.randn(2, 16, *s, generator=gen) for s in ref_sizes]
    with torch.no_grad():
        ours = network(x, sigma, context, 7, ref_latents=refs or None)
        theirs = reference_forward(state, x, sigma, context, refs)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()
    if refs:  # the references change the image
        with torch.no_grad():
            plain = network(x, sigma, context, 7)
        assert (plain - ours).abs().max() > 1e-3


def test_bad_inputs_are_typed_errors(loaded):
    network = loaded.model.diffusion_model
    x, sigma, context = torch.randn(1, 16, 4, 4), torch.tensor([0.5]), torch.randn(1, 5, text_width())
    with pytest.raises(BooguInputError, match="unpadded"):
        network(x, sigma, context, 3, attention_mask=torch.tensor([[1, 1, 1, 0, 0]]))
    with pytest.raises(BooguInputError, match="at most 5"):
        network(x, sigma, context, 5, ref_latents=[torch.randn(1, 16, 2, 2)] * 6)


def test_family_policy_and_conditions_are_comfyuis(loaded):
    from comfy_core.families.omnigen2.supported_models import Omnigen2
    from comfy_core.models.model_sampling import FlowModelSampling

    model = loaded.model
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 3.16 and sampling.multiplier == 1.0
    config = model.model_config
    assert type(config).__name__ == "Boogu" and isinstance(config, Omnigen2)  # ComfyUI's subclass
    assert config.sampling_settings == {"multiplier": 1.0, "shift": 3.16} and config.memory_usage_factor == 2.15
    assert config.unet_config["image_model"] == "boogu"
    family = default_registry().get("boogu")
    assert family.comfy_model_class == "Boogu" and family.text_encoders is BOOGU_TEXT_ENCODERS
    assert family.latent_format.scale_factor == pytest.approx(0.3611) and family.geometry.latent_channels == 16
    assert BOOGU_TEXT_ENCODERS.clip_types == ("boogu",)
    ref = torch.randn(1, 16, 4, 4)
    out = family.conditioning.extra_conds(model, cross_attn=torch.zeros(1, 6, text_width()),
                                          reference_latents=[ref], attention_mask=torch.ones(1, 6))
    assert set(out) == {"num_tokens", "ref_latents"} and out["num_tokens"] == 6
    assert torch.allclose(out["ref_latents"][0], model.process_latent_in(ref))


def test_quantized_files_stay_quantized_and_compute_like_their_dequantised_weights(tmp_path, state):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    shapes = {k: tuple(v.shape) for k, v in state.items() if k.endswith(".weight")}
    gen = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 4, text_width(), generator=gen)
    ref = [torch.randn(1, 16, 2, 4, generator=gen)]
    for storage, dtype in (("fp8", torch.float8_e4m3fn), ("int8", torch.int8)):
        tensors, metadata = quantized_boogu(state, storage)
        path = tmp_path / storage / f"boogu_image_{storage}.safetensors"
        path.parent.mkdir()
        save_file(tensors, str(path), metadata=metadata or None)
        quantised = load_diffusion_model(path)
        plain = load_diffusion_model(_save(true_state(tensors, metadata, shapes), tmp_path / storage / "f.safetensors"))
        network = quantised.model.diffusion_model
        assert network.double_stream_layers[0].img_instruct_attn.processor.img_to_q.weight.dtype == dtype
        assert network.single_stream_layers[1].feed_forward.linear_2.weight.dtype == dtype
        with torch.no_grad():
            a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx, 4, ref_latents=ref) for m in (quantised, plain))
        assert (a - b).abs().max() < 1e-3 * b.abs().max(), storage


def test_unetloader_file_samples_two_steps_with_and_without_a_reference(loaded):
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 9, text_width(), generator=gen), {"attention_mask": torch.ones(1, 9)}]]
    negative = [[torch.randn(1, 5, text_width(), generator=gen), {"attention_mask": torch.ones(1, 5)}]]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(1, 16, 8, 8)
    plain = sample(loaded, noise, 2, 3.5, "euler", "simple", positive, negative, empty)
    assert plain.shape == (1, 16, 8, 8) and torch.isfinite(plain).all()
    reference = torch.randn(1, 16, 6, 10, generator=gen)
    with_ref = [[c, dict(o, reference_latents=[reference])] for c, o in (positive[0], negative[0])]
    edited = sample(loaded, noise, 2, 3.5, "euler", "simple", [with_ref[0]], [with_ref[1]], empty)
    assert torch.isfinite(edited).all() and (edited - plain).abs().max() > 1e-4


# --- the Qwen3-VL 8B text encoder (CLIPLoader type "boogu") ----------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    te_state = tiny_qwen3vl_state_dict(seed=7)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_8b_fp8_scaled.safetensors",
                              dtype=torch.float32, state=te_state)
    return te_state, load_text_encoders([path], "boogu")


def test_templates_are_boogus(encoder):
    _, clip = encoder
    assert isinstance(clip.cond_stage_model, BooguTEModel) and isinstance(clip.tokenizer, BooguTokenizer)

    def text(prompt: str, **kwargs: object) -> str:
        tokens = clip.tokenize(prompt, **kwargs)
        assert set(tokens) == {"qwen3vl_8b"}
        ids = [t[0] if not isinstance(t[0], dict) else 151655 for t in tokens["qwen3vl_8b"][0]]
        return clip.tokenizer.decode(ids, skip_special_tokens=False)

    t2i = f"<|im_start|>system\n{T2I_SYSTEM}<|im_end|>\n<|im_start|>user\na red fox<|im_end|>\n"
    assert text("a red fox") == t2i  # no assistant turn, no thinking block
    drop = f"<|im_start|>system\n{DROP_SYSTEM}<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
    assert text("") == drop and text("  ") == drop.replace("user\n", "user\n  ")
    image = torch.rand(1, 32, 48, 3)
    block = "<|vision_start|><|image_pad|><|vision_end|>"
    assert text("remove the hat", images=[image, image]) == (
        f"<|im_start|>system\n{DROP_SYSTEM}<|im_end|>\n<|im_start|>user\n{block}{block}remove the hat<|im_end|>\n")
    tokens = clip.tokenize("remove the hat", images=[image])
    entries = [t[0] for t in tokens["qwen3vl_8b"][0] if isinstance(t[0], dict)]
    assert len(entries) == 1 and entries[0]["data"] is image and entries[0]["type"] == "image"


def test_conditioning_is_the_final_normed_states_as_transformers(encoder):
    from tests.fixtures.qwen3vl_files import reference_model

    te_state, clip = encoder
    tokens = clip.tokenize("a lighthouse at dusk")
    ids = [t[0] for t in tokens["qwen3vl_8b"][0]]
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    with torch.no_grad():
        expected = reference_model(te_state)(input_ids=torch.tensor([ids])).last_hidden_state  # final norm
    assert out["pooled_output"] is None and out["attention_mask"].tolist() == [[1] * len(ids)]
    assert out["cond"].shape == (1, len(ids), text_width())
    torch.testing.assert_close(out["cond"], expected, atol=1e-4, rtol=1e-4)


def test_edit_images_expand_into_vision_tokens(encoder):
    _, clip = encoder
    image = torch.rand(1, 64, 96, 3, generator=torch.Generator().manual_seed(1))
    plain = clip.encode_from_tokens(clip.tokenize("remove the hat"), return_dict=True)["cond"]
    tokens = clip.tokenize("remove the hat", images=[image])
    with_image = clip.encode_from_tokens(tokens, return_dict=True)["cond"]
    count = clip.cond_stage_model.encoder("qwen3vl_8b").image_token_count(image)
    assert with_image.shape[1] == len(tokens["qwen3vl_8b"][0]) - 1 + count and count > 1
    assert with_image.shape[1] != plain.shape[1] and torch.isfinite(with_image).all()
