"""Encoding A1111 prompts with tiny real CLIP towers: chunks, emphasis, clip skip per family, SDXL,
embedding injection (reference sections 3.5-3.7, 4)."""
import pytest
import torch

from comfy_core.prompt.chunking import PLACEHOLDER_ID
from comfy_core.prompt.conditioning import registered_embeddings, with_embedding
from comfy_core.prompt.embedding import Embedding
from comfy_core.families import sd1 as sd1_family, sd2 as sd2_family, sdxl as sdxl_family
from comfy_core.prompt.encode import encode_texts, encoder_plan
from comfy_core.prompt.errors import EmbeddingNotFoundError, EmbeddingWidthError
from comfy_core.text_encoders.encoder import EmbeddingOverride
from tests.fixtures.clips import one_thread, sd1, sd2, sdxl  # noqa: F401 -- fixtures

BOS, EOS = 49406, 49407


def ids_of(clip, words, pad=EOS):
    """One chunk's ids for `words` (a string), built by hand."""
    tokens = clip.tokenizer.clip_tokenizer.encode(words)
    row = [BOS, *tokens, EOS] + [pad] * (75 - len(tokens))
    return torch.tensor([row])


def run(clip, slot, ids, layer_idx=None, norm=True, overrides=()):
    with clip.patcher.applied() as encoders, torch.no_grad():
        return getattr(encoders, slot).encode_ids(ids, list(overrides), layer_idx=layer_idx, layer_norm_hidden=norm)


def test_plain_prompt_equals_direct_encoding(sd1):
    out = encode_texts(sd1, ["a photo of a cat"])
    direct = run(sd1, "clip_l", ids_of(sd1, "a photo of a cat")).hidden
    assert out.cond.shape == (1, 77, 64)
    assert torch.allclose(out.cond, direct, atol=1e-5)


def test_original_emphasis_matches_direct_computation(sd1):
    out = encode_texts(sd1, ["a (cat:1.5) [dog]"], emphasis="Original")
    tokens = [BOS] + [*sd1.tokenizer.clip_tokenizer.encode("a "), *sd1.tokenizer.clip_tokenizer.encode("cat"),
                      *sd1.tokenizer.clip_tokenizer.encode(" "), *sd1.tokenizer.clip_tokenizer.encode("dog")]
    ids = torch.tensor([tokens + [EOS] * (77 - len(tokens))])
    z = run(sd1, "clip_l", ids).hidden
    m = torch.ones(1, 77)
    m[0, 2] = 1.5
    m[0, 3] = 1 / 1.1
    weighted = z * m[..., None]
    expected = weighted * (z.mean() / weighted.mean())
    assert torch.allclose(out.cond, expected, atol=1e-5)
    no_norm = encode_texts(sd1, ["a (cat:1.5) [dog]"], emphasis="No norm").cond
    assert torch.allclose(no_norm, weighted, atol=1e-5)


def test_emphasis_none_keeps_brackets_as_tokens(sd1):
    out = encode_texts(sd1, ["a (cat:1.5)"], emphasis="None")
    direct = run(sd1, "clip_l", ids_of(sd1, "a (cat:1.5)")).hidden
    assert torch.allclose(out.cond, direct, atol=1e-5)


def test_long_prompt_concatenates_chunks(sd1):
    text = " ".join(["cat"] * 80)
    out = encode_texts(sd1, [text])
    assert out.cond.shape == (1, 154, 64) and out.token_counts == (80,)


def test_batch_pads_shorter_text_with_empty_chunks(sd1):
    out = encode_texts(sd1, ["dog", " ".join(["cat"] * 80)])
    empty = run(sd1, "clip_l", torch.tensor([[BOS] + [EOS] * 76])).hidden
    assert out.cond.shape == (2, 154, 64)
    # all multipliers are 1, so Original emphasis leaves every row as encoded
    assert torch.allclose(out.cond[0, 77:], empty[0], atol=1e-5)


def test_break_gives_two_chunks(sd1):
    assert encode_texts(sd1, ["a BREAK b"]).cond.shape[1] == 154


