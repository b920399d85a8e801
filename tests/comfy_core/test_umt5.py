"""Wan's umT5-XXL text encoder (comfy_core/text_encoders/umt5*.py) as ComfyUI 0.3.64's
`comfy/text_encoders/wan.py` has it: numerics against transformers' `UMT5EncoderModel` on the same
tiny random weights (with and without the attention mask), the file's own SentencePiece tokenizer
against `sentencepiece` on the same model, CLIPLoader type "wan" -> CONDITIONING [1, 512, width]
with zeros after the prompt's tokens, prompt weights, the missing-tokenizer error, fp16 / fp8 /
scaled-fp8 files, and Wan-AI's and transformers' layouts."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders.t5_config import T5Config, T5DetectionError
from comfy_core.text_encoders.towers import detect_tower
from comfy_core.families.wan.encoders import WAN_TEXT_ENCODERS, WanT5Model, WanT5Tokenizer
from comfy_core.text_encoders.umt5 import UMT5XXlModel, build_umt5_encoder
from comfy_core.text_encoders.umt5_keys import RenamedMapping, is_wan_layout
from comfy_core.text_encoders.umt5_tokenizer import (MissingTokenizerError, SentencePieceTokenizer, UMT5XXlTokenizer,
                                                     umt5_tokenizer)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.t5_files import header_of, tiny_t5_state_dict
from tests.fixtures.umt5_files import (TINY_UMT5, spiece_model_bytes, spiece_tensor, tiny_umt5_state_dict,
                                       to_wan_layout, write_umt5_file)

IDS = torch.tensor([[5, 17, 30, 2, 9, 1, 0, 0, 0, 0], [7, 7, 40, 1, 0, 0, 0, 0, 0, 0]])  # [2, 10], end 1, pad 0


def _config(state: dict) -> T5Config:
    return T5Config.detect_from_weights(header_of(state), "")


def _reference(state: dict):
    """transformers' UMT5EncoderModel on the same weights (float32)."""
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(vocab_size=TINY_UMT5["vocab_size"], d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                        feed_forward_proj="gated-gelu", is_encoder_decoder=False, dropout_rate=0.0)
    model = UMT5EncoderModel(config).eval()
    model.load_state_dict({**state, "encoder.embed_tokens.weight": state["shared.weight"]}, strict=True)
    return model


@pytest.fixture(scope="module")
def state():
    return tiny_umt5_state_dict()


@pytest.fixture(scope="module")
def tower(state):
    return build_umt5_encoder(_config(state), state)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("umt5")
    return {name: write_umt5_file(root / f"umt5_{name}.safetensors", storage=storage, tokenizer=tokenizer,
                                  layout=layout)
            for name, storage, tokenizer, layout in (
                ("fp32", "fp32", True, "comfy"), ("fp16", "fp16", True, "comfy"), ("fp8", "fp8", True, "comfy"),
                ("scaled", "scaled_fp8", True, "comfy"), ("bare", "fp32", False, "comfy"),
                ("transformers", "fp32", True, "transformers"))} | {
        "wan": write_umt5_file(root / "models_t5_umt5-xxl-enc-bf16.pth", layout="wan")}


@pytest.fixture(scope="module")
def clip(files):
    return load_text_encoders([files["fp32"]], "wan")


# --- detection ---------------------------------------------------------------------------------------

def test_per_block_tables_are_detected_as_umt5(state):
    config = _config(state)
    assert config.relative_attention_per_block and config.slot == "umt5xxl"
    assert (config.d_model, config.num_heads, config.d_kv, config.d_ff, config.num_layers) == (32, 4, 8, 48, 2)
    assert config.gated and config.vocab_size == TINY_UMT5["vocab_size"]
    plain = T5Config.detect_from_weights(header_of(tiny_t5_state_dict()), "")
    assert not plain.relative_attention_per_block and plain.slot == "t5xxl"


def test_a_block_without_its_table_is_a_typed_error():
    header = header_of(tiny_umt5_state_dict(num_layers=3))
    del header["encoder.block.2.layer.0.SelfAttention.relative_attention_bias.weight"]
    with pytest.raises(T5DetectionError, match=r"encoder\.block\.2\.layer\.0\.SelfAttention\.relative_attention_bias"):
        T5Config.detect_from_weights(header, "")


