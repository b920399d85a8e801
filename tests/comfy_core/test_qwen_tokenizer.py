"""The Qwen byte-level BPE tokenizer (comfy_core/text_encoders/qwen_tokenizer.py): the shipped
vocabulary (merges count, digest, ids ComfyUI's own qwen25_tokenizer files give), token ids equal to
two references on 100+ prompts (transformers' Qwen2Tokenizer built from vocab.json / merges.txt /
tokenizer_config.json written from the same data, and a pure-Python byte-level BPE written here),
and ComfyUI's SDTokenizer behaviour with Qwen's settings (one chunk, no start / end, pad 151643,
min_length, weights on / off, escapes, embeddings), plus Z-Image's chat template."""
from __future__ import annotations

import gzip
import hashlib
import json
import unicodedata
from functools import lru_cache

import pytest
import torch

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.qwen_tokenizer import (
    ADDED_TOKENS,
    DEFAULT_MERGES,
    IM_START_ID,
    PAD_ID,
    PRETOKENIZE_PATTERN,
    QwenTokenizer,
    load_qwen_merges,
    qwen_vocabulary,
    shared_qwen_tokenizer,
)
from comfy_core.text_encoders.vocab import bytes_to_unicode
from comfy_core.families.zimage.clip import LLAMA_TEMPLATE, ZImageTokenizer

MERGES_SHA256 = "599bab54075088774b1733fde865d5bd747cbcc7a547c5bc12610e874e26f5e3"


def _prompts() -> list[str]:
    """Varied prompts: scripts, emoji, combining marks, whitespace runs, digits, contractions,
    punctuation, special tokens, chat templates, long inputs."""
    hand = [
        "", " ", "  ", "\n", "\t", "a", "Hello world", "hello   world", "  leading spaces", "trailing spaces   ",
        "tabs\tand\t\ttabs", "new\nline", "many\n\n\nnewlines\n", "\r\nwindows\r\nlines", "mixed \t\n whitespace \n\t ",
        "I'm here, you're there, they'll go, we've been, he'd say, it's ok, don't", "IT'S LOUD, DON'T", "O'Neil's",
        "1234567890", "3.14159 and 2,718", "version v1.2.3-beta", "$100 & 50% off!!!", "a+b=c; x<y>z", "(word:1.2)",
        "\\(escaped\\) parens", "[bracket] {brace} <angle>", "email@example.com https://example.org/a?b=c#d",
        "日本語のテキスト", "中文提示词：一只猫坐在垫子上", "한국어 문장입니다", "Русский текст с цифрами 42",
        "العربية نص", "עברית", "ελληνικά γράμματα", "हिन्दी पाठ", "ไทย ภาษา", "Ångström café naïve résumé façade",
        "e\u0301 decomposed and \u00e9 composed", "ﬁ ligature ＦＵＬＬＷＩＤＴＨ", "🙂😀🎉 emoji 👩‍👩‍👧 family 🇯🇵 flag",
        "mañana über straße", "ZWJ\u200dtest\u200b zero width", "\u00a0non-breaking\u3000ideographic space",
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>user\nhi<|im_end|>",
        "<|vision_start|><|image_pad|><|vision_end|>", "<tool_call>{\"a\": 1}</tool_call>",
        "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|img|><|endofimg|><|meta|><|endofmeta|>",
        "<think>\n\n</think>\n\n", "<|im_start|> spaced <|im_end|>", "a<|endoftext|>b", "<|not_a_token|>",
        LLAMA_TEMPLATE.format("a photo of a cat, 4k, detailed"),
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n描述这张图<|im_end|>\n",
        "    def f(x):\n        return x ** 2\n", "```python\nprint('hi')\n```", "snake_case camelCase PascalCase",
        "ALLCAPS lowercase MiXeD", "!!!???...,,,;;;", "-- dashes — em – en", "quotes “curly” ‘single’ «guillemets»",
        "a" * 300, "ab " * 200, "猫" * 150, "🙂" * 64, " " * 40 + "x", "\n" * 20 + "y",
    ]
    subjects = ["a cat", "two dogs", "an old lighthouse", "a neon city", "ein Fuchs", "une forêt", "一座山", "夜の街"]
    styles = ["oil painting", "35mm photo, f/1.8", "4k, ultra-detailed", "(masterpiece:1.2)", "watercolor",
              "low-poly 3D render", "anime style", "isometric, 8-bit"]
    generated = [f"{s} at {h}:{m:02d}, {styles[(i + j) % len(styles)]}"
                 for i, s in enumerate(subjects) for j, (h, m) in enumerate(((7, 5), (12, 30), (23, 59), (0, 0)))]
    long_text = " ".join(f"Sentence {i}: the quick brown fox jumps over the lazy dog; 価格は{i * 37}円です."
                         for i in range(120))
    return hand + generated + [long_text, long_text.replace(" ", "\n"), long_text.upper()]


