"""The Llama 3 tokenizer: Meta's tiktoken vocabulary from the `llama-models` package, token ids
against a direct rank-ordered BPE (tiktoken's algorithm written out here) on 100+ prompts
(unicode, digits, whitespace, special tokens, long inputs), ids checked against tiktoken itself
(hard-coded), ComfyUI's added tokens and LLAMA3Tokenizer chunking, typed errors."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("llama_models")

from comfy_core.text_encoders.errors import VocabularyError  # noqa: E402
from comfy_core.text_encoders.llama_tokenizer import (PRETOKENIZE_PATTERN, LlamaTokenizer, added_tokens,  # noqa: E402
                                                      load_llama_ranks, shared_llama_tokenizer)


@pytest.fixture(scope="module")
def ranks():
    return load_llama_ranks()


def _reference(text: str, ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's encoding: special tokens split out, the pattern's pieces, each piece's bytes
    merged pair by pair, always the adjacent pair whose concatenation ranks lowest."""
    import regex

    specials = {content: index for index, content in added_tokens()}
    split = regex.compile("(" + "|".join(regex.escape(s) for s in specials) + ")")
    ids: list[int] = []
    for part in split.split(text):
        if part in specials:
            ids.append(specials[part])
            continue
        for piece in regex.findall(PRETOKENIZE_PATTERN, part):
            data = piece.encode("utf-8")
            if data in ranks:
                ids.append(ranks[data])
                continue
            parts = [bytes([b]) for b in data]
            while len(parts) > 1:
                best = min(range(len(parts) - 1), key=lambda i: ranks.get(parts[i] + parts[i + 1], 1 << 30))
                if parts[best] + parts[best + 1] not in ranks:
                    break
                parts[best:best + 2] = [parts[best] + parts[best + 1]]
            ids.extend(ranks[p] for p in parts)
    return ids


PROMPTS = ["a photo of a cat", "", " ", "  two  spaces", "Hello, World!!! 12345678 3.14159", "naïve café Ünïcödé",
           "日本語のテキスト、中文文本", "emoji 🐱‍👤🚀🔥 mixed", "tabs\tand\nnewlines\r\n\n  end  ", "don't I'LL we've",
           "<|begin_of_text|>hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nA cat<|eot_id|>",
           "a" * 500, "word " * 300, "1234567890" * 20, "Привет мир", "مرحبا بالعالم", "🙂" * 40, "x\u200by\u00a0z",
           "(masterpiece:1.2), best quality", "e\u0301 vs é", "ﬁ ligature", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "a\n\n\nb", "   leading",
           "trailing   "]


def _random_prompts(count: int = 100) -> list[str]:
    rnd = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`\n\téüßøπΩж中文日本🙂🚀 "
    return ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 200))) for _ in range(count)]


def test_ids_equal_rank_ordered_bpe_on_many_prompts(ranks):
    tokenizer = shared_llama_tokenizer()
    prompts = PROMPTS + _random_prompts()
    assert len(prompts) >= 100
    for text in prompts:
        assert tokenizer.encode(text, add_special_tokens=False).ids == _reference(text, ranks), repr(text[:60])


def test_ids_are_tiktokens():
    """Ids tiktoken 0.14 gives with Meta's ranks and pattern (checked when this was written)."""
    tokenizer = shared_llama_tokenizer()
    expected = {"a photo of a cat": [64, 6685, 315, 264, 8415],
                "Hello, World!!! 12345678": [9906, 11, 4435, 12340, 220, 4513, 10961, 2495],
                "日本語": [102433, 102158], "🐱": [9468, 238, 109], "<|eot_id|>": [128009], "don't": [15357, 956]}
    for text, ids in expected.items():
        assert tokenizer.encode(text, add_special_tokens=False).ids == ids, text
    assert tokenizer.decode([9906, 11, 4435, 12340]) == "Hello, World!!!"


def test_added_tokens_are_comfyuis():
    tokens = dict(added_tokens())
    assert tokens[128000] == "<|begin_of_text|>" and tokens[128009] == "<|eot_id|>"
    assert tokens[128004] == "<|reserved_special_token_2|>" and tokens[128008] == "<|reserved_special_token_4|>"
    assert tokens[128255] == "<|reserved_special_token_250|>" and tokens[128258] == "<pad>"
    assert len(tokens) == 259


def test_llama3_tokenizer_chunks_as_comfyuis():
    tokenizer = LlamaTokenizer()
    [chunk] = tokenizer.tokenize_with_weights("a (photo:1.5) of a cat")
    assert len(chunk) == 128 and chunk[0] == (128000, 1.0)
    # Each weighted segment is tokenized on its own ("a ", "photo", " of a cat"), as ComfyUI's SDTokenizer.
    assert chunk[1:7] == [(64, 1.0), (220, 1.0), (11817, 1.5), (315, 1.0), (264, 1.0), (8415, 1.0)]
    assert chunk[7:] == [(128009, 1.0)] * 121
    [long] = tokenizer.tokenize_with_weights("cat " * 299 + "cat")
    assert len(long) == 301 and long[-1] == (8415, 1.0)  # one chunk, no padding past 128
    [words] = tokenizer.tokenize_with_weights("a cat", return_word_ids=True)
    assert words[:3] == [(128000, 1.0, 0), (64, 1.0, 1), (8415, 1.0, 1)]
    assert tokenizer.untokenize([(8415, 1.0)]) == [((8415, 1.0), "Ġcat")]


def test_missing_package_and_wrong_file_are_vocabulary_errors(tmp_path, monkeypatch):
    import importlib.util

    wrong = tmp_path / "tokenizer.model"
    wrong.write_text("IQ== 0\n")
    with pytest.raises(VocabularyError, match="sha256"):
        load_llama_ranks(wrong)
    with pytest.raises(VocabularyError, match="expected ranks"):
        load_llama_ranks(wrong, check_hash=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(VocabularyError, match="llama-models"):
        load_llama_ranks()
