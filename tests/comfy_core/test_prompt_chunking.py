"""The 75-token chunker: BOS/EOS, comma backtrack, BREAK, embeddings at boundaries (reference 3.3)."""
import re

import pytest
import torch

from comfy_core.prompt import EmbeddingError, parse_prompt_attention
from comfy_core.prompt.chunking import (EmbeddingIndex, SpecialTokens, empty_chunk, pad_chunk_ids,
                                        tokenize_segments)
from comfy_core.prompt.embedding import Embedding

BOS, EOS, COMMA = 49406, 49407, 267


class WordTokenizer:
    """A deterministic stand-in for CLIP's BPE: one id per lowercased word or punctuation mark."""

    def __init__(self):
        self.ids = {",": COMMA}

    def __call__(self, text):
        return [self.ids.setdefault(word, 1000 + len(self.ids))
                for word in re.findall(r"\w+|[^\s\w]", text.lower())]


def chunk(text, embeddings=(), backtrack=20, tokenizer=None):
    tokenizer = tokenizer or WordTokenizer()
    index = EmbeddingIndex(list(embeddings), tokenizer)
    return tokenize_segments(parse_prompt_attention(text), tokenizer, embeddings=index,
                             comma_backtrack=backtrack)


def words(n, prefix="w"):
    return " ".join(f"{prefix}{i}" for i in range(n))


def real(c):
    """A chunk's text tokens (between BOS and the first padding EOS)."""
    body = c.tokens[1:-1]
    return body[:body.index(EOS)] if EOS in body else body


def emb(name, vectors=2, width=8):
    return Embedding(name, torch.randn(vectors, width))


def test_short_prompt_one_chunk_with_bos_eos_padding():
    chunks, count = chunk("a (b:1.5) c")
    assert count == 3 and len(chunks) == 1
    tokens, mults = chunks[0].tokens, chunks[0].multipliers
    assert len(tokens) == 77 and len(mults) == 77
    assert tokens[0] == BOS and tokens[4:] == [EOS] * 73
    assert mults[:5] == [1.0, 1.0, 1.5, 1.0, 1.0]


def test_empty_prompt_is_bos_and_76_eos():
    chunks, count = chunk("")
    assert count == 0 and len(chunks) == 1
    assert chunks[0].tokens == empty_chunk().tokens == [BOS] + [EOS] * 76


def test_long_prompt_splits_at_75():
    chunks, count = chunk(words(80))
    assert count == 80 and len(chunks) == 2
    assert len(real(chunks[0])) == 75 and len(real(chunks[1])) == 5
    assert all(len(c.tokens) == 77 for c in chunks)


def test_exactly_75_tokens_is_one_chunk():
    chunks, count = chunk(words(75))
    assert len(chunks) == 1 and count == 75


def test_comma_backtrack_moves_words_after_last_comma():
    # 70 tokens + "," + 10 tokens -> chunk 1 keeps 71 tokens, chunk 2 gets 10, count 85
    chunks, count = chunk(words(70) + " , " + words(10, "x"))
    assert [len(real(c)) for c in chunks] == [71, 10]
    assert real(chunks[0])[-1] == COMMA
    assert count == 85


@pytest.mark.parametrize("before_comma, backtracks", [(55, True), (54, False)])
def test_comma_backtrack_limit_is_20(before_comma, backtracks):
    chunks, _ = chunk(words(before_comma) + " , " + words(30, "x"))
    first = len(real(chunks[0]))
    assert first == (before_comma + 1 if backtracks else 75)


def test_backtrack_zero_disables_it():
    chunks, _ = chunk(words(70) + " , " + words(10, "x"), backtrack=0)
    assert len(real(chunks[0])) == 75


def test_backtrack_keeps_multipliers_with_their_tokens():
    chunks, _ = chunk(words(70) + ", (" + words(10, "x") + ":1.3)")
    assert chunks[1].multipliers[1:11] == [1.3] * 10


