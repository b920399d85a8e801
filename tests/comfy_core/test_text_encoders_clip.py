"""The CLIP object: ComfyUI's API and semantics over tiny random encoders with real key names."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import encoder_set_for, encoder_sets
from comfy_core.patching import ClipPatcher
from comfy_core.text_encoders import (
    CLIP,
    ClipTokenizer,
    TokenizeError,
    build_clip,
    detect_text_encoders,
)
from comfy_core.text_encoders.weighting import empty_tokens
from tests.fixtures.checkpoints import tiny_state_dict

BOS, EOS = 49406, 49407


class _Info:
    def __init__(self, t):
        self.shape, self.dtype = tuple(t.shape), "F32"


@pytest.fixture(scope="module")
def clip_tokenizer():
    return ClipTokenizer.from_file()


def _build(family, clip_tokenizer):
    sd = tiny_state_dict(family)
    configs = detect_text_encoders({k: _Info(v) for k, v in sd.items()}, encoder_sets())
    return build_clip(configs, sd, clip_tokenizer=clip_tokenizer, spec=encoder_set_for(configs))


@pytest.fixture(scope="module")
def clips(clip_tokenizer):
    return {family: _build(family, clip_tokenizer) for family in ("sd1", "sd2", "sdxl", "sdxl_refiner")}


def _ids(chunks):
    return torch.tensor([[t for t, _ in c] for c in chunks])


def _direct(clip, slot, ids, layer_idx, norm, projected=True):
    with clip.patcher.applied() as encoders, torch.no_grad():
        return encoders.encoder(slot).encode_ids(ids, layer_idx=layer_idx, layer_norm_hidden=norm, projected=projected)


def test_structure_and_comfy_names(clips):
    assert isinstance(clips["sdxl"].patcher, ClipPatcher)
    assert clips["sdxl"].patcher.encoder_slots() == ["clip_l", "clip_g"]
    names = dict(clips["sdxl"].cond_stage_model.named_parameters())
    assert "clip_l.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight" in names
    assert "clip_g.transformer.text_projection.weight" in names
    assert [c.family for c in clips.values()] == ["sd1", "sd2", "sdxl", "sdxl_refiner"]


@pytest.mark.parametrize("family, keys, pad, width", [
    ("sd1", {"l"}, EOS, 64), ("sd2", {"h"}, 0, 64), ("sdxl", {"l", "g"}, None, 128), ("sdxl_refiner", {"g"}, 0, 64)])
def test_tokens_and_shapes(clips, family, keys, pad, width):
    clip = clips[family]
    tokens = clip.tokenize("a photo of a cat")
    assert set(tokens) == keys
    if pad is not None:
        (chunks,) = tokens.values()
        assert chunks[0][-1][0] == pad
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    assert cond.shape == (1, 77, width) and cond.dtype == torch.float32
    assert pooled.shape == (1, 64)


def test_sdxl_pads_per_encoder(clips):
    tokens = clips["sdxl"].tokenize("a cat")
    assert tokens["l"][0][-1][0] == EOS and tokens["g"][0][-1][0] == 0


def test_default_layers_per_family(clips):
    """SD1 last layer normed; SD2 penultimate normed; SDXL penultimate raw, pooled from bigG."""
    for family, slot, layer, norm in (("sd1", "clip_l", None, True), ("sd2", "clip_h", -2, True),
                                      ("sdxl_refiner", "clip_g", -2, False)):
        clip = clips[family]
        tokens = clip.tokenize("a photo of a cat")
        ids = _ids(next(iter(tokens.values())))
        expected = _direct(clip, slot, ids, layer, norm)
        cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
        torch.testing.assert_close(cond, expected.hidden)
        torch.testing.assert_close(pooled, expected.pooled)
    clip = clips["sdxl"]
    tokens = clip.tokenize("a photo of a cat")
    l_out = _direct(clip, "clip_l", _ids(tokens["l"]), -2, False)
    g_out = _direct(clip, "clip_g", _ids(tokens["g"]), -2, False)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    torch.testing.assert_close(cond, torch.cat([l_out.hidden, g_out.hidden], dim=-1))
    torch.testing.assert_close(pooled, g_out.pooled)


def test_comfy_weighting_interpolates_from_empty_prompt(clips):
    clip = clips["sd2"]  # pad 0: the empty prompt is BOS, EOS, 0 ...
    tokens = clip.tokenize("a (cat:1.5) on a (mat:0.5)")
    chunks = tokens["h"]
    weights = torch.tensor([w for _, w in chunks[0]])
    assert sorted(set(weights.tolist())) == [0.5, 1.0, 1.5]
    ids = _ids(chunks)
    z = _direct(clip, "clip_h", ids, -2, True).hidden[0]
    z_empty = _direct(clip, "clip_h", torch.tensor([empty_tokens(77, 0)]), -2, True).hidden[0]
    expected = torch.where(weights[:, None] != 1, z_empty + (z - z_empty) * weights[:, None], z)
    cond = clip.encode_from_tokens(tokens)
    torch.testing.assert_close(cond[0], expected, atol=1e-5, rtol=1e-5)
    unweighted = clip.encode_from_tokens(clip.tokenize("a cat on a mat"))
    torch.testing.assert_close(unweighted[0], z, atol=1e-5, rtol=1e-5)  # same ids, weight 1: untouched


def test_long_prompt_concatenates_chunks(clips):
    clip = clips["sd1"]
    tokens = clip.tokenize(" ".join(["masterpiece"] * 100))
    assert len(tokens["l"]) == 2
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    assert cond.shape == (1, 154, 64)
    first = _direct(clip, "clip_l", _ids(tokens["l"][:1]), None, True)
    torch.testing.assert_close(pooled, first.pooled)  # pooled from the first chunk only
    torch.testing.assert_close(cond[:, :77], first.hidden)


def test_clip_layer_on_clone_only(clips):
    clip = clips["sd1"]
    tokens = clip.tokenize("a photo of a cat")
    base = clip.encode_from_tokens(tokens)
    skipped = clip.clone()
    skipped.clip_layer(-2)
    assert clip.layer_idx is None and skipped.layer_idx == -2
    assert skipped.patcher.signature() != clip.patcher.signature()
    expected = _direct(clip, "clip_l", _ids(tokens["l"]), -2, True).hidden
    torch.testing.assert_close(skipped.encode_from_tokens(tokens), expected)
    torch.testing.assert_close(clip.encode_from_tokens(tokens), base)
    last = clip.clone()
    last.clip_layer(-1)
    torch.testing.assert_close(last.encode_from_tokens(tokens), base)  # -1 normed == final output
    skipped.clip_layer(None)  # back to the family default
    assert skipped.layer_idx is None and skipped.patcher.signature() == clip.clone().patcher.signature()


def test_clip_layer_applies_to_both_sdxl_encoders(clips):
    clip = clips["sdxl"].clone()
    clip.clip_layer(-1)
    tokens = clip.tokenize("a cat")
    assert clip.encoder_options("clip_l").layer_idx == -1 and clip.encoder_options("clip_g").layer_idx == -1
    assert not clip.encoder_options("clip_g").layer_norm_hidden
    l_out = _direct(clip, "clip_l", _ids(tokens["l"]), -1, False)
    g_out = _direct(clip, "clip_g", _ids(tokens["g"]), -1, False)
    torch.testing.assert_close(clip.encode_from_tokens(tokens), torch.cat([l_out.hidden, g_out.hidden], -1))


def test_weight_patches_apply_only_inside_encode(clips):
    clip = clips["sd1"]
    tokens = clip.tokenize("a photo of a cat")
    base = clip.encode_from_tokens(tokens)
    key = "clip_l.transformer.text_model.encoder.layers.0.mlp.fc1.weight"
    original = clip.get_sd()[key].clone()
    patched = clip.clone()
    applied = patched.add_patches({key: torch.randn_like(original) * 0.5, "not.a.key": torch.zeros(1)})
    assert applied == [key]
    assert key in patched.get_key_patches()
    assert not torch.allclose(patched.encode_from_tokens(tokens), base)
    torch.testing.assert_close(clip.encode_from_tokens(tokens), base)
    assert torch.equal(clip.get_sd()[key], original)


def test_scheduled_and_dict_outputs(clips):
    clip = clips["sdxl"]
    tokens = clip.tokenize("a cat")
    conditioning = clip.encode_from_tokens_scheduled(tokens, add_dict={"width": 1024})
    assert len(conditioning) == 1
    cond, options = conditioning[0]
    assert cond.shape == (1, 77, 128) and options["pooled_output"].shape == (1, 64) and options["width"] == 1024
    out = clip.encode_from_tokens(tokens, return_dict=True)
    torch.testing.assert_close(out["cond"], cond)
    unprojected = clip.encode_from_tokens(tokens, return_pooled="unprojected")[1]
    g = _direct(clip, "clip_g", _ids(tokens["g"]), -2, False, projected=False)
    torch.testing.assert_close(unprojected, g.pooled)
    torch.testing.assert_close(clip.encode("a cat"), cond)


def test_embedding_tokens(clips):
    clip = clips["sd1"].clone()
    with clip.patcher.applied() as encoders:
        vector = encoders.clip_l.token_embedding().weight[2368].detach().clone()  # "cat</w>"
    clip.set_embedding_lookup(lambda name, key, width: vector[None] if name == "kitty" else None)
    via_embedding = clip.encode_from_tokens(clip.tokenize("a photo of a embedding:kitty"))
    plain = clips["sd1"].encode_from_tokens(clips["sd1"].tokenize("a photo of a cat"))
    assert clips["sd1"].tokenizer.clip_l.embedding_lookup is None  # the input CLIP is untouched
    torch.testing.assert_close(via_embedding, plain)


def test_bad_tokens_raise(clips):
    clip = clips["sd1"]
    with pytest.raises(TokenizeError, match="lack key 'l'"):
        clip.encode_from_tokens({"g": clip.tokenize("a")["l"]})
    chunks = clip.tokenize("a")["l"]
    chunks[0][3] = ("x", 1.0)
    with pytest.raises(TokenizeError, match="neither an id"):
        clip.encode_from_tokens({"l": chunks})


def test_embedding_vector_of_another_width_is_left_out_as_comfyui_does(clips):
    # SDClipModel.process_tokens: a vector that does not fit is not inserted; the row gets one
    # pad token (EOS for CLIP-L) at its end instead.
    clip = clips["sd1"]
    chunks = clip.tokenize("a photo")["l"]
    with_bad = [chunks[0][:2] + [(torch.zeros(5), 1.0)] + chunks[0][2:-1]]
    expected = [chunks[0][:2] + chunks[0][2:-1] + [(49407, 1.0)]]
    torch.testing.assert_close(clip.encode_from_tokens({"l": with_bad}), clip.encode_from_tokens({"l": expected}))
    with pytest.raises(TypeError):
        clip.clone().clip_layer("-2")


def test_build_from_file_in_fp16(tiny_sd1_ckpt, clip_tokenizer):
    from safetensors.torch import load_file

    from comfy_core.checkpoint.header import read_safetensors_header

    configs = detect_text_encoders(read_safetensors_header(tiny_sd1_ckpt).tensors, encoder_sets())
    clip = build_clip(configs, load_file(str(tiny_sd1_ckpt)), torch.float16, clip_tokenizer=clip_tokenizer,
                      spec=encoder_set_for(configs))
    assert {p.dtype for p in clip.cond_stage_model.parameters()} == {torch.float16}
    cond = clip.encode("a cat")
    assert cond.dtype == torch.float32 and torch.isfinite(cond).all()


def test_fp16_weights_compute_in_float32_as_comfyui(tiny_sd1_ckpt, clip_tokenizer):
    # ComfyUI stores text encoders in fp16 on the CPU but runs them in float32 (comfy/ops.py
    # manual_cast, dtype=float32 in SDClipModel.forward): the result equals a float32 encoder
    # holding the same fp16-rounded weights, and the stored weights stay fp16.
    from safetensors.torch import load_file

    from comfy_core.checkpoint.header import read_safetensors_header

    configs = detect_text_encoders(read_safetensors_header(tiny_sd1_ckpt).tensors, encoder_sets())
    rounded = {k: v.half().float() if v.is_floating_point() else v for k, v in load_file(str(tiny_sd1_ckpt)).items()}
    half = build_clip(configs, rounded, torch.float16, clip_tokenizer=clip_tokenizer, spec=encoder_set_for(configs))
    full = build_clip(configs, rounded, torch.float32, clip_tokenizer=clip_tokenizer, spec=encoder_set_for(configs))
    tokens = half.tokenize("a photo of a (cat:1.2), embedding:none")
    got, got_pooled = half.encode_from_tokens(tokens, return_pooled=True)
    want, want_pooled = full.encode_from_tokens(tokens, return_pooled=True)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_pooled, want_pooled, rtol=1e-6, atol=1e-6)
    assert {p.dtype for p in half.cond_stage_model.parameters()} == {torch.float16}


def test_checkpoint_loads_share_one_default_tokenizer(tiny_sd1_ckpt, tiny_sdxl_ckpt):
    from comfy_core.loading import load_checkpoint
    from comfy_core.text_encoders.tokenizer import ClipTokenizer

    _, first, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    _, second, _ = load_checkpoint(tiny_sdxl_ckpt, output_vae=False)
    shared = ClipTokenizer.shared_default()
    assert first.tokenizer.clip_l.clip_tokenizer is shared
    assert second.tokenizer.clip_l.clip_tokenizer is shared and second.tokenizer.clip_g.clip_tokenizer is shared