def test_t5_and_umt5_slots_refuse_each_others_towers(state):
    t5_slot = dataclasses.replace(WAN_TEXT_ENCODERS.encoders[0], kind="t5", slot="t5xxl")
    with pytest.raises(T5DetectionError, match="umT5 encoder where the t5xxl slot needs a T5"):
        detect_tower(header_of(state), "", t5_slot)
    with pytest.raises(T5DetectionError, match="T5 encoder where the umt5xxl slot needs a umT5"):
        detect_tower(header_of(tiny_t5_state_dict()), "", WAN_TEXT_ENCODERS.encoders[0])


# --- numerics against transformers -------------------------------------------------------------------

def test_states_match_transformers_umt5_without_mask(tower, state):
    reference = _reference(state)
    with torch.no_grad():
        expected = reference(input_ids=IDS).last_hidden_state
    torch.testing.assert_close(tower.encode_ids(IDS), expected, atol=1e-5, rtol=1e-5)


def test_states_match_transformers_umt5_with_the_mask(tower, state):
    reference = _reference(state)
    mask = (torch.arange(IDS.shape[1])[None] <= (IDS == 1).long().argmax(-1)[:, None]).long()  # through the end token
    with torch.no_grad():
        expected = reference(input_ids=IDS, attention_mask=mask).last_hidden_state
    ours = tower.encode_ids(IDS, attention_mask=mask)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    # the mask changes the result (padding is not attended), so the test sees it
    assert (ours - tower.encode_ids(IDS)).abs().max() > 1e-3


def test_every_block_uses_its_own_table(tower, state):
    """Zeroing block 1's table changes the output: it is not block 0's table reused (T5's rule)."""
    changed = dict(state)
    changed["encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"] = torch.zeros(32, 4)
    other = build_umt5_encoder(_config(changed), changed)
    assert (other.encode_ids(IDS) - tower.encode_ids(IDS)).abs().max() > 1e-3


def test_forward_masks_pads_and_zeroes_states_after_the_end_token(tower, state):
    """ComfyUI's UMT5XXlModel: enable_attention_masks and zero_out_masked; no mask in the output."""
    out = tower(IDS)
    assert len(out) == 2 and out[1] is None
    reference = _reference(state)
    mask = torch.tensor([[1] * 6 + [0] * 4, [1] * 4 + [0] * 6])
    with torch.no_grad():
        expected = reference(input_ids=IDS, attention_mask=mask).last_hidden_state * mask[..., None]
    torch.testing.assert_close(out[0], expected, atol=1e-5, rtol=1e-5)
    assert (out[0][0, 6:] == 0).all() and (out[0][1, 4:] == 0).all() and (out[0][0, :6].abs().sum(-1) > 0).all()


# --- tokenizer -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def processor():
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=spiece_model_bytes())


@pytest.fixture(scope="module")
def tokenizer():
    return UMT5XXlTokenizer(SentencePieceTokenizer.from_tensor(spiece_tensor()))


@pytest.mark.parametrize("text", ["a cat runs in the park", "一只猫 läuft im Wald, cinematic lighting.",
                                  "  spaces   inside  ", "unknownxyzword 123"])
def test_ids_are_sentencepieces_then_end_then_pad_to_512(tokenizer, processor, text):
    (chunk,) = tokenizer.tokenize_with_weights(text)
    ids = [t for t, _ in chunk]
    pieces = processor.encode(text)
    assert ids[:len(pieces)] == pieces and ids[len(pieces)] == 1
    assert ids[len(pieces) + 1:] == [0] * (512 - len(pieces) - 1) and len(ids) == 512
    assert all(w == 1.0 for _, w in chunk)


def test_long_prompts_stay_one_chunk_and_options_change_the_padding(tokenizer, processor):
    text = " ".join(["a young woman dances sur la plage"] * 100)
    (chunk,) = tokenizer.tokenize_with_weights(text)
    assert len(chunk) == len(processor.encode(text)) + 1 > 512
    (short,) = tokenizer.tokenize_with_weights("a cat", tokenizer_options={"umt5xxl_min_length": 8})
    assert len(short) == 8
    (padded,) = tokenizer.tokenize_with_weights("a cat", tokenizer_options={"umt5xxl_min_length": 1,
                                                                             "umt5xxl_min_padding": 3})
    assert [t for t, _ in padded] == processor.encode("a cat") + [1, 0, 0, 0]


