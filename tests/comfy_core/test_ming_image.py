"""Ming-Image (comfy_core/families/ming_image): its text encoder's numbers against independent
computations (the mixture of experts against a plain per-token loop written here, the connector
against transformers' Qwen2 blocks run without a causal mask, the vision tower against transformers'
Qwen2.5-VL vision model, the video-rope positions against a table worked by hand), the tokenizer's
template and image blocks, the whole file through CLIPLoader's path (int8 ConvRot layers), the DiT's
new parts against Z-Image's NextDiT on the same weights with hand-set positions, and detection of
the tiny files with the real key names (tests/fixtures/template_models_ming.py)."""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.ming_image.encoder import (MingEncoderConfig, MingEncoderError, SparseMoe, build_encoder,
                                                    video_rope_positions)
from tests.fixtures.template_models_ming import (CAP_WIDTH, DIT_DIM, tiny_dit_state_dict, tiny_encoder_state_dict,
                                                 write_ming_dit, write_ming_text_encoder)


@pytest.fixture(scope="module")
def state():
    return {k: v for k, v in tiny_encoder_state_dict(seed=3).items() if k != "thinker.lm_head.weight"}


@pytest.fixture(scope="module")
def encoder(state):
    return build_encoder(state)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders

    path = tmp_path_factory.mktemp("ming") / "text_encoders" / "ming_image_0.1_ling_mini_2.0_int8_convrot.safetensors"
    write_ming_text_encoder(path, seed=5)
    return load_text_encoders([str(path)], "qwen_image")


# --- the encoder -----------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes(encoder):
    c = encoder.config
    assert (c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (32, 13, 4, 1, 16)
    assert (c.num_experts, c.moe_intermediate_size, c.intermediate_size) == (32, 8, 48)
    assert (c.connector_hidden, c.connector_layers, c.connector_head_dim, c.query_tokens) == (24, 2, 4, 8)
    assert (c.cap_dim, c.direct_dim, c.rope_dim, c.spatial_pairs) == (CAP_WIDTH, DIT_DIM, 8, 3)
    assert c.vision.hidden_size == 64 and c.vision.out_hidden_size == 48 and c.vision.depth == 2


def test_a_thinker_too_shallow_for_the_taps_is_refused(state):
    shallow = {k: v for k, v in state.items() if not k.startswith("thinker.layers.12.")}
    with pytest.raises(MingEncoderError, match="blocks"):
        MingEncoderConfig.detect_from_weights(shallow)


def _reference_moe(state: dict, prefix: str, x: torch.Tensor, image: list[bool]) -> torch.Tensor:
    """The mixture of experts token by token in float64, written from the Ling-mini-2.0 routing rule
    (sigmoid scores plus bias; 8 groups scored by their two best; 4 groups; 8 experts; the plain
    scores renormalised x 2.5) independently of the module."""
    x = x.double()
    gate_up = state[prefix + "experts.gate_up_proj.weight"].double()
    down = state[prefix + "experts.down_proj.weight"].double()
    inner = down.shape[2]
    rows = []
    for t in range(x.shape[0]):
        router = "image_gate" if image[t] else "gate"
        scores = torch.sigmoid(state[f"{prefix}{router}.proj.weight"].double() @ x[t])
        routing = (scores + state[f"{prefix}{router}.expert_bias"].double()).tolist()
        size = len(routing) // 8
        group_scores = []
        for g in range(8):
            members = sorted(routing[g * size:(g + 1) * size], reverse=True)
            group_scores.append((members[0] + members[1], g))
        kept = [g for _, g in sorted(group_scores, reverse=True)[:4]]
        candidates = sorted(((routing[e], e) for g in kept for e in range(g * size, (g + 1) * size)), reverse=True)
        chosen = [e for _, e in candidates[:8]]
        total = sum(float(scores[e]) for e in chosen)
        out = torch.zeros(x.shape[1], dtype=torch.float64)
        for e in chosen:
            h = gate_up[e] @ x[t]
            out += float(scores[e]) / (total + 1e-20) * 2.5 * (down[e] @ (F.silu(h[:inner]) * h[inner:]))
        shared = {n: state[f"{prefix}shared_experts.{n}.weight"].double() for n in ("gate_proj", "up_proj", "down_proj")}
        out += shared["down_proj"] @ (F.silu(shared["gate_proj"] @ x[t]) * (shared["up_proj"] @ x[t]))
        rows.append(out)
    return torch.stack(rows)


def test_the_mixture_of_experts_matches_a_plain_per_token_loop(encoder, state):
    moe = encoder.thinker.layers[3].mlp
    assert isinstance(moe, SparseMoe)
    x = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(0))
    image = [False, True, True, False, False]
    ours = moe(x, torch.tensor([image]))
    theirs = _reference_moe(state, "thinker.layers.3.mlp.", x[0], image)
    torch.testing.assert_close(ours[0].double(), theirs, atol=1e-4, rtol=1e-4)
    # the image router really is the other one: all-text routing gives other numbers
    assert (moe(x, torch.zeros(1, 5, dtype=torch.bool))[0, 1:3] - ours[0, 1:3]).abs().max() > 1e-3


