"""ComfyUI's prompt weighting syntax and 77-token chunking, per encoder (pad token, embeddings)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.prompt_weights import escape_important, parse_weights, split_parentheses
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer, SDTokenizer, TokenizerSpec
from comfy_core.text_encoders.tokenizer import ClipTokenizer

BOS, EOS = 49406, 49407


@pytest.fixture(scope="module")
def clip_tokenizer() -> ClipTokenizer:
    return ClipTokenizer.from_file()


def _tok(clip_tokenizer, pad=EOS, lookup=None, key="l", width=8):
    return SDTokenizer(clip_tokenizer, TokenizerSpec(key=key, pad_token=pad, embedding_width=width,
                                                     embedding_key=f"clip_{key}"), lookup)


@pytest.mark.parametrize("text, expected", [
    ("a cat", [("a cat", 1.0)]),
    ("(cat)", [("cat", pytest.approx(1.1))]),
    ("((cat))", [("cat", pytest.approx(1.21))]),
    ("(cat:1.5)", [("cat", 1.5)]),
    ("((cat:1.5))", [("cat", 1.5)]),  # an explicit weight replaces the inherited one
    ("a (b (c:0.5) d) e", [("a ", 1.0), ("b ", pytest.approx(1.1)), ("c", 0.5), (" d", pytest.approx(1.1)), (" e", 1.0)]),
    ("(a:b)", [("a:b", pytest.approx(1.1))]),  # not a number: the colon is text
    ("(a:1:2)", [("a:1", 2.0)]),  # the last colon counts
    ("(:2)", [(":2", pytest.approx(1.1))]),  # a colon at position 0 is not a weight separator
    ("a)b(c)", [("a)b(c)", 1.0)]),  # unmatched ')' keeps the rest plain (ComfyUI does the same)
    ("(unclosed", [("(unclosed", 1.0)]),
])
def test_parse_weights(text, expected):
    assert parse_weights(text) == expected


def test_escaped_brackets_are_literal(clip_tokenizer):
    escaped = escape_important(r"\(cat\)")
    assert parse_weights(escaped) == [(escaped, 1.0)]
    chunks = _tok(clip_tokenizer).tokenize_with_weights(r"\(cat\)")
    ids = [t for t, _ in chunks[0]]
    assert ids[:5] == [BOS] + clip_tokenizer.encode("(cat)") + [EOS]
    assert all(w == 1.0 for _, w in chunks[0])


def test_split_parentheses_groups():
    assert split_parentheses("x (a (b)) y") == ["x ", "(a (b))", " y"]


def test_single_chunk_layout_and_pad_per_encoder(clip_tokenizer):
    ids = clip_tokenizer.encode("a photo of a cat")
    for pad in (EOS, 0):
        chunks = _tok(clip_tokenizer, pad=pad).tokenize_with_weights("a photo of a cat")
        assert len(chunks) == 1 and len(chunks[0]) == 77
        tokens = [t for t, _ in chunks[0]]
        assert tokens[: len(ids) + 2] == [BOS, *ids, EOS]
        assert set(tokens[len(ids) + 2:]) == {pad}


def test_weights_follow_tokens(clip_tokenizer):
    chunks = _tok(clip_tokenizer).tokenize_with_weights("a (cat:1.5) on a mat")
    pairs = chunks[0]
    cat_id = clip_tokenizer.encode("cat")[0]
    assert (cat_id, 1.5) in pairs
    assert [w for t, w in pairs if t != cat_id] == [1.0] * 76
    with_ids = _tok(clip_tokenizer).tokenize_with_weights("a (cat:1.5)", return_word_ids=True)[0]
    assert with_ids[0] == (BOS, 1.0, 0) and with_ids[2][0] == cat_id and with_ids[2][2] == 2


def test_disable_weights_keeps_brackets(clip_tokenizer):
    chunks = _tok(clip_tokenizer).tokenize_with_weights("(cat:1.5)", disable_weights=True)
    assert [t for t, _ in chunks[0]][1:1 + len(clip_tokenizer.encode("(cat:1.5)"))] == clip_tokenizer.encode("(cat:1.5)")


def test_long_group_is_split_across_chunks(clip_tokenizer):
    text = " ".join(["masterpiece"] * 100)  # one segment, 100 tokens: a "large" group
    chunks = _tok(clip_tokenizer).tokenize_with_weights(text)
    assert len(chunks) == 2 and all(len(c) == 77 for c in chunks)
    first = [t for t, _ in chunks[0]]
    assert first[0] == BOS and first[76] == EOS and first.count(EOS) == 1  # 75 text tokens
    second = [t for t, _ in chunks[1]]
    assert second[:27] == [BOS] + [first[1]] * 25 + [EOS]


def test_short_group_moves_whole_to_next_chunk(clip_tokenizer):
    word = clip_tokenizer.encode("masterpiece")[0]
    text = " ".join(["masterpiece"] * 70) + "(a photo of a red cat:1.2)"  # second group: 6 tokens
    group = clip_tokenizer.encode("a photo of a red cat")
    chunks = _tok(clip_tokenizer, pad=0).tokenize_with_weights(text)
    first = [t for t, _ in chunks[0]]
    assert first[:72] == [BOS] + [word] * 70 + [EOS] and set(first[72:]) == {0}
    second = chunks[1]
    assert [t for t, _ in second[1:1 + len(group)]] == group
    assert all(w == 1.2 for _, w in second[1:1 + len(group)])


def test_embedding_lookup(clip_tokenizer):
    vectors = torch.randn(2, 8)
    calls = []

    def lookup(name, key, width):
        calls.append((name, key, width))
        return vectors if name == "myemb" else None

    chunks = _tok(clip_tokenizer, lookup=lookup).tokenize_with_weights("a cat embedding:myemb, (embedding:myemb:1.3) dog")
    tokens = chunks[0]
    tensors = [(i, t, w) for i, (t, w) in enumerate(tokens) if isinstance(t, torch.Tensor)]
    assert len(tensors) == 4
    assert torch.equal(tensors[0][1], vectors[0]) and torch.equal(tensors[1][1], vectors[1])
    assert tensors[2][2] == 1.3
    assert ("myemb,", "clip_l", 8) in calls and ("myemb", "clip_l", 8) in calls
    # The trailing comma after the name stays as text.
    assert tokens[tensors[1][0] + 1][0] == clip_tokenizer.encode(",")[0]


def test_embedding_of_another_width_stays_in_the_tokens(clip_tokenizer):
    # As ComfyUI's tokenizer: the vectors are tokens whatever their width (an SD1 embedding in an
    # SDXL prompt reaches bigG too); the encoder leaves out what does not fit (chunks_to_ids).
    from comfy_core.text_encoders.errors import TokenizeError

    tokens = _tok(clip_tokenizer, lookup=lambda n, k, w: torch.zeros(3, 5)).tokenize_with_weights("embedding:bad")[0]
    assert [tuple(t.shape) for t, _ in tokens if isinstance(t, torch.Tensor)] == [(5,)] * 3
    with pytest.raises(TokenizeError, match="'bad'"):
        _tok(clip_tokenizer, lookup=lambda n, k, w: torch.zeros(1, 3, 8)).tokenize_with_weights("embedding:bad")


def test_unknown_embedding_is_dropped_with_warning(clip_tokenizer, caplog):
    chunks = _tok(clip_tokenizer, lookup=lambda n, k, w: None).tokenize_with_weights("a embedding:missing cat")
    assert "missing" in caplog.text
    ids = [t for t, _ in chunks[0]]
    assert ids[:4] == [BOS, clip_tokenizer.encode("a")[0], clip_tokenizer.encode("cat")[0], EOS]


def test_without_lookup_embedding_text_is_tokenized(clip_tokenizer):
    chunks = _tok(clip_tokenizer).tokenize_with_weights("embedding:foo")
    assert [t for t, _ in chunks[0]][1:1 + len(clip_tokenizer.encode("embedding:foo"))] == clip_tokenizer.encode("embedding:foo")


def test_family_tokenizer_keys(clip_tokenizer):
    family = FamilyTokenizer({"clip_l": _tok(clip_tokenizer, pad=EOS, key="l"),
                              "clip_g": _tok(clip_tokenizer, pad=0, key="g")})
    tokens = family.tokenize_with_weights("a cat")
    assert set(tokens) == {"l", "g"}
    assert tokens["l"][0][-1][0] == EOS and tokens["g"][0][-1][0] == 0
    assert family.clip_l.spec.key == "l" and family.clip_g.spec.key == "g"


def test_untokenize(clip_tokenizer):
    chunk = _tok(clip_tokenizer).tokenize_with_weights("a cat")[0]
    assert _tok(clip_tokenizer).untokenize(chunk[:3]) == [
        ((BOS, 1.0), "<|startoftext|>"), ((320, 1.0), "a</w>"), ((2368, 1.0), "cat</w>")]