def test_weights_apply_to_the_weighted_pieces(tokenizer, processor):
    (chunk,) = tokenizer.tokenize_with_weights("a cat (in the park:1.5) at sunset")
    weighted = [t for t, w in chunk if w == 1.5]
    assert weighted == processor.encode("in the park")
    assert [t for t, w in chunk[:len(processor.encode("a cat "))]] == processor.encode("a cat ")


def test_tokenizer_surface_and_state_dict(tokenizer, processor):
    assert tokenizer.start_token is None and tokenizer.end_token == 1 and tokenizer.pad_token == 0
    assert tokenizer.min_length == 512 and tokenizer.embedding_key == "umt5xxl"
    assert tokenizer.tokenizer("a cat")["input_ids"] == processor.encode("a cat") + [1]
    assert torch.equal(tokenizer.state_dict()["spiece_model"], spiece_tensor())
    assert tokenizer.untokenize([(4, 1.0)])[0][1] == processor.id_to_piece(4)


def test_no_spiece_model_is_a_missing_tokenizer_error():
    with pytest.raises(MissingTokenizerError, match="has no tokenizer.*umt5_xxl_fp16.safetensors"):
        umt5_tokenizer({}, source="x.safetensors")


def test_a_tensor_that_is_not_a_sentencepiece_model_is_refused():
    from comfy_core.text_encoders.errors import VocabularyError

    with pytest.raises(VocabularyError, match="SentencePiece"):
        SentencePieceTokenizer.from_tensor(torch.zeros(16, dtype=torch.float32))
    with pytest.raises(VocabularyError, match="not a SentencePiece model"):
        SentencePieceTokenizer.from_tensor(torch.arange(64, dtype=torch.uint8))


# --- CLIPLoader type "wan" ---------------------------------------------------------------------------

def test_cliploader_wan_gives_comfyuis_classes(clip):
    assert isinstance(clip.cond_stage_model, WanT5Model) and isinstance(clip.tokenizer, WanT5Tokenizer)
    assert isinstance(clip.cond_stage_model.umt5xxl, UMT5XXlModel)
    assert clip.tokenizer.clip_umt5xxl is clip.tokenizer.umt5xxl
    assert torch.equal(clip.tokenizer.state_dict()["spiece_model"], spiece_tensor())


def test_conditioning_is_512_tokens_with_zeros_after_the_prompt(clip, processor, tower, state):
    text = "a cat runs in the park"
    tokens = clip.tokenize(text)
    assert list(tokens) == ["umt5xxl"]
    cond = clip.encode_from_tokens_scheduled(tokens)
    states, extra = cond[0]
    assert states.shape == (1, 512, 32) and "attention_mask" not in extra and extra.get("pooled_output") is None
    used = len(processor.encode(text)) + 1  # the prompt's tokens and the end token
    assert (states[0, used:] == 0).all() and (states[0, :used].abs().sum(-1) > 0).all()
    ids = torch.tensor([[t for t, _ in tokens["umt5xxl"][0]]])
    # text encoders are stored in fp16 by default (ComfyUI's), computed in float32
    expected = build_umt5_encoder(_config(state), state, torch.float16)(ids)[0]
    torch.testing.assert_close(states, expected, atol=1e-6, rtol=1e-6)
    assert (states - tower(ids)[0]).abs().max() < 1e-2 * states.abs().max()


def test_prompt_weights_interpolate_from_the_empty_prompt(clip):
    plain = clip.encode_from_tokens(clip.tokenize("a cat in the park"))
    weighted = clip.encode_from_tokens(clip.tokenize("a cat (in the park:1.3)"))
    empty = clip.cond_stage_model.umt5xxl([[1] + [0] * 511])[0]
    tokens = clip.tokenize("a cat (in the park:1.3)")["umt5xxl"][0]
    index = next(i for i, (_, w) in enumerate(tokens) if w == 1.3)
    torch.testing.assert_close(weighted[0, index], empty[0, index] + (plain[0, index] - empty[0, index]) * 1.3,
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weighted[0, 0], plain[0, 0], atol=0, rtol=0)