def test_video_rope_positions_centre_each_block_on_one_index():
    # tokens 0..2 text, a 2x3 image block at 3..8, tokens 9..10 text, a 1x4 query block at 11..14
    t, h, w = video_rope_positions(15, [(3, 2, 3), (11, 1, 4)])
    assert t.tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 4, 5, 6, 6, 6, 6]
    assert h.tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 4, 5, 6, 6, 6, 6]
    assert w.tolist() == [0, 1, 2, 2, 3, 4, 2, 3, 4, 4, 5, 5, 6, 7, 8]


def _rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE by explicit angles [T, d/2] on x [T, d]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * angles.cos() - b * angles.sin(), b * angles.cos() + a * angles.sin()), dim=-1)


def test_the_thinker_attention_rotates_half_of_each_head_with_spatial_pairs(encoder, state):
    """One attention block by hand: fused q/k/v split 4 / 1 / 1 heads, per-head RMS norms, RoPE on
    the first 8 of 16 channels (pairs 0, 2 by rows, 1 by columns, 3 by the sequence index), causal."""
    from comfy_core.families.ming_image.encoder import thinker_rope

    attn = encoder.thinker.layers[1].attention
    blocks = [(2, 2, 2)]
    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(1))
    cos, sin = thinker_rope(encoder.config, 8, blocks)
    bias = torch.full((8, 8), torch.finfo(torch.float32).min / 4).triu(1)[None, None]
    ours = attn(x, bias, cos, sin)[0]
    p = "thinker.layers.1.attention."
    qkv = (x[0].double() @ state[p + "query_key_value.weight"].double().T).view(8, 6, 16)
    t, h, w = video_rope_positions(8, blocks)
    inv = 1.0 / (600000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    angles = torch.stack([h * inv[0], w * inv[1], h * inv[2], t * inv[3]], dim=-1).double()  # [T, 4]

    def norm(v, weight):
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()

    heads = []
    k = norm(qkv[:, 4], state[p + "k_norm.weight"])
    k = torch.cat((_rotate(k[:, :8], angles), k[:, 8:]), dim=-1)
    v = qkv[:, 5]
    for head in range(4):
        q = norm(qkv[:, head], state[p + "q_norm.weight"])
        q = torch.cat((_rotate(q[:, :8], angles), q[:, 8:]), dim=-1)
        logits = (q @ k.T) / 4.0 + torch.full((8, 8), float("-inf")).triu(1).double()
        heads.append(torch.softmax(logits, dim=-1) @ v)
    theirs = torch.cat(heads, dim=-1) @ state[p + "dense.weight"].double().T
    torch.testing.assert_close(ours.double(), theirs, atol=1e-4, rtol=1e-4)


def test_the_connector_is_qwen2_without_a_causal_mask(encoder, state):
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm, Qwen2RotaryEmbedding

    config = Qwen2Config(hidden_size=24, intermediate_size=40, num_attention_heads=12, num_key_value_heads=2,
                         head_dim=4, num_hidden_layers=2, rms_norm_eps=1e-6, vocab_size=8,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    config._attn_implementation = "eager"
    layers = [Qwen2DecoderLayer(config, i).eval() for i in range(2)]
    for i, layer in enumerate(layers):
        layer.load_state_dict({k[len(f"connector.layers.{i}."):]: v for k, v in state.items()
                               if k.startswith(f"connector.layers.{i}.")})
    final = Qwen2RMSNorm(24, eps=1e-6)
    final.load_state_dict({"weight": state["connector.norm.weight"]})
    x = torch.randn(1, 6, 24, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(6)[None]
    embeddings = Qwen2RotaryEmbedding(config)(x, positions)
    with torch.no_grad():
        y = x
        for layer in layers:
            out = layer(y, attention_mask=None, position_ids=positions, position_embeddings=embeddings)
            y = out[0] if isinstance(out, tuple) else out
        theirs = final(y)
    ours = encoder.connector(x)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    # bidirectional: the first token's output depends on the last token
    changed = x.clone()
    changed[0, -1] += 1.0
    assert (encoder.connector(changed)[0, 0] - ours[0, 0]).abs().max() > 1e-4


def test_the_vision_tower_is_qwen25_vls(encoder, state):
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    from comfy_core.text_encoders.qwen25vl_vision import encode_image_patches, preprocess_image

    reference = Qwen2_5_VisionTransformerPretrainedModel(encoder.config.vision.to_transformers()).eval()
    reference.load_state_dict({k[len("vision."):]: v for k, v in state.items() if k.startswith("vision.")},
                              strict=False)
    image = torch.rand(1, 60, 90, 3, generator=torch.Generator().manual_seed(4))
    patches, grid = preprocess_image(image, encoder.config.vision)
    with torch.no_grad():
        theirs = reference(patches, grid_thw=grid).pooler_output
    ours = encode_image_patches(encoder.vision, encoder.config.vision, patches, grid)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    # the encoder's image tokens: ComfyUI's 451,584 pixels (a 48 x 48 patch grid for a square), linear_proj, unit length
    tokens, grid = encoder.image_embedding(torch.rand(1, 50, 50, 3))
    assert grid.tolist() == [[1, 48, 48]] and tokens.shape == (576, 32)
    torch.testing.assert_close(tokens.norm(dim=-1), torch.ones(576))


def test_int8_expert_banks_are_dequantised_expert_by_expert(clip):
    """The file's 3-D int8 ConvRot banks read back within int8 rounding of the float weights they
    were written from (the fixture writes the same seed's float state)."""
    original = tiny_encoder_state_dict(seed=5)
    loaded = clip.cond_stage_model.ming_image.state_dict()
    for name in ("thinker.layers.4.mlp.experts.gate_up_proj.weight", "thinker.layers.12.mlp.experts.down_proj.weight",
                 "thinker.layers.2.attention.query_key_value.weight"):
        error = (loaded[name].float() - original[name]).abs().max()
        assert loaded[name].shape == original[name].shape and error < 0.02 * original[name].abs().max(), name
    assert loaded["thinker.layers.1.mlp.gate.expert_bias"].dtype == torch.float32
    assert "thinker.lm_head.weight" not in loaded


def test_the_prompt_template_and_image_blocks(clip):
    from comfy_core.families.ming_image.clip import IMAGE_BLOCK, render_prompt

    assert render_prompt("a cat") == ("<role>SYSTEM</role>你是一个友好的AI助手。\n\ndetailed thinking off<|role_end|>"
                                      "<role>HUMAN</role>a cat<|role_end|><role>ASSISTANT</role>" + IMAGE_BLOCK)
    assert f"HUMAN</role>{IMAGE_BLOCK}\n\n{IMAGE_BLOCK}\nedit<|role_end|>" in render_prompt("edit", 2)
    image = torch.rand(1, 16, 16, 3)
    row = clip.tokenize("edit", images=[image])["ming_image"][0]
    entries = [pair[0]["type"] for pair in row if isinstance(pair[0], dict)]
    assert entries == ["image", "query"] and row[-2][0]["type"] == "query" and row[-1][0] == 260  # </image>
    assert clip.tokenizer.decode([pair[0] for pair in row if not isinstance(pair[0], dict)][:3]) == "<role>SY"


def test_the_encoder_file_loads_through_clip_loader_and_encodes(clip):
    assert type(clip.tokenizer).__name__ == "MingImageTokenizer"
    tokens = clip.tokenize("a red square")
    row = tokens["ming_image"][0]
    query_at = next(i for i, pair in enumerate(row) if isinstance(pair[0], dict))
    out = clip.encode_from_tokens(tokens, return_dict=True)
    assert out["cond"].shape == (1, 8, CAP_WIDTH) and out["pooled_output"] is None
    # the direct context: the tokens before the last <image> (which sits just before the query tokens)
    assert out["direct_context"].shape == (1, query_at - 1, DIT_DIM)
    again = clip.encode_from_tokens(clip.tokenize("a red square"), return_dict=True)
    assert torch.equal(again["cond"], out["cond"])
    other = clip.encode_from_tokens(clip.tokenize("a blue circle"), return_dict=True)
    assert (other["cond"] - out["cond"]).abs().max() > 1e-4


def test_an_image_prompt_splices_the_image_tokens_before_the_query(clip):
    image = torch.rand(1, 40, 40, 3, generator=torch.Generator().manual_seed(6))
    tokens = clip.tokenize("make it blue", images=[image])
    out = clip.encode_from_tokens(tokens, return_dict=True)
    text_tokens = sum(1 for pair in tokens["ming_image"][0] if not isinstance(pair[0], dict))
    # a square picture at 451,584 pixels: 672 x 672, 24 x 24 merged patches; the direct context ends before
    # the last <image> (so without it and its </image>)
    assert out["direct_context"].shape[1] == text_tokens + 576 - 2 and out["cond"].shape == (1, 8, CAP_WIDTH)


# --- the DiT ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dits(tmp_path_factory):
    """The Ming DiT loaded from a UNETLoader file, and Z-Image's NextDiT on the same weights."""
    from comfy_core.families.zimage.nextdit import NextDiT
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("mingdit") / "diffusion_models" / "ming_image_0.1_design_bf16.safetensors"
    write_ming_dit(path, seed=1, int8=False)
    model = load_diffusion_model(str(path))
    ming = model.model.diffusion_model.float()
    reference = NextDiT(ming.config).float()
    reference.load_state_dict(ming.state_dict())
    return model, ming, reference


def test_unetloader_file_is_ming_image(dits):
    model, ming, _ = dits
    assert model.model.family.name == "ming_image"
    config = model.model.model_config
    assert type(config).__name__ == "MingImage" and config.unet_config["image_model"] == "ming_image"
    assert config.unet_config["masked_pad_multiple"] == 32 and "pad_tokens_multiple" not in config.unet_config
    assert config.sampling_settings == {"multiplier": 1.0, "shift": 3.16}
    assert model.model.latent_format.scale_factor == 8.0064 and model.model.latent_format.latent_dimensions == 3
    assert not hasattr(ming, "cap_pad_token")


def _inputs(seed: int, text: int, frames: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 16, frames, 8, 6, generator=gen), torch.tensor([0.6]),
            torch.randn(1, text, CAP_WIDTH, generator=gen))


def test_a_32_token_caption_is_z_images_forward(dits):
    _, ming, reference = dits
    x, t, context = _inputs(0, 32)
    with torch.no_grad():
        ours = ming(x, t, context)
        theirs = reference(x[:, :, 0], t, context)
    assert ours.shape == x.shape
    torch.testing.assert_close(ours[:, :, 0], theirs, atol=1e-5, rtol=1e-5)


def test_the_image_starts_past_the_caption_rounded_up_to_32(dits, monkeypatch):
    _, ming, reference = dits
    x, t, context = _inputs(1, 20)
    original = reference._image_ids
    # hand-set rule: a 20-token caption keeps positions 1..20, the image's index is 32 + 1
    monkeypatch.setattr(reference, "_image_ids", lambda start, *a, **k: original(33, *a, **k))
    with torch.no_grad():
        torch.testing.assert_close(ming(x, t, context)[:, :, 0], reference(x[:, :, 0], t, context),
                                   atol=1e-5, rtol=1e-5)
    monkeypatch.undo()
    with torch.no_grad():  # Z-Image's own rule (index 21) gives another result
        assert (ming(x, t, context)[:, :, 0] - reference(x[:, :, 0], t, context)).abs().max() > 1e-4


def test_direct_context_extends_the_embedded_caption(dits, monkeypatch):
    _, ming, reference = dits
    x, t, context = _inputs(2, 24)
    direct = torch.randn(1, 8, DIT_DIM, generator=torch.Generator().manual_seed(9))
    embedder = reference.cap_embedder

    class Extended(torch.nn.Module):  # the reference's caption: cap_embedder(context) then the direct rows
        def forward(self, c):
            return torch.cat([embedder(c), direct], dim=1)

    monkeypatch.setattr(reference, "cap_embedder", Extended())
    with torch.no_grad():  # 24 + 8 = 32 caption tokens: no rounding
        torch.testing.assert_close(ming(x, t, context, direct_context=direct)[:, :, 0],
                                   reference(x[:, :, 0], t, context), atol=1e-5, rtol=1e-5)


def test_a_reference_frame_is_an_extra_clean_frame_after_the_target(dits):
    _, ming, _ = dits
    x, t, context = _inputs(3, 10)
    ref = torch.randn(1, 16, 1, 8, 6, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        with_ref = ming(x, t, context, ref_frames=[ref])
        two_frames = ming(torch.cat([x, ref], dim=2), t, context)
        alone = ming(x, t, context)
    assert with_ref.shape == x.shape and two_frames.shape == (1, 16, 2, 8, 6)
    torch.testing.assert_close(with_ref, two_frames[:, :, :1], atol=1e-5, rtol=1e-5)
    assert (with_ref - alone).abs().max() > 1e-4
    # a reference of another size, 4-D, padded to the patch grid
    odd = torch.randn(1, 16, 5, 7, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        assert ming(x, t, context, ref_frames=[odd]).shape == x.shape


def test_conditions_pass_direct_context_and_reference_latents_in_model_space(dits):
    model, _, _ = dits
    direct = torch.randn(1, 5, DIT_DIM)
    latent = torch.randn(1, 16, 1, 4, 4)
    out = model.model.extra_inputs(cross_attn=torch.randn(1, 9, CAP_WIDTH), direct_context=direct,
                                  reference_latents=[latent], noise=torch.zeros(1, 16, 1, 4, 4), device="cpu")
    assert out["num_tokens"] == 9 and out["direct_context"] is direct
    torch.testing.assert_close(out["ref_frames"][0], latent * 8.0064)


# --- detection --------------------------------------------------------------------------------------

def _header(state: dict, prefix: str = "model.diffusion_model.") -> dict:
    return {prefix + k: torch.empty(v.shape, device="meta") for k, v in state.items()}


def test_detection_tells_ming_from_z_image():
    from tests.fixtures.zimage_files import tiny_zimage_state_dict

    registry = default_registry()
    assert registry.detect_diffusion_model(_header(tiny_dit_state_dict())).family.name == "ming_image"
    marked = registry.detect_diffusion_model(_header(tiny_dit_state_dict(marker=True)))
    assert marked.family.name == "ming_image" and marked.config.marker
    assert registry.detect_diffusion_model(_header(tiny_zimage_state_dict())).family.name == "zimage"


def test_the_text_encoder_file_is_found_whatever_the_loader_type(tmp_path):
    from comfy_core.split.text_encoder_files import load_text_encoders

    path = tmp_path / "te.safetensors"
    write_ming_text_encoder(path, seed=1, int8=False, vision=False)
    clip = load_text_encoders([str(path)], "stable_diffusion")
    assert type(clip.cond_stage_model).__name__ == "MingImageTEModel"
    with pytest.raises(Exception, match="vision tower"):
        clip.encode_from_tokens(clip.tokenize("x", images=[torch.rand(1, 8, 8, 3)]))
