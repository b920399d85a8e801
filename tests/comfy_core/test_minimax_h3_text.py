"""MiniMax H3's text encoder (CLIPLoader type "minimax"): the raw presentation with its vision
blocks and labels, the extra tokens, the last block's states with the modality tags, two-frame
video blocks, and the NVFP4-AWQ file layout (packed weights with AWQ's input pre-scale)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.minimax_h3.clip import (EXTRA_TOKENS, MINIMAX_H3_TEXT_ENCODERS, TOKEN_KEY, VIDEO_BLOCK,
                                                 MiniMaxH3Tokenizer, encode_row, minimax_backend)
from comfy_core.text_encoders.qwen3vl import Qwen3VLConfig, build_qwen3vl_encoder
from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer
from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict
from tests.fixtures.template_models_minimax_h3 import nvfp4_awq_state

VS, VE = 151652, 151653


@pytest.fixture(scope="module")
def tokenizer() -> MiniMaxH3Tokenizer:
    return MiniMaxH3Tokenizer({"qwen3vl_8b": QwenTokenizer(TOKEN_KEY, 64)})


@pytest.fixture(scope="module")
def state() -> dict:
    return tiny_qwen3vl_state_dict(seed=5)


@pytest.fixture(scope="module")
def tower(state):
    return build_qwen3vl_encoder(Qwen3VLConfig.detect_from_weights(state), state)


def _text(tokenizer, row) -> str:
    return "".join("<V>" if isinstance(t, dict) else minimax_backend().decode([t], skip_special_tokens=False)
                   for t, _ in row)


def test_the_presentation_is_raw_text_with_labelled_vision_blocks(tokenizer):
    image = torch.rand(1, 32, 32, 3)
    (row,) = tokenizer.tokenize_with_weights("a (red:1.5) fox", images=[image, image])[TOKEN_KEY]
    assert _text(tokenizer, row) == ("<Picture 1>: <|vision_start|><V><|vision_end|><Picture 2>: "
                                     "<|vision_start|><V><|vision_end|>a (red:1.5) fox")  # no template, no weights
    assert all(w == 1.0 for _, w in row)
    frames = torch.rand(3, 32, 32, 3)
    items = [{"type": "image", "data": image}, {"type": "audio"}, {"type": "video", "data": frames}]
    (row,) = tokenizer.tokenize_with_weights("go", minimax_ref_items=items)[TOKEN_KEY]
    assert _text(tokenizer, row) == ("<Picture 1>: <|vision_start|><V><|vision_end|><Audio 1>: <Video 1>: "
                                     "<0.2 seconds><|vision_start|><V><|vision_end|>"
                                     "<1.0 seconds><|vision_start|><V><|vision_end|>go")
    blocks = [t for t, _ in row if isinstance(t, dict) and t.get(VIDEO_BLOCK)]
    assert [b["data"].shape[0] for b in blocks] == [2, 2]  # three frames padded with the last one
    torch.testing.assert_close(blocks[1]["data"][1], frames[2])
    assert tokenizer.tokenize_with_weights("")[TOKEN_KEY] == [[(151643, 1.0)]]


def test_the_release_tokens_have_their_ids(tokenizer):
    for content, index in EXTRA_TOKENS.items():
        (row,) = tokenizer.tokenize_with_weights(content)[TOKEN_KEY]
        assert [t for t, _ in row] == [index]


def test_states_are_the_last_block_unnormed_with_vision_tags(tokenizer, tower):
    (row,) = tokenizer.tokenize_with_weights("a cat")[TOKEN_KEY]
    ids = [t for t, _ in row]
    hidden, tags = encode_row(tower, ids)
    torch.testing.assert_close(hidden, tower.encode_ids(torch.tensor([ids]), (), -1, False))
    assert tags.tolist() == [1] * len(ids)
    image = torch.rand(1, 64, 64, 3)
    (row,) = tokenizer.tokenize_with_weights("a cat", images=[image])[TOKEN_KEY]
    hidden, tags = encode_row(tower, [t for t, _ in row])
    label = len(tokenizer._text("<Picture 1>: "))
    count = tower.image_token_count(image)
    assert hidden.shape[1] == len(row) - 1 + count
    assert tags.tolist() == [1] * label + [0] * (count + 2) + [1] * (hidden.shape[1] - label - count - 2)


def test_a_video_block_fills_the_temporal_patch_with_its_two_frames(tower):
    frame, other = torch.rand(1, 64, 64, 3), torch.rand(1, 64, 64, 3)
    as_image, _ = encode_row(tower, [VS, {"type": "image", "data": frame}, VE])
    same, _ = encode_row(tower, [VS, {"type": "image", "data": torch.cat([frame, frame]), VIDEO_BLOCK: True}, VE])
    torch.testing.assert_close(same, as_image, rtol=1e-4, atol=1e-4)  # an image repeats its one frame
    pair, _ = encode_row(tower, [VS, {"type": "image", "data": torch.cat([frame, other]), VIDEO_BLOCK: True}, VE])
    assert not torch.allclose(pair, as_image, atol=1e-3)


def test_nvfp4_awq_layers_compute_the_pre_scaled_product(state, tower):
    from comfy_core.weights.quant_registry import FORMATS

    stored = nvfp4_awq_state(state)
    quantized = build_qwen3vl_encoder(Qwen3VLConfig.detect_from_weights(state), stored)
    twin = {}
    for name, value in stored.items():
        layer = name[:-len(".weight")]
        if name.endswith(".weight") and layer + ".comfy_quant" in stored:
            scales = {k: stored[f"{layer}.{k}"] for k in ("weight_scale", "weight_scale_2")}
            w = FORMATS["nvfp4"].dequantize(value, scales, {"format": "nvfp4"}, tuple(state[name].shape))
            twin[name] = w * stored[layer + ".pre_quant_scale"].float()[None, :]
        elif not name.endswith((".comfy_quant", ".weight_scale", ".weight_scale_2", ".pre_quant_scale")):
            twin[name] = value.float()
    reference = build_qwen3vl_encoder(Qwen3VLConfig.detect_from_weights(twin), twin)
    ids = [64, 8251, 220, 151669, 22479]
    got, _ = encode_row(quantized, ids)
    want, _ = encode_row(reference, ids)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, encode_row(tower, ids)[0], atol=1e-3)  # it is the quantised weight


def test_the_set_answers_the_minimax_type_only():
    assert MINIMAX_H3_TEXT_ENCODERS.clip_types == ("minimax",)
    assert MINIMAX_H3_TEXT_ENCODERS.options("qwen3vl_8b").token_key == TOKEN_KEY


def test_cliploader_type_minimax_reads_the_nvfp4_awq_file(tmp_path, state):
    """The release's file through the loader: detected at the packed layers' true shapes, the H3 set
    and tokenizer, the conditioning carrying the tags."""
    from safetensors.torch import save_file

    from comfy_core.split.text_encoder_files import load_text_encoders

    stored = nvfp4_awq_state(state)
    path = tmp_path / "qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors"
    save_file(stored, str(path))
    clip = load_text_encoders([path], "minimax")
    assert type(clip.tokenizer).__name__ == "MiniMaxH3Tokenizer"
    assert type(clip.cond_stage_model).__name__ == "MiniMaxH3TEModel"
    image = torch.rand(1, 64, 64, 3)
    (cond, extra), = clip.encode_from_tokens_scheduled(clip.tokenize("a <d> cat", images=[image]))
    direct = build_qwen3vl_encoder(Qwen3VLConfig.detect_from_weights(state), stored)
    (row,) = clip.tokenize("a <d> cat", images=[image])[TOKEN_KEY]
    want, tags = encode_row(direct, [t for t, _ in row])
    torch.testing.assert_close(cond, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(extra["minimax_token_tags"], tags) and "attention_mask" not in extra