def test_cliploader_node_type_wan(files, tmp_path):
    """Through the CLIPLoader node (models/text_encoders), as a workflow runs it."""
    from graph.context import NodeContext, reset_current, set_current
    from nodes.conditioning import clip_text_encode
    from nodes.environment import Environment
    from nodes.loaders import clip_loader
    target = tmp_path / "models" / "text_encoders" / "umt5_xxl_fp16.safetensors"
    target.parent.mkdir(parents=True)
    target.write_bytes(files["fp16"].read_bytes())
    token = set_current(NodeContext("p", "1", "1", None, Environment.rooted_at(tmp_path, mmap=False)))
    try:
        clip = clip_loader("umt5_xxl_fp16.safetensors", "wan")[0]
        (cond,) = clip_text_encode("a robot flies at sunset", clip)
    finally:
        reset_current(token)
    assert cond[0][0].shape == (1, 512, 32)


def test_a_file_without_spiece_model_is_refused_naming_it(files):
    with pytest.raises(MissingTokenizerError, match="umt5_bare.safetensors: this umT5 text encoder file has no "
                                                    "tokenizer"):
        load_text_encoders([files["bare"]], "wan")


def test_type_wan_is_the_wan_families_set_and_refuses_a_t5_file(tmp_path):
    from comfy_core.split import ClipFilesError
    from comfy_core.split.clip_types import NEEDS, supported_types
    from tests.fixtures.dit_checkpoints import save

    assert "wan" not in NEEDS and "wan" in supported_types(default_registry().encoder_sets())
    assert any(f.text_encoders is WAN_TEXT_ENCODERS for f in default_registry())
    t5 = save(tiny_t5_state_dict(), tmp_path / "t5xxl_fp16.safetensors")
    with pytest.raises(ClipFilesError, match="t5xxl_fp16.safetensors: T5-XXL .*wan needs umT5-XXL"):
        load_text_encoders([t5], "wan")


def test_other_types_refuse_a_umt5_file(files):
    from comfy_core.split import ClipFilesError

    with pytest.raises(ClipFilesError, match="umT5-XXL"):
        load_text_encoders([files["fp32"]], "sd3")


# --- storage and layouts ------------------------------------------------------------------------------

def _encode(clip, text="a knight walks through the city"):
    return clip.encode_from_tokens(clip.tokenize(text))


def test_fp16_file_equals_the_fp32_file_in_the_default_fp16_storage(files, clip):
    fp16 = load_text_encoders([files["fp16"]], "wan")
    assert fp16.cond_stage_model.umt5xxl.dtype == torch.float16
    torch.testing.assert_close(_encode(fp16), _encode(clip), atol=0, rtol=0)


def test_fp8_file_stays_fp8_and_is_close(files, clip):
    fp8 = load_text_encoders([files["fp8"]], "wan")
    weight = fp8.cond_stage_model.umt5xxl.transformer.encoder.block[1].layer[0].SelfAttention.q.weight
    assert weight.dtype == torch.float8_e4m3fn
    a, b = _encode(fp8), _encode(clip)
    assert torch.isfinite(a).all() and (a - b).abs().max() < 0.2 * b.abs().max()


def test_scaled_fp8_file_keeps_fp8_and_applies_the_scales(files, clip, state):
    """umt5_xxl_fp8_e4m3fn_scaled: the linear layers keep the fp8 weights and their scales
    (ComfyUI's scaled_fp8_ops), the scale applied in each call."""
    from comfy_core.models.storage_cast import ScaledFp8Linear

    scaled = load_text_encoders([files["scaled"]], "wan")
    layer = scaled.cond_stage_model.umt5xxl.transformer.encoder.block[0].layer[0].SelfAttention.q
    assert isinstance(layer, ScaledFp8Linear) and layer.weight.dtype == torch.float8_e4m3fn
    true = state["encoder.block.0.layer.0.SelfAttention.q.weight"]
    assert layer.scale_weight.dtype == torch.float32 and layer.scale_weight == true.abs().max() / 448.0
    assert (layer.weight.float() * layer.scale_weight - true).abs().max() <= 0.07 * true.abs().max()
    a, b = _encode(scaled), _encode(clip)
    assert (a - b).abs().max() < 0.15 * b.abs().max()
    # without the scales the states would be far off: the test sees whether they are applied
    unscaled = build_umt5_encoder(_config(state), {k: (layer.weight.float() if k.endswith("q.weight") else v)
                                                   for k, v in state.items()})
    assert (unscaled.encode_ids(IDS) - build_umt5_encoder(_config(state), state).encode_ids(IDS)).abs().max() > 0.1


