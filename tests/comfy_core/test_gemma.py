"""Lumina 2's Gemma 2 text tower (comfy_core/text_encoders/gemma.py) and tokenizer
(gemma_tokenizer.py) against transformers' Gemma2Model and SentencePiece on tiny random weights
and a SentencePiece model trained in the test; the encoder set and CLIPLoader type "lumina2"."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.lumina2.clip import LUMINA2_TEXT_ENCODERS, LuminaModel, LuminaTokenizer
from comfy_core.families.zimage.clip import ZImageTEModel
from comfy_core.split.text_encoder_files import ClipFilesError, load_text_encoders
from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.gemma import (GemmaConfig, GemmaDetectionError, GemmaKeyError, GemmaTextEncoder,
                                            build_gemma_encoder)
from comfy_core.text_encoders.gemma_tokenizer import (GemmaSentencePiece, GemmaTokenizer, MissingGemmaTokenizerError,
                                                      gemma_tokenizer)
from comfy_core.text_encoders.llama import LlamaConfig
from comfy_core.text_encoders.qwen3 import Qwen3Config
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.gemma_files import (CORPUS, reference_model, tiny_gemma_state_dict, tiny_spiece_model,
                                        write_gemma_file)

IDS = [2, 17, 250, 33, 4, 99, 398, 5, 61]


@pytest.fixture(scope="module")
def state():
    return tiny_gemma_state_dict(seed=5)


@pytest.fixture(scope="module")
def encoder(state):
    return build_gemma_encoder(GemmaConfig.detect_from_weights(state), state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_model(state)


def _hf_states(reference, ids, mask=None):
    with torch.no_grad():
        out = reference(input_ids=torch.tensor(ids), attention_mask=mask, output_hidden_states=True)
    return out.hidden_states, out.last_hidden_state


def test_detection_reads_the_shapes(state):
    config = GemmaConfig.detect_from_weights(state)
    assert (config.hidden_size, config.intermediate_size, config.num_layers) == (32, 48, 3)
    assert (config.num_heads, config.num_kv_heads, config.head_dim, config.vocab_size) == (2, 1, 256, 400)
    assert config.slot == "gemma2_2b"
    # Qwen3 and Llama detection leave a Gemma file alone (ComfyUI tests Gemma's norms first).
    assert Qwen3Config.detect_from_weights(state) is None and LlamaConfig.detect_from_weights(state) is None


def test_gemma3_and_non_gemma_files_are_not_gemma2(state):
    gemma3 = dict(state, **{"model.layers.0.self_attn.q_norm.weight": torch.zeros(256)})
    assert GemmaConfig.detect_from_weights(gemma3) is None
    assert GemmaConfig.detect_from_weights({k: v for k, v in state.items() if "post_feedforward" not in k}) is None


def test_incomplete_or_inconsistent_towers_are_typed_errors(state):
    with pytest.raises(GemmaDetectionError, match="layers.1.pre_feedforward_layernorm"):
        GemmaConfig.detect_from_weights({k: v for k, v in state.items()
                                         if k != "model.layers.1.pre_feedforward_layernorm.weight"})
    with pytest.raises(GemmaDetectionError, match="heads of 256"):
        GemmaConfig.detect_from_weights(dict(state, **{"model.layers.0.self_attn.k_proj.weight": torch.zeros(100, 32)}))
    config = GemmaConfig.detect_from_weights(state)
    with pytest.raises(GemmaKeyError, match="weight_scale"):
        build_gemma_encoder(config, dict(state, **{"model.layers.0.mlp.up_proj.weight_scale": torch.ones(())}))


def test_every_block_matches_transformers(encoder, reference):
    hidden, last = _hf_states(reference, [IDS])
    # transformers' hidden_states: the embeddings, blocks 0 .. n-2, then the final normed output.
    torch.testing.assert_close(encoder.embed_ids(torch.tensor([IDS])), hidden[0], atol=1e-6, rtol=1e-6)
    for layer in range(2):
        ours = encoder.encode_ids(torch.tensor([IDS]), layer_idx=layer)
        torch.testing.assert_close(ours, hidden[layer + 1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(encoder.encode_ids(torch.tensor([IDS]), layer_idx=None), last, atol=1e-5, rtol=1e-5)


def test_comfyuis_hidden_state_is_the_next_to_last_block_without_the_final_norm(encoder, reference):
    hidden, _ = _hf_states(reference, [IDS])
    out = encoder([IDS])
    assert encoder.layer_idx == -2 and encoder.special_tokens == {"start": 2, "pad": 0}
    torch.testing.assert_close(out[0], hidden[2], atol=1e-5, rtol=1e-5)
    assert out[1] is None and out[2]["attention_mask"].tolist() == [[1] * len(IDS)]


def test_padding_masks_the_keys_as_transformers_attention_mask(encoder, reference):
    rows = [IDS, IDS[:5] + [0] * 4]
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    hidden, _ = _hf_states(reference, rows, mask)
    out = encoder(rows)
    assert out[2]["attention_mask"].tolist() == mask.tolist()
    torch.testing.assert_close(out[0][0], hidden[2][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[0][1, :5], hidden[2][1, :5], atol=1e-5, rtol=1e-5)


def test_fp16_weights_compute_in_float32(state):
    half = {k: v.half() for k, v in state.items()}
    encoder = build_gemma_encoder(GemmaConfig.detect_from_weights(half), half)
    assert encoder.dtype == torch.float16
    hidden, _ = _hf_states(reference_model(half), [IDS])
    out = encoder.encode_ids(torch.tensor([IDS]), layer_idx=-2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, hidden[2], atol=1e-5, rtol=1e-5)


def test_out_of_range_token_ids_are_refused(encoder):
    from comfy_core.text_encoders.errors import TokenizeError

    with pytest.raises(TokenizeError, match="400-token table"):
        encoder.encode_ids(torch.tensor([[2, 400]]))


# --- the tokenizer ---

def _prompts() -> list[str]:
    words = " ".join(CORPUS).split()
    prompts = [" ".join(words[i:i + 1 + i % 9]) for i in range(0, len(words))]
    prompts += ["", " ", "ünïcödé ß 東京 😀", "tabs\tand\nnewlines", "<start_of_turn>user\nhi<end_of_turn>",
                "numbers 3.14159 and 1,000,000", "a" * 300, "mixed CASE Words", "  leading and trailing  "]
    prompts += [p.upper() for p in prompts[:30]]
    prompts += [f"You are an assistant designed to generate superior images. <Prompt Start> {p}" for p in CORPUS]
    return prompts


def test_ids_are_sentencepieces_with_bos_on_100_plus_prompts():
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tiny_spiece_model())
    tokenizer = gemma_tokenizer({"spiece_model": tiny_spiece_model()}, embedding_width=32)
    prompts = _prompts()
    assert len(prompts) >= 100
    for prompt in prompts:
        tokens = tokenizer.tokenize_with_weights(prompt.replace("(", "\\(").replace(")", "\\)"))
        assert [t for t, _ in tokens[0]] == [2] + processor.encode(prompt), prompt


def test_prompt_weights_and_empty_prompt():
    tokenizer = gemma_tokenizer({"spiece_model": tiny_spiece_model()}, embedding_width=32)
    assert tokenizer.tokenize_with_weights("") == [[(2, 1.0)]]
    pairs = tokenizer.tokenize_with_weights("a (cat:1.5) chair")[0]
    assert pairs[0] == (2, 1.0)
    weighted = [t for t, w in pairs if w == 1.5]
    assert weighted == tokenizer.encode("cat")
    assert tokenizer.start_token == 2 and tokenizer.pad_token == 0 and tokenizer.end_token is None


def test_tokenizer_state_dict_round_trips_and_bad_models_are_refused(tmp_path):
    tokenizer = gemma_tokenizer({"spiece_model": tiny_spiece_model()}, embedding_width=32)
    saved = tokenizer.state_dict()["spiece_model"]
    assert saved.dtype == torch.uint8 and bytes(saved.numpy()) == tiny_spiece_model()
    path = tmp_path / "tokenizer.model"
    path.write_bytes(tiny_spiece_model())
    from_path = gemma_tokenizer({"spiece_model": str(path)}, embedding_width=32)
    assert from_path.encode("a red chair") == tokenizer.encode("a red chair")
    assert tokenizer.decode(tokenizer.encode("a red chair")) == "a red chair"
    with pytest.raises(MissingGemmaTokenizerError):
        gemma_tokenizer({}, source="x")
    with pytest.raises(VocabularyError):
        GemmaSentencePiece.from_data(b"not a model")
    with pytest.raises(VocabularyError):
        GemmaSentencePiece.from_data(torch.zeros(3, dtype=torch.float32))


# --- the encoder set and CLIPLoader type "lumina2" ---

@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory, state):
    return write_gemma_file(tmp_path_factory.mktemp("gemma") / "gemma_2_2b_fp16.safetensors", state)


@pytest.fixture(scope="module")
def clip(gemma_file):
    return load_text_encoders([gemma_file], "lumina2")


def test_cliploader_lumina2_with_a_gemma_file_builds_luminas_set(clip):
    assert isinstance(clip.cond_stage_model, LuminaModel) and isinstance(clip.tokenizer, LuminaTokenizer)
    tower = clip.cond_stage_model.gemma2_2b
    assert isinstance(tower, GemmaTextEncoder) and tower.dtype == torch.float16  # the file's dtype, as ComfyUI
    assert isinstance(clip.tokenizer.gemma2_2b, GemmaTokenizer)
    names = set(clip.cond_stage_model.state_dict())
    assert "gemma2_2b.transformer.model.layers.0.post_feedforward_layernorm.weight" in names


def test_clip_encodes_comfyuis_conditioning(clip, state):
    prompt = "a photo of a cat sitting on a red chair"
    tokens = clip.tokenize(prompt)
    ids = [t for t, _ in tokens["gemma2_2b"][0]]
    assert ids[0] == 2 and ids[1:] == clip.tokenizer.gemma2_2b.encode(prompt)
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    hidden, _ = _hf_states(reference_model({k: v.half() for k, v in state.items()}), [ids])
    torch.testing.assert_close(cond, hidden[2], atol=1e-5, rtol=1e-5)
    assert pooled is None
    out = clip.encode_from_tokens(tokens, return_dict=True)
    assert out["attention_mask"].tolist() == [[1] * len(ids)]


def test_a_qwen3_file_under_lumina2_stays_zimages(tmp_path):
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict, write_qwen3_file

    path = write_qwen3_file(tmp_path / "qwen_3_4b.safetensors", tiny_qwen3_state_dict(seed=1))
    assert isinstance(load_text_encoders([path], "lumina2").cond_stage_model, ZImageTEModel)


def test_a_gemma_file_without_tokenizer_needs_one(tmp_path, state):
    path = write_gemma_file(tmp_path / "bare.safetensors", state, with_tokenizer=False)
    with pytest.raises(MissingGemmaTokenizerError):
        load_text_encoders([path], "lumina2")
    clip = load_text_encoders([path], "lumina2", tokenizer_data={"spiece_model": tiny_spiece_model()})
    assert clip.tokenize("a cat")["gemma2_2b"][0][0] == (2, 1.0)


def test_a_gemma_file_under_another_type_is_refused(gemma_file):
    with pytest.raises(ClipFilesError, match="Gemma-2-2B"):
        load_text_encoders([gemma_file], "stable_diffusion")


def test_the_lumina2_family_declares_the_encoder_set():
    family = default_registry().get("lumina2")
    assert family.text_encoders is LUMINA2_TEXT_ENCODERS
    assert LUMINA2_TEXT_ENCODERS.clip_types == ("lumina2",)


def test_generation_is_refused_with_a_typed_error(encoder):
    from comfy_core.text_encoders.generate import GenerationError

    assert encoder.can_generate is False
    cache = encoder.new_cache(1, 4)
    with pytest.raises(GenerationError, match="does not generate"):
        encoder.decode_step(encoder.embed_ids(torch.tensor([[2, 5]])), cache)