def test_comma_as_76th_token_starts_next_chunk_and_is_forgotten():
    chunks, _ = chunk(words(75) + ", " + words(80, "x"))
    assert real(chunks[1])[0] == COMMA
    assert len(real(chunks[1])) == 75  # no backtrack to that forgotten comma


@pytest.mark.parametrize("text, chunk_count, count", [
    ("a BREAK", 1, 75), ("a BREAK b", 2, 76), ("BREAK a", 2, 76), ("a BREAK BREAK b", 3, 151),
])
def test_break_forces_chunks(text, chunk_count, count):
    chunks, token_count = chunk(text)
    assert (len(chunks), token_count) == (chunk_count, count)


def test_break_inside_brackets_is_a_word():
    chunks, _ = chunk("(a BREAK b)")
    assert len(chunks) == 1 and len(real(chunks[0])) == 3
    assert chunks[0].multipliers[2] == pytest.approx(-1.1)


def test_embedding_matched_by_token_sequence_case_insensitive():
    e = emb("my-style", vectors=3)
    chunks, count = chunk("a photo in My-Style, red", [e])
    c = chunks[0]
    assert c.fixes == [(3, e)]
    assert c.tokens[4:7] == [0, 0, 0]
    assert count == 3 + 3 + 2


def test_embedding_carries_segment_weight():
    e = emb("tok", vectors=2)
    chunks, _ = chunk("a (tok:1.3)", [e])
    assert chunks[0].multipliers[2:4] == [1.3, 1.3]


def test_embedding_never_straddles_chunks():
    e = emb("tok", vectors=4)
    chunks, _ = chunk(words(73) + " tok b", [e])
    assert len(real(chunks[0])) == 73
    assert chunks[1].fixes == [(0, e)] and chunks[1].tokens[1:5] == [0, 0, 0, 0]


def test_longest_name_with_shared_first_token_wins():
    short, long = emb("cat", 1), emb("cat style", 2)
    chunks, _ = chunk("a cat style b cat", [short, long])
    assert chunks[0].fixes == [(1, long), (4, short)]


def test_name_split_by_brackets_is_not_matched():
    chunks, _ = chunk("(my)emb", [emb("my emb")])
    assert chunks[0].fixes == []


def test_backtrack_leaves_embedding_fix_on_old_chunk_as_webui():
    e = emb("tok", vectors=2)
    chunks, _ = chunk(words(60) + " , " + words(10, "x") + " tok " + words(10, "y"), [e])
    # the placeholders moved to chunk 2 but the fix stayed on chunk 1, pointing past its tokens
    assert chunks[0].fixes == [(71, e)]
    assert chunks[1].fixes == []
    assert chunks[1].tokens[11:13] == [0, 0]


def test_explicit_embedding_item_from_tokenizer():
    e = emb("zzz", vectors=2)
    tokenize = lambda text: [5, e, 6] if text else []
    chunks, count = tokenize_segments([["x", 1.0]], tokenize)
    assert chunks[0].fixes == [(1, e)] and chunks[0].tokens[1:5] == [5, 0, 0, 6] and count == 4


def test_embedding_longer_than_a_chunk_is_refused():
    with pytest.raises(EmbeddingError, match="76 vectors"):
        chunk("big", [emb("big", vectors=76)])


def test_pad_chunk_ids_rewrites_after_first_eos():
    tokens = [BOS, 5, 6, EOS, EOS, EOS]
    assert pad_chunk_ids(tokens, EOS, 0) == [BOS, 5, 6, EOS, 0, 0]
    assert pad_chunk_ids(tokens, EOS, EOS) == tokens
    full = [BOS] + [7] * 75 + [EOS]
    assert pad_chunk_ids(full, EOS, 0) == full


def test_special_tokens_default_are_clip_ids():
    assert SpecialTokens() == SpecialTokens(bos=BOS, eos=EOS, comma=COMMA)