def test_clip_skip_sd1_uses_hidden_layer_with_final_norm(sd1):
    skipped = sd1.clone()
    skipped.clip_layer(-2)
    out = encode_texts(skipped, ["a cat"]).cond
    expected = run(sd1, "clip_l", ids_of(sd1, "a cat"), layer_idx=-2, norm=True).hidden
    assert torch.allclose(out, expected, atol=1e-5)
    assert not torch.allclose(out, encode_texts(sd1, ["a cat"]).cond)


def test_sd2_penultimate_with_norm_zero_padding_and_clip_skip_ignored(sd2):
    out = encode_texts(sd2, ["a cat"]).cond
    expected = run(sd2, "clip_h", ids_of(sd2, "a cat", pad=0), layer_idx=-2, norm=True).hidden
    assert torch.allclose(out, expected, atol=1e-5)
    skipped = sd2.clone()
    skipped.clip_layer(-1)
    assert torch.allclose(encode_texts(skipped, ["a cat"]).cond, out)


def test_sdxl_concatenates_penultimate_unnormed_and_pools_clip_g(sdxl):
    out = encode_texts(sdxl, ["a (cat:1.4)"])
    plain_l = run(sdxl, "clip_l", ids_of(sdxl, "a cat"), layer_idx=-2, norm=False)
    assert out.cond.shape == (1, 77, 128)
    g = run(sdxl, "clip_g", ids_of(sdxl, "a cat", pad=0), layer_idx=-2, norm=False)
    # pooled: CLIP-G, first chunk, emphasis does not touch it
    assert torch.allclose(out.pooled, g.pooled, atol=1e-5)
    unweighted = encode_texts(sdxl, ["a cat"]).cond
    assert torch.allclose(unweighted[..., :64], plain_l.hidden, atol=1e-5)
    assert torch.allclose(unweighted[..., 64:], g.hidden, atol=1e-5)
    skipped = sdxl.clone()
    skipped.clip_layer(-1)
    assert torch.allclose(encode_texts(skipped, ["a cat"]).cond, unweighted)


def test_sdxl_pooled_from_first_chunk_only(sdxl):
    long = "dog " + " ".join(["cat"] * 80)
    out = encode_texts(sdxl, [long])
    first = " ".join(["dog"] + ["cat"] * 74)
    g = run(sdxl, "clip_g", ids_of(sdxl, first, pad=0), layer_idx=-2, norm=False)
    assert torch.allclose(out.pooled, g.pooled, atol=1e-5)


def test_sdxl_empty_negative_is_zeros(sdxl):
    zero = encode_texts(sdxl, [""], zero_if_empty=True)
    assert zero.cond.abs().sum() == 0 and zero.pooled.abs().sum() == 0
    assert encode_texts(sdxl, [""]).cond.abs().sum() > 0
    assert encode_texts(sdxl, ["x"], zero_if_empty=True).cond.abs().sum() > 0


def test_sd1_empty_negative_is_encoded(sd1):
    assert encode_texts(sd1, [""], zero_if_empty=True).cond.abs().sum() > 0


def test_encoder_plan_per_family():
    assert [(p.slot, p.pad, p.layer_idx, p.layer_norm) for p in encoder_plan(["clip_l"], -3, sd1_family.TEXT_ENCODERS)] == [("clip_l", EOS, -3, True)]
    assert [(p.layer_idx, p.layer_norm) for p in encoder_plan(["clip_h"], -1, sd2_family.TEXT_ENCODERS)] == [(-2, True)]
    assert [(p.slot, p.pad, p.layer_idx, p.layer_norm) for p in encoder_plan(["clip_l", "clip_g"], -1, sdxl_family.TEXT_ENCODERS)] == [
        ("clip_l", EOS, -2, False), ("clip_g", 0, -2, False)]


def test_registered_embedding_vectors_replace_placeholders(sd1):
    vectors = torch.randn(2, 64)
    clip = with_embedding(sd1, Embedding("mystyle", vectors))
    out = encode_texts(clip, ["a MyStyle cat"], embeddings=registered_embeddings(clip)).cond
    tokens = sd1.tokenizer.clip_tokenizer.encode("a")
    row = [BOS, *tokens, PLACEHOLDER_ID, PLACEHOLDER_ID, *sd1.tokenizer.clip_tokenizer.encode("cat"), EOS]
    ids = torch.tensor([row + [EOS] * (77 - len(row))])
    expected = run(sd1, "clip_l", ids, overrides=[EmbeddingOverride(0, 2, vectors)]).hidden
    assert torch.allclose(out, expected, atol=1e-5)


