"""Jina CLIP v2's text tower (comfy_core/text_encoders/jina_clip2.py): detection from names and
shapes, the forward pass against transformers' `JinaEmbeddingsV3Model` (the same Jina
XLM-RoBERTa: rotary positions, post-norm blocks) on tiny random weights in ComfyUI's names, the
mean pooling over the token mask, and the tokenizer over a file's own SentencePiece model
(ComfyUI's `JinaClip2Tokenizer`: `<s>` prompt `</s>`)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.text_encoders.jina_clip2 import (JinaConfig, JinaDetectionError, JinaKeyError, build_jina_encoder,
                                                 jina_tokenizer)
from tests.fixtures.template_models_newbie import tiny_jina_state_dict as _tiny_jina, tiny_xlmr_spiece


def tiny_jina_state_dict(seed: int = 0):
    return _tiny_jina(seed, vocab=TINY["vocab"], width=TINY["width"], layers=TINY["layers"], ffn=TINY["ffn"])

TINY = dict(vocab=300, width=128, layers=2, ffn=96)  # 2 heads of 64


def _header(state):
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


def _reference(state):
    from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

    width = TINY["width"]
    config = JinaEmbeddingsV3Config(vocab_size=TINY["vocab"], hidden_size=width, num_hidden_layers=TINY["layers"],
                                    num_attention_heads=width // 64, intermediate_size=TINY["ffn"],
                                    type_vocab_size=1, pad_token_id=1, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    model = JinaEmbeddingsV3Model(config, add_pooling_layer=False).eval()
    ours = {"embeddings.word_embeddings.weight": state["model.embeddings.word_embeddings.weight"],
            "embeddings.token_type_embeddings.weight": state["model.embeddings.token_type_embeddings.weight"],
            "embeddings.LayerNorm.weight": state["model.emb_ln.weight"],
            "embeddings.LayerNorm.bias": state["model.emb_ln.bias"]}
    for i in range(TINY["layers"]):
        b, r = f"model.encoder.layers.{i}.", f"layers.{i}."
        for end in ("weight", "bias"):
            for part, proj in zip(state[b + f"mixer.Wqkv.{end}"].chunk(3, dim=0), ("q_proj", "k_proj", "v_proj")):
                ours[r + f"self_attn.{proj}.{end}"] = part
            ours[r + f"self_attn.o_proj.{end}"] = state[b + f"mixer.out_proj.{end}"]
            ours[r + f"post_attention_layernorm.{end}"] = state[b + f"norm1.{end}"]
            ours[r + f"mlp.fc1.{end}"] = state[b + f"mlp.fc1.{end}"]
            ours[r + f"mlp.fc2.{end}"] = state[b + f"mlp.fc2.{end}"]
            ours[r + f"post_mlp_layernorm.{end}"] = state[b + f"norm2.{end}"]
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert not unexpected and not [m for m in missing if "lora" not in m], missing
    return model


def test_detection_from_names_and_shapes():
    state = tiny_jina_state_dict()
    config = JinaConfig.detect_from_weights(_header(state))
    assert (config.vocab_size, config.hidden_size, config.num_layers, config.num_heads, config.intermediate_size) == (
        300, 128, 2, 2, 96)
    assert JinaConfig().num_heads == 16 and JinaConfig().head_dim == 64  # Jina CLIP v2 (ComfyUI's config)
    assert JinaConfig.detect_from_weights({"model.layers.0.self_attn.q_norm.weight": None}) is None
    bad = _header(state)
    del bad["model.encoder.layers.0.mlp.fc1.weight"]
    with pytest.raises(JinaDetectionError, match="fc1"):
        JinaConfig.detect_from_weights(bad)


def test_matches_transformers_jina_embeddings_v3_with_a_token_mask():
    state = tiny_jina_state_dict(seed=1)
    encoder = build_jina_encoder(JinaConfig.detect_from_weights(_header(state)), state)
    reference = _reference(state)
    rows = [[0, 17, 44, 250, 9, 2], [0, 30, 2, 1, 1, 1]]
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    with torch.no_grad():
        hidden, pooled, extra = encoder(rows)
        theirs = reference(input_ids=torch.tensor(rows), attention_mask=mask).last_hidden_state
    assert torch.equal(extra["attention_mask"].cpu(), mask)
    assert (hidden[0] - theirs[0]).abs().max() < 1e-4
    assert (hidden[1, :3] - theirs[1, :3]).abs().max() < 1e-4  # padded positions: only the kept ones compare
    expected = torch.stack([theirs[0].mean(0), theirs[1, :3].mean(0)])
    assert (pooled - expected).abs().max() < 1e-4


def test_encode_token_weights_gives_the_first_chunks_pooled_output():
    state = tiny_jina_state_dict(seed=2)
    encoder = build_jina_encoder(JinaConfig.detect_from_weights(_header(state)), state)
    cond, pooled, extra = encoder.encode_token_weights([[(0, 1.0), (5, 1.0), (6, 1.0), (2, 1.0)]])
    assert cond.shape == (1, 4, 128) and pooled.shape == (1, 128)
    assert torch.allclose(pooled, cond[0].mean(0, keepdim=True), atol=1e-6)
    assert extra["attention_mask"].tolist() == [[1, 1, 1, 1]]


def test_unknown_tensor_is_refused():
    state = tiny_jina_state_dict()
    config = JinaConfig.detect_from_weights(_header(state))
    with pytest.raises(JinaKeyError, match="unexpected"):
        build_jina_encoder(config, {**state, "model.pooler.dense.weight": torch.zeros(2, 2)})


def test_tokenizer_wraps_the_prompt_in_start_and_end_tokens():
    import sentencepiece

    model = tiny_xlmr_spiece()
    tokenizer = jina_tokenizer({"spiece_model": torch.frombuffer(bytearray(model), dtype=torch.uint8)},
                               embedding_width=128)
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    text = "a girl with long silver hair"
    chunks = tokenizer.tokenize_with_weights(text)
    assert len(chunks) == 1
    assert [t for t, _ in chunks[0]] == [0] + list(processor.encode(text)) + [2]
    weighted = tokenizer.tokenize_with_weights("a girl, (silver hair:1.3)")
    assert weighted[0][0] == (0, 1.0) and weighted[0][-1] == (2, 1.0)
    assert any(w == pytest.approx(1.3) for _, w in weighted[0])
    assert torch.equal(tokenizer.state_dict()["spiece_model"], torch.frombuffer(bytearray(model), dtype=torch.uint8))