def test_transformers_layout_with_the_tied_table_loads_the_same(files, clip):
    other = load_text_encoders([files["transformers"]], "wan")
    torch.testing.assert_close(_encode(other), _encode(clip), atol=0, rtol=0)


def test_wan_ai_layout_is_renamed(files, state, tower):
    wan = to_wan_layout(state)
    assert is_wan_layout(wan) and not is_wan_layout(state)
    renamed = RenamedMapping(wan)
    assert set(renamed) == set(state)
    built = build_umt5_encoder(_config(dict(renamed)), renamed)
    torch.testing.assert_close(built.encode_ids(IDS), tower.encode_ids(IDS), atol=0, rtol=0)
    # the original .pth has no tokenizer: CLIPLoader says so, naming the file
    with pytest.raises(MissingTokenizerError, match="models_t5_umt5-xxl-enc-bf16.pth"):
        load_text_encoders([files["wan"]], "wan")


def test_wan_ai_pth_with_a_tokenizer_given_loads_like_comfyuis_file(files, clip):
    wan = load_text_encoders([files["wan"]], "wan", tokenizer_data={"spiece_model": spiece_model_bytes()})
    torch.testing.assert_close(_encode(wan), _encode(clip), atol=0, rtol=0)


def test_embedding_vectors_of_the_umt5_width_replace_tokens(clip):
    vector = torch.randn(2, 32, generator=torch.Generator().manual_seed(3))
    seen = []

    def lookup(name, key, width):
        seen.append((name, key, width))
        return vector if name == "myconcept" else None

    tokenizer = clip.tokenizer.with_embedding_lookup(lookup)
    (chunk,) = tokenizer.tokenize_with_weights("a cat embedding:myconcept in the park")["umt5xxl"]
    assert seen == [("myconcept", "umt5xxl", 32)]
    vectors = [t for t, _ in chunk if isinstance(t, torch.Tensor)]
    assert len(vectors) == 2 and torch.equal(vectors[0], vector[0]) and len(chunk) == 512


def test_a_lora_delta_on_a_scaled_fp8_layer_patches_the_true_weight(files):
    """A weight patch on a kept-fp8 layer works on the true (scaled) weight and is stored back
    divided by the scale (ComfyUI's convert_weight / set_weight protocol), then restored."""
    scaled = load_text_encoders([files["scaled"]], "wan")
    key = "umt5xxl.transformer.encoder.block.0.layer.0.SelfAttention.v.weight"
    layer = scaled.cond_stage_model.umt5xxl.transformer.encoder.block[0].layer[0].SelfAttention.v
    stored = layer.weight.detach().clone()
    true = stored.float() * layer.scale_weight
    top = true.abs().max()
    # a delta that keeps the patched weight inside fp8's range at this scale (the layer keeps its scale)
    noise = 0.1 * top * torch.randn(true.shape, generator=torch.Generator().manual_seed(4))
    delta = (true + noise).clamp(-0.9 * top, 0.9 * top) - true
    patched = scaled.clone()
    assert patched.add_patches({key: ("diff", (delta,))}, 1.0) == [key]
    with patched.patcher.applied():
        applied = patched.patcher.applied_tensor(key)
        assert applied.dtype == torch.float8_e4m3fn
        value = applied.float() * layer.scale_weight
    wanted = true + delta
    assert (value - wanted).abs().max() <= 0.07 * top  # fp8's rounding of the patched weight
    assert (value - true).abs().max() > 0.5 * delta.abs().max()  # the delta is in it
    assert torch.equal(layer.weight, stored)  # restored bit-exactly
    assert not torch.equal(patched.encode_from_tokens(patched.tokenize("a cat")),
                           scaled.encode_from_tokens(scaled.tokenize("a cat")))