PROMPTS = _prompts()


def test_there_are_a_hundred_prompts_and_more():
    assert len(PROMPTS) >= 100


# --- the shipped data --------------------------------------------------------------------------------

def test_the_shipped_merges_are_qwens():
    data = gzip.decompress(DEFAULT_MERGES.read_bytes())
    assert hashlib.sha256(data).hexdigest() == MERGES_SHA256
    merges = load_qwen_merges()
    assert len(merges) == 151_387 and merges[:3] == [("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("i", "n")]


def test_known_ids_of_comfyuis_qwen25_tokenizer():
    """Ids transformers' Qwen2Tokenizer gives over ComfyUI's own comfy/text_encoders/qwen25_tokenizer files."""
    tok = shared_qwen_tokenizer()
    cases = {
        "Hello world": [9707, 1879],
        LLAMA_TEMPLATE.format("a photo of a cat, 4k"): [151644, 872, 198, 64, 6548, 315, 264, 8251, 11, 220, 19, 74,
                                                       151645, 198, 151644, 77091, 198],
        "日本語 café 🙂": [101059, 102819, 51950, 27484],
        "  x\n\n\ty 1234": [220, 856, 271, 14522, 220, 16, 17, 18, 19],
    }
    for text, ids in cases.items():
        assert tok.encode(text, add_special_tokens=False).ids == ids, text
    assert tok.get_vocab_size(with_added_tokens=True) == 151_669
    assert [tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|endofmeta|>")] == \
        [151643, 151644, 151645, 151668]


def test_the_vocabulary_is_the_byte_symbols_then_one_token_per_merge():
    vocab = qwen_vocabulary(load_qwen_merges())
    assert vocab["!"] == 0 and vocab["ĠĠ"] == 256 and vocab["in"] == 258 and len(vocab) == 151_643


def test_a_truncated_merges_file_is_a_vocabulary_error(tmp_path):
    path = tmp_path / "merges.txt.gz"
    path.write_bytes(gzip.compress("Ġ Ġ\ni n\n".encode()))
    with pytest.raises(VocabularyError, match="2 merge lines, expected 151387"):
        load_qwen_merges(path)
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(VocabularyError, match="cannot be read"):
        load_qwen_merges(tmp_path / "bad.txt")


# --- against the references --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def transformers_reference(tmp_path_factory):
    """transformers' Qwen2Tokenizer from vocab.json + merges.txt (+ the added tokens' config), the
    files written from the shipped data as Qwen / ComfyUI lay them out."""
    from transformers import Qwen2Tokenizer

    folder = tmp_path_factory.mktemp("qwen_tokenizer")
    merges = load_qwen_merges()
    (folder / "vocab.json").write_text(json.dumps(qwen_vocabulary(merges), ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n",
                                       encoding="utf-8")
    added = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": s} for i, c, s in ADDED_TOKENS}
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": added, "tokenizer_class": "Qwen2Tokenizer", "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "add_prefix_space": False,
        "errors": "replace", "split_special_tokens": False, "model_max_length": 131072}), encoding="utf-8")
    return Qwen2Tokenizer.from_pretrained(str(folder))


class SlowByteLevelBPE:
    """A plain-Python byte-level BPE (GPT-2's algorithm, as transformers 4's slow Qwen2Tokenizer):
    NFC, split out added tokens, split by the pre-tokenizer regex, bytes -> symbols, merge the
    lowest-ranked adjacent pair until none is ranked."""

    def __init__(self) -> None:
        import regex

        merges = load_qwen_merges()
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.vocab = qwen_vocabulary(merges)
        self.byte_symbol = bytes_to_unicode()
        self.added = {content: index for index, content, _ in ADDED_TOKENS}
        self.split_added = regex.compile("(" + "|".join(regex.escape(t) for t in self.added) + ")")
        self.pattern = regex.compile(PRETOKENIZE_PATTERN)

    @lru_cache(maxsize=None)
    def bpe(self, piece: str) -> tuple[str, ...]:
        word = [self.byte_symbol[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(self.ranks.get((a, b), float("inf")), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            rank, _ = min(pairs)
            if rank == float("inf"):
                break
            first, second = next((word[i], word[i + 1]) for r, i in pairs if r == rank)
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return tuple(word)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in self.split_added.split(unicodedata.normalize("NFC", text)):
            if part in self.added:
                ids.append(self.added[part])
                continue
            for piece in self.pattern.findall(part):
                ids.extend(self.vocab[symbol] for symbol in self.bpe(piece))
        return ids


@pytest.fixture(scope="module")
def slow_reference():
    return SlowByteLevelBPE()


def test_ids_equal_transformers_qwen2_tokenizer_on_every_prompt(transformers_reference):
    tok = shared_qwen_tokenizer()
    for text in PROMPTS:
        assert tok.encode(text, add_special_tokens=False).ids == transformers_reference(text)["input_ids"], repr(text)


def test_ids_equal_a_plain_python_byte_level_bpe_on_every_prompt(slow_reference):
    tok = shared_qwen_tokenizer()
    for text in PROMPTS:
        assert tok.encode(text, add_special_tokens=False).ids == slow_reference.encode(text), repr(text)


def test_decode_round_trips(transformers_reference):
    tok = QwenTokenizer("qwen3_4b", 32)
    for text in PROMPTS[:60]:
        ids = tok.encode(text)
        assert tok.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text)
    assert tok.decode(tok.encode("<|im_start|>hi<|im_end|>")) == "hi"


# --- ComfyUI's SDTokenizer with Qwen's settings ------------------------------------------------------

def test_one_chunk_without_start_or_end_token_and_min_length_one():
    tok = QwenTokenizer("qwen3_4b", 32)
    assert tok.start_token is None and tok.end_token is None and tok.pad_token == PAD_ID == 151643
    ids = tok.encode(PROMPTS[-1])
    chunks = tok.tokenize_with_weights(PROMPTS[-1])
    assert len(chunks) == 1 and [t for t, _ in chunks[0]] == ids and len(ids) > 1000
    assert tok.tokenize_with_weights("") == [[(PAD_ID, 1.0)]]
    assert tok.tokenize_with_weights("hi", tokenizer_options={"qwen3_4b_min_length": 4}) == \
        [[(6023, 1.0), (PAD_ID, 1.0), (PAD_ID, 1.0), (PAD_ID, 1.0)]]
    assert tok.tokenize_with_weights("hi", tokenizer_options={"qwen3_4b_min_padding": 2})[0][1:] == \
        [(PAD_ID, 1.0), (PAD_ID, 1.0)]
    with_ids = tok.tokenize_with_weights("a cat", return_word_ids=True)
    assert [w for _, _, w in with_ids[0]] == [1, 1]


def test_weights_are_parsed_unless_disabled():
    tok = QwenTokenizer("qwen3_4b", 32)
    weighted = tok.tokenize_with_weights("a (red:1.5) cat")[0]
    pieces = [(tok.encode("a "), 1.0), (tok.encode("red"), 1.5), (tok.encode(" cat"), 1.0)]
    assert weighted == [(t, w) for ids, w in pieces for t in ids]
    plain = tok.tokenize_with_weights("a (red:1.5) \\(cat\\)", disable_weights=True)[0]
    assert [t for t, _ in plain] == tok.encode("a (red:1.5) (cat)") and {w for _, w in plain} == {1.0}


def test_embeddings_are_looked_up_by_name():
    vector = torch.randn(2, 32)

    def lookup(name, key, width):
        assert key == "qwen3_4b" and width == 32
        return vector if name == "style" else None

    tok = QwenTokenizer("qwen3_4b", 32).with_embedding_lookup(lookup)
    chunk = tok.tokenize_with_weights("a embedding:style cat")[0]
    assert [t for t, _ in chunk[:1]] == tok.encode("a")  # the space before `embedding:` is the cut
    assert torch.equal(chunk[1][0], vector[0]) and torch.equal(chunk[2][0], vector[1])
    assert [t for t, _ in chunk[3:]] == tok.encode("cat")
    assert tok.untokenize([(9707, 1.0)]) == [((9707, 1.0), "Hello")]


def test_zimage_wraps_the_prompt_in_the_chat_template_without_weights():
    z = ZImageTokenizer({"qwen3_4b": QwenTokenizer("qwen3_4b", 32, min_length=1)})
    tokens = z.tokenize_with_weights("a (cat:1.3)")
    assert list(tokens) == ["qwen3_4b"]
    ids = [t for t, _ in tokens["qwen3_4b"][0]]
    assert ids == z.qwen3_4b.encode("<|im_start|>user\na (cat:1.3)<|im_end|>\n<|im_start|>assistant\n")
    assert ids[:3] == [IM_START_ID, 872, 198] and {w for _, w in tokens["qwen3_4b"][0]} == {1.0}
    custom = z.tokenize_with_weights("dog", llama_template="<|im_start|>system\nbe brief<|im_end|>\n{}")
    assert [t for t, _ in custom["qwen3_4b"][0]] == z.qwen3_4b.encode("<|im_start|>system\nbe brief<|im_end|>\ndog")
    assert z.decode(ids) == "user\na (cat:1.3)\nassistant\n"
