"""Text-encoder numerics: our key conversion + forward against independent computations.

- OpenCLIP layout (SD2 ViT-H, SDXL bigG): a random tiny tower in open_clip's key layout, run by a
  reference forward written here directly on the raw weights (packed in_proj, x @ text_projection),
  versus `build_encoder` (conversion onto transformers' modules) + `encode_ids`.
- CLIP-L layout (SD1/SDXL): transformers' own `CLIPTextModel` forward on the same weights, and a
  round trip of the open_clip conversion.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.text_encoders.config import ClipTextConfig
from comfy_core.text_encoders.convert import convert_state_dict, to_checkpoint_layout, to_open_clip_layout
from comfy_core.text_encoders.encoder import EmbeddingOverride, build_encoder, resolve_layer
from comfy_core.text_encoders.errors import TextEncoderKeyError, TokenizeError

WIDTH, LAYERS, HEADS, VOCAB, POS, PROJ = 64, 3, 2, 49408, 77, 48


class _Info:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape = tuple(tensor.shape)
        self.dtype = {torch.float32: "F32", torch.float16: "F16"}[tensor.dtype]


def header(sd):
    return {k: _Info(v) for k, v in sd.items()}


def open_clip_tower(prefix: str, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=None):
        return torch.randn(shape, generator=g) * (scale if scale is not None else 1 / math.sqrt(shape[-1]))

    sd = {"token_embedding.weight": r(VOCAB, WIDTH, scale=0.5), "positional_embedding": r(POS, WIDTH, scale=0.1)}
    for i in range(LAYERS):
        b = f"transformer.resblocks.{i}."
        sd[b + "ln_1.weight"] = 1 + 0.1 * r(WIDTH, scale=1)
        sd[b + "ln_1.bias"] = r(WIDTH, scale=0.05)
        sd[b + "attn.in_proj_weight"] = r(3 * WIDTH, WIDTH)
        sd[b + "attn.in_proj_bias"] = r(3 * WIDTH, scale=0.05)
        sd[b + "attn.out_proj.weight"] = r(WIDTH, WIDTH)
        sd[b + "attn.out_proj.bias"] = r(WIDTH, scale=0.05)
        sd[b + "ln_2.weight"] = 1 + 0.1 * r(WIDTH, scale=1)
        sd[b + "ln_2.bias"] = r(WIDTH, scale=0.05)
        sd[b + "mlp.c_fc.weight"] = r(4 * WIDTH, WIDTH)
        sd[b + "mlp.c_fc.bias"] = r(4 * WIDTH, scale=0.05)
        sd[b + "mlp.c_proj.weight"] = r(WIDTH, 4 * WIDTH)
        sd[b + "mlp.c_proj.bias"] = r(WIDTH, scale=0.05)
    sd["ln_final.weight"] = 1 + 0.1 * r(WIDTH, scale=1)
    sd["ln_final.bias"] = r(WIDTH, scale=0.05)
    sd["text_projection"] = r(WIDTH, PROJ)
    sd["logit_scale"] = torch.tensor(4.6052)
    return {prefix + k: v for k, v in sd.items()}


def reference_open_clip(sd, prefix, ids, heads=HEADS):
    """OpenCLIP's text transformer written out on the raw weights: returns every block's output,
    the ln_final output and the projected pooled output (EOS = argmax id, as open_clip pools)."""
    w = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    x = w["token_embedding.weight"][ids] + w["positional_embedding"][: ids.shape[1]]  # [B, T, W]
    B, T, C = x.shape
    mask = torch.full((T, T), float("-inf")).triu(1)
    blocks = []
    for i in range(LAYERS):
        p = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        qkv = h @ w[p + "attn.in_proj_weight"].T + w[p + "attn.in_proj_bias"]  # [B, T, 3C]
        q, k, v = (t.reshape(B, T, heads, C // heads).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // heads) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + o @ w[p + "attn.out_proj.weight"].T + w[p + "attn.out_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"].T + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"].T + w[p + "mlp.c_proj.bias"]
        blocks.append(x)
    final = F.layer_norm(x, (C,), w["ln_final.weight"], w["ln_final.bias"], 1e-5)
    pooled = final[torch.arange(B), ids.argmax(-1)] @ w["text_projection"]
    return blocks, final, pooled, lambda t: F.layer_norm(t, (C,), w["ln_final.weight"], w["ln_final.bias"], 1e-5)


def ids_batch():
    row1 = [49406, 320, 1125, 539, 320, 2368, 49407] + [0] * 70  # open_clip pads with 0
    row2 = [49406] + list(range(1000, 1075)) + [49407]  # a full chunk
    return torch.tensor([row1, row2])


PREFIX = "cond_stage_model.model."


@pytest.fixture(scope="module")
def open_clip_sd():
    return open_clip_tower(PREFIX)


@pytest.fixture(scope="module")
def open_clip_encoder(open_clip_sd):
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, slot="clip_h", heads=HEADS)
    return build_encoder(config, open_clip_sd)


def test_open_clip_detection(open_clip_sd):
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX)
    assert (config.layout, config.width, config.layers, config.intermediate, config.projection_dim) == \
        ("open_clip", WIDTH, LAYERS, 4 * WIDTH, PROJ)
    assert config.vocab_size == VOCAB and config.max_positions == POS and config.activation == "gelu"
    assert config.slot == "clip_h" and config.heads == 1  # 64 wide -> one 64-dim head by default


def test_open_clip_parity_final_and_pooled(open_clip_sd, open_clip_encoder):
    ids = ids_batch()
    blocks, final, pooled, _ = reference_open_clip(open_clip_sd, PREFIX, ids)
    with torch.no_grad():
        out = open_clip_encoder.encode_ids(ids)
    torch.testing.assert_close(out.hidden, final, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.pooled, pooled, atol=2e-5, rtol=1e-5)


def test_open_clip_parity_penultimate(open_clip_sd, open_clip_encoder):
    ids = ids_batch()
    blocks, _, _, ln_final = reference_open_clip(open_clip_sd, PREFIX, ids)
    with torch.no_grad():
        raw = open_clip_encoder.encode_ids(ids, layer_idx=-2, layer_norm_hidden=False)  # SDXL bigG
        normed = open_clip_encoder.encode_ids(ids, layer_idx=-2, layer_norm_hidden=True)  # SD2 ViT-H
    torch.testing.assert_close(raw.hidden, blocks[-2], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(normed.hidden, ln_final(blocks[-2]), atol=2e-5, rtol=1e-5)


def test_unprojected_pooled(open_clip_sd, open_clip_encoder):
    ids = ids_batch()
    _, final, _, _ = reference_open_clip(open_clip_sd, PREFIX, ids)
    with torch.no_grad():
        out = open_clip_encoder.encode_ids(ids, projected=False)
    torch.testing.assert_close(out.pooled, final[torch.arange(2), ids.argmax(-1)], atol=2e-5, rtol=1e-5)


def test_open_clip_round_trip(open_clip_sd):
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    converted = {k: t for k, (t, _) in convert_state_dict(config, open_clip_sd).items()}
    back = to_open_clip_layout(converted, PREFIX)
    expected = {k: v for k, v in open_clip_sd.items() if not k.endswith("logit_scale")}
    assert set(back) == set(expected)
    for key, value in expected.items():
        assert torch.equal(back[key], value), key


def test_weights_are_assigned_without_copy(open_clip_sd, open_clip_encoder):
    emb = open_clip_encoder.transformer.text_model.embeddings.token_embedding.weight
    assert emb.data_ptr() == open_clip_sd[PREFIX + "token_embedding.weight"].data_ptr()
    assert not any(p.is_meta for p in open_clip_encoder.parameters())
    assert not any(b.is_meta for b in open_clip_encoder.buffers())
    assert torch.equal(open_clip_encoder.transformer.text_model.embeddings.position_ids[0], torch.arange(POS))


def test_fp16_build_casts(open_clip_sd):
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    encoder = build_encoder(config, open_clip_sd, torch.float16)
    assert {p.dtype for p in encoder.parameters()} == {torch.float16}


# --- CLIP-L (transformers layout) -----------------------------------------------------------

@pytest.fixture(scope="module")
def hf_reference():
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    config = CLIPTextConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=4 * WIDTH,
                            num_hidden_layers=LAYERS, num_attention_heads=HEADS, max_position_embeddings=POS,
                            hidden_act="quick_gelu", eos_token_id=49407)
    config._attn_implementation = "eager"  # the reference runs transformers' plain attention
    return CLIPTextModel(config).eval()


def test_clip_l_parity_with_transformers(hf_reference):
    prefix = "cond_stage_model.transformer.text_model."
    sd = {prefix + k: v for k, v in hf_reference.state_dict().items()}
    sd[prefix + "embeddings.position_ids"] = torch.arange(POS)[None].float()  # as some SD1 files carry
    config = ClipTextConfig.detect_from_weights(header(sd), prefix, heads=HEADS)
    assert (config.layout, config.activation, config.has_projection) == ("hf", "quick_gelu", False)
    encoder = build_encoder(config, sd)
    ids = torch.tensor([[49406, 320, 1125, 539, 320, 2368, 49407] + [49407] * 70])
    with torch.no_grad():
        ref = hf_reference(input_ids=ids, output_hidden_states=True)
        last = encoder.encode_ids(ids)
        penultimate = encoder.encode_ids(ids, layer_idx=-2, layer_norm_hidden=False)
        clip_skip2 = encoder.encode_ids(ids, layer_idx=-2, layer_norm_hidden=True)
    torch.testing.assert_close(last.hidden, ref.last_hidden_state, atol=1e-5, rtol=1e-5)
    # No projection in SD checkpoints: identity, so pooled = transformers' pooler_output.
    torch.testing.assert_close(last.pooled, ref.pooler_output, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(penultimate.hidden, ref.hidden_states[-2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(clip_skip2.hidden, hf_reference.final_layer_norm(ref.hidden_states[-2]),
                               atol=1e-5, rtol=1e-5)
    # Names follow ComfyUI's: <slot>.transformer.text_model.encoder.layers.N...
    assert "text_model.encoder.layers.0.self_attn.q_proj.weight" in dict(encoder.transformer.named_parameters())


def test_embedding_override_equals_token(open_clip_encoder):
    ids = ids_batch()
    replaced = ids.clone()
    replaced[0, 2] = 0  # placeholder
    vector = open_clip_encoder.token_embedding().weight[1125].detach()
    with torch.no_grad():
        expected = open_clip_encoder.encode_ids(ids)
        got = open_clip_encoder.encode_ids(replaced, [EmbeddingOverride(0, 2, vector[None])])
        plain = open_clip_encoder.encode_ids(replaced)
    torch.testing.assert_close(got.hidden, expected.hidden)
    assert not torch.allclose(plain.hidden[0], expected.hidden[0])


def test_bad_overrides_and_ids_raise(open_clip_encoder):
    ids = ids_batch()
    with pytest.raises(TokenizeError, match="width"):
        open_clip_encoder.encode_ids(ids, [EmbeddingOverride(0, 2, torch.zeros(1, WIDTH + 1))])
    with pytest.raises(TokenizeError, match="outside"):
        open_clip_encoder.encode_ids(ids, [EmbeddingOverride(0, 76, torch.zeros(2, WIDTH))])
    with pytest.raises(TokenizeError, match="exceed"):
        open_clip_encoder.encode_ids(torch.zeros(1, 78, dtype=torch.long))


def test_resolve_layer_rules(caplog):
    assert resolve_layer(None, 12) is None
    assert resolve_layer(-1, 12) == 11 and resolve_layer(-2, 12) == 10 and resolve_layer(3, 12) == 3
    assert resolve_layer(-13, 12) is None  # beyond the depth: final output, as ComfyUI
    assert "beyond this 12-layer" in caplog.text  # ... but said in the log, not silently
    with pytest.raises(TokenizeError):
        resolve_layer(12, 12)


def test_pooled_uses_first_eos_with_eos_padding(hf_reference):
    prefix = "t."
    sd = {prefix + k: v for k, v in hf_reference.state_dict().items()}
    encoder = build_encoder(ClipTextConfig.detect_from_weights(header(sd), prefix, heads=HEADS), sd)
    ids = torch.tensor([[49406, 320, 2368, 49407] + [49407] * 73])
    with torch.no_grad():
        out = encoder.encode_ids(ids, projected=False)
    torch.testing.assert_close(out.pooled[0], out.hidden[0, 3])


# --- refusals -----------------------------------------------------------------------------

def test_unexpected_key_is_refused(open_clip_sd):
    sd = dict(open_clip_sd)
    sd[PREFIX + "transformer.resblocks.0.attn.extra"] = torch.zeros(1)
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    with pytest.raises(TextEncoderKeyError, match="attn.extra"):
        build_encoder(config, sd)


def test_wrong_shape_is_refused_naming_the_key(open_clip_sd):
    sd = dict(open_clip_sd)
    key = PREFIX + "transformer.resblocks.1.mlp.c_fc.weight"
    sd[key] = torch.zeros(4 * WIDTH + 1, WIDTH)
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    with pytest.raises(TextEncoderKeyError, match="resblocks.1.mlp.c_fc.weight"):
        build_encoder(config, sd)


def test_missing_key_is_refused(open_clip_sd):
    sd = {k: v for k, v in open_clip_sd.items() if not k.endswith("resblocks.2.ln_2.bias")}
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    with pytest.raises(TextEncoderKeyError, match="missing"):
        build_encoder(config, sd)


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_checkpoint_layout_round_trips(family):
    """Checkpoint -> built encoders -> checkpoint keys gives back every tensor bit-exactly."""
    from tests.fixtures.checkpoints import tiny_state_dict

    from comfy_core.families import encoder_sets
    from comfy_core.text_encoders import detect_text_encoders

    sd = tiny_state_dict(family)
    for config in detect_text_encoders(header({k: v for k, v in sd.items() if v.dtype == torch.float32}), encoder_sets()):
        encoder = build_encoder(config, sd)
        back = to_checkpoint_layout(config, encoder.transformer.state_dict())
        expected = {k: v for k, v in sd.items() if k.startswith(config.prefix)
                    and not k.endswith(("position_ids", "logit_scale"))}
        assert set(back) == set(expected)
        for key, value in expected.items():
            assert torch.equal(back[key], value), key


def test_hf_layout_variants(hf_reference):
    """Pre-`text_model.` SD1 layout, and a CLIP-L that carries its own text projection."""
    state = hf_reference.state_dict()
    old = {"cond_stage_model.transformer." + k: v for k, v in state.items()}
    config = ClipTextConfig.detect_from_weights(header(old), "cond_stage_model.transformer.", heads=HEADS)
    encoder = build_encoder(config, old)
    ids = torch.tensor([[49406, 320, 2368, 49407] + [49407] * 73])
    with torch.no_grad():
        torch.testing.assert_close(encoder.encode_ids(ids).hidden, hf_reference(input_ids=ids).last_hidden_state,
                                   atol=1e-5, rtol=1e-5)
    projected = {"conditioner.embedders.0.transformer.text_model." + k: v for k, v in state.items()}
    projection = torch.randn(PROJ, WIDTH)
    projected["conditioner.embedders.0.transformer.text_projection.weight"] = projection
    config = ClipTextConfig.detect_from_weights(header(projected), "conditioner.embedders.0.transformer.text_model.",
                                                heads=HEADS)
    assert config.has_projection and config.projection_dim == PROJ
    encoder = build_encoder(config, projected)
    with torch.no_grad():
        out = encoder.encode_ids(ids)
        unprojected = encoder.encode_ids(ids, projected=False)
    torch.testing.assert_close(out.pooled, unprojected.pooled @ projection.T)
    back = to_checkpoint_layout(config, encoder.transformer.state_dict())
    assert torch.equal(back["conditioner.embedders.0.transformer.text_projection.weight"], projection)


def test_open_clip_image_tower_keys_are_skipped_and_logged(open_clip_sd, caplog):
    sd = dict(open_clip_sd)
    sd[PREFIX + "visual.conv1.weight"] = torch.zeros(4, 3, 2, 2)
    config = ClipTextConfig.detect_from_weights(header(open_clip_sd), PREFIX, heads=HEADS)
    with caplog.at_level("INFO"):
        encoder = build_encoder(config, sd)
    assert "skipped 1 image-tower keys" in caplog.text
    assert not any("visual" in name for name, _ in encoder.named_parameters())


def test_building_a_text_encoder_imports_no_transformers_modeling_code(tiny_sd1_ckpt):
    """The CLIP tower is ours (clip_text_model.py): loading a checkpoint's text encoder must not
    import transformers' modeling modules (~2.5 s on a small CPU), which would fall on the first
    prompt of a fresh server. Checked in a fresh interpreter, where nothing imported them yet."""
    import subprocess
    import sys

    path = tiny_sd1_ckpt  # the session's tiny SD1 checkpoint, written once for every test
    code = ("import sys; from comfy_core import load_checkpoint; "
            f"m, clip, v = load_checkpoint({str(path)!r}, output_vae=False); "
            "clip.encode_from_tokens(clip.tokenize('a cat')); "
            "print(sorted(n for n in sys.modules if n.startswith('transformers.models.') and 'modeling' in n))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