def test_apply_embedding_leaves_input_clip_unchanged(sd1):
    before = sd1.patcher.signature()
    clip = with_embedding(sd1, Embedding("x", torch.randn(1, 64)))
    assert registered_embeddings(sd1) == () and len(registered_embeddings(clip)) == 1
    assert sd1.patcher.signature() == before
    again = with_embedding(clip, Embedding("x", torch.randn(1, 64)))
    assert len(registered_embeddings(again)) == 1 and len(registered_embeddings(clip)) == 1


def test_sdxl_embedding_uses_each_encoders_part(sdxl):
    l, g = torch.randn(1, 64), torch.randn(1, 64)
    clip = with_embedding(sdxl, Embedding("tok", {"clip_l": l, "clip_g": g}))
    out = encode_texts(clip, ["tok"], embeddings=registered_embeddings(clip)).cond
    ids = torch.tensor([[BOS, 0] + [EOS] * 75])
    expected_l = run(sdxl, "clip_l", ids, -2, False, [EmbeddingOverride(0, 1, l)]).hidden
    expected_g = run(sdxl, "clip_g", torch.tensor([[BOS, 0, EOS] + [0] * 74]), -2, False,
                     [EmbeddingOverride(0, 1, g)]).hidden
    assert torch.allclose(out[..., :64], expected_l, atol=1e-5)
    assert torch.allclose(out[..., 64:], expected_g, atol=1e-5)


def test_embedding_width_mismatch_is_refused(sd1, sdxl):
    with pytest.raises(EmbeddingWidthError, match="width 768.*expect width 64"):
        with_embedding(sd1, Embedding("big", torch.randn(1, 768), source="big.pt"))
    with pytest.raises(EmbeddingWidthError, match="expect width 128"):
        with_embedding(sdxl, Embedding("one", torch.randn(1, 64)))


def test_explicit_embedding_syntax(sd1):
    vectors = torch.randn(1, 64)
    found = {"style": Embedding("style", vectors)}
    out = encode_texts(sd1, ["a embedding:style, cat"], resolve=found.get).cond
    tokens = sd1.tokenizer.clip_tokenizer
    row = [BOS, *tokens.encode("a "), 0, *tokens.encode(","), *tokens.encode(" cat"), EOS]
    ids = torch.tensor([row + [EOS] * (77 - len(row))])
    expected = run(sd1, "clip_l", ids, overrides=[EmbeddingOverride(0, 2, vectors)]).hidden
    assert torch.allclose(out, expected, atol=1e-5)
    with pytest.raises(EmbeddingNotFoundError, match="embedding:missing"):
        encode_texts(sd1, ["embedding:missing"], resolve=found.get)


def test_repeated_texts_are_one_row_each_and_count_in_the_mean(sd1):
    texts = ["a (cat:1.5)", "a dog", "a (cat:1.5)"]
    out = encode_texts(sd1, texts)
    assert out.cond.shape[0] == 2 and out.texts == ("a (cat:1.5)", "a dog") and out.row("a dog") == 1
    tokens = sd1.tokenizer.clip_tokenizer.encode
    rows = [[BOS, *tokens("a"), *tokens("cat"), EOS], [BOS, *tokens("a dog"), EOS]]
    ids = torch.tensor([row + [EOS] * (77 - len(row)) for row in rows])
    z = run(sd1, "clip_l", ids).hidden
    m = torch.ones(2, 77)
    m[0, 2] = 1.5
    full_z, full_m = z[[0, 1, 0]], m[[0, 1, 0]]  # the 3-row batch webui encodes
    weighted = full_z * full_m[..., None]
    expected = weighted * (full_z.mean() / weighted.mean())
    assert torch.allclose(out.cond, expected[:2], atol=1e-6)
    no_norm = encode_texts(sd1, texts, emphasis="No norm").cond
    assert torch.allclose(no_norm, encode_texts(sd1, texts[:2], emphasis="No norm").cond)
