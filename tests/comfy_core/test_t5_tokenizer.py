"""The T5 tokenizer: the shipped vocabulary's ids (checked once against ComfyUI's own
tokenizer.json; hard-coded here so a change of data or rules fails), and ComfyUI's
T5XXLTokenizer chunking, padding, options and prompt weights."""
from __future__ import annotations

import gzip

import pytest
import torch

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.t5_tokenizer import (
    DEFAULT_VOCABULARY,
    T5XXLTokenizer,
    load_t5_tokenizer,
    shared_t5_tokenizer,
)

# ids from ComfyUI 0.3.64's comfy/text_encoders/t5_tokenizer/tokenizer.json (without the final </s>)
KNOWN_IDS = [
    ("a photo of a cat", [3, 9, 1202, 13, 3, 9, 1712]),
    ("A Photo OF  a   cat ", [71, 5810, 3347, 3, 9, 1712]),  # case kept, runs of spaces, trailing space
    ("Café 日本語 🐱, 1,000,000 $3.14!", [18131, 3, 2, 3, 2, 6, 209, 23916, 5583, 5, 2534, 55]),
    ("</s> <extra_id_0> x</s>y", [1, 32099, 3, 226, 1, 63]),  # special tokens typed in the text
    ("ﬁ ① ｆｕｌｌ", [361, 209, 423]),  # NFKC-style folding of the precompiled normaliser
    (" cat", [1712]),
    ("", []),
]


@pytest.mark.parametrize("text, ids", KNOWN_IDS)
def test_known_ids(text, ids):
    assert T5XXLTokenizer().encode(text) == ids


def test_vocabulary_file_is_small_and_has_t5s_specials():
    assert DEFAULT_VOCABULARY.stat().st_size < 1_000_000
    backend = shared_t5_tokenizer()
    assert backend.get_vocab_size() == 32100
    assert [backend.token_to_id(t) for t in ("<pad>", "</s>", "<unk>", "<extra_id_99>")] == [0, 1, 2, 32000]


def test_a_broken_vocabulary_file_is_a_typed_error(tmp_path):
    with pytest.raises(VocabularyError, match="cannot be read"):
        load_t5_tokenizer(tmp_path / "missing.json.gz")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b'{"model": {"type": "BPE", "vocab": {}}}'))
    with pytest.raises(VocabularyError, match="unigram"):
        load_t5_tokenizer(bad)


def test_one_chunk_end_token_and_padding_to_min_length():
    sd3 = T5XXLTokenizer(min_length=77).tokenize_with_weights("a photo of a cat")
    assert len(sd3) == 1 and len(sd3[0]) == 77
    assert sd3[0][:9] == [(3, 1.0), (9, 1.0), (1202, 1.0), (13, 1.0), (3, 1.0), (9, 1.0), (1712, 1.0),
                          (1, 1.0), (0, 1.0)]
    assert {t for t, _ in sd3[0][8:]} == {0}
    flux = T5XXLTokenizer(min_length=256).tokenize_with_weights("a photo of a cat")
    assert len(flux) == 1 and len(flux[0]) == 256
    long_text = " ".join(f"word{i}" for i in range(200))
    (chunk,) = T5XXLTokenizer(min_length=77).tokenize_with_weights(long_text)  # never split at 77
    assert len(chunk) > 400 and chunk[-1] == (1, 1.0)


def test_min_padding_and_tokenizer_options():
    tokenizer = T5XXLTokenizer(min_length=77)
    plain = [(3, 1.0), (9, 1.0), (1712, 1.0), (1, 1.0)]
    # ComfyUI's T5TokenizerOptions node: both options under the encoder's key; min_length 0 = none
    options = {"t5xxl_min_padding": 3, "t5xxl_min_length": 0}
    assert tokenizer.tokenize_with_weights("a cat", tokenizer_options=options) == [plain + [(0, 1.0)] * 3]
    assert tokenizer.tokenize_with_weights("a cat", tokenizer_options={"t5xxl_min_length": 6}) == \
        [plain + [(0, 1.0)] * 2]
    assert T5XXLTokenizer(min_length=None, min_padding=1).tokenize_with_weights("a cat") == [plain + [(0, 1.0)]]
    assert T5XXLTokenizer(min_length=None).tokenize_with_weights("a cat",
                                                                 tokenizer_options={"l_min_length": 9}) == [plain]


def test_prompt_weights_escapes_and_word_ids():
    tokenizer = T5XXLTokenizer(min_length=None)
    (chunk,) = tokenizer.tokenize_with_weights("a (cat:1.3) ((dog)) \\(x\\)", return_word_ids=True)
    # the lone " " between groups is a word of no tokens (its id 3 is used up, as in ComfyUI)
    assert chunk == [(3, 1.0, 1), (9, 1.0, 1), (1712, 1.3, 2), (1782, pytest.approx(1.21), 4), (41, 1.0, 5), (226, 1.0, 5), (61, 1.0, 5), (1, 1.0, 0)]
    (unweighted,) = tokenizer.tokenize_with_weights("a (cat:1.3)", disable_weights=True)
    assert {w for _, w in unweighted} == {1.0}
    assert [t for t, _ in unweighted] == tokenizer.encode("a (cat:1.3)") + [1]


def test_untokenize_and_state_dict():
    tokenizer = T5XXLTokenizer(min_length=None)
    pairs = tokenizer.tokenize_with_weights("a cat")[0]
    assert [piece for _, piece in tokenizer.untokenize(pairs)] == ["\u2581", "a", "\u2581cat", "</s>"]
    assert tokenizer.state_dict() == {}


def test_embedding_lookup_inserts_vectors_with_the_prompt_weight():
    vectors = torch.randn(2, 8)
    seen = []

    def lookup(name, key, width):
        seen.append((name, key, width))
        return vectors if name == "style" else None

    plain = T5XXLTokenizer(min_length=None, embedding_width=8)
    assert plain.with_embedding_lookup(None) is plain
    tokenizer = plain.with_embedding_lookup(lookup)
    assert tokenizer.with_embedding_lookup(lookup) is tokenizer
    (chunk,) = tokenizer.tokenize_with_weights("a (embedding:style, cat:1.2)")
    assert chunk[0:2] == [(3, 1.0), (9, 1.0)]
    assert torch.equal(chunk[2][0], vectors[0]) and torch.equal(chunk[3][0], vectors[1])
    assert chunk[2][1] == chunk[3][1] == 1.2
    assert [t for t, _ in chunk[4:]] == tokenizer.encode(", cat") + [1]
    assert ("style,", "t5xxl", 8) in seen and ("style", "t5xxl", 8) in seen
    # without a lookup the text stays text, as ComfyUI with no embedding directory
    assert [t for t, _ in plain.tokenize_with_weights("embedding:style")[0]] == plain.encode("embedding:style") + [1]


def test_drop_in_slot_of_a_family_tokenizer():
    from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

    t5 = T5XXLTokenizer(min_length=256)
    family = FamilyTokenizer({"t5xxl": t5})
    tokens = family.tokenize_with_weights("a cat", tokenizer_options={"t5xxl_min_length": 5})
    assert tokens == {"t5xxl": [[(3, 1.0), (9, 1.0), (1712, 1.0), (1, 1.0), (0, 1.0)]]}
    assert family.t5xxl is t5 and family.with_embedding_lookup(lambda *a: None).t5xxl.embedding_lookup is not None
