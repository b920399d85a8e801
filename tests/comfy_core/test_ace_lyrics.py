"""ACE-Step 1's lyric tokenizer (comfy_core/text_encoders/ace_lyrics.py, ace_text_cleaners.py):
the BPE stage against the `tokenizers` library over the same vocab.json, the cleaners against
hand-written expectations, and whole lyrics against ids ComfyUI 0.3.64's `LyricsTokenizer` gave
(run from its source over the same file; data/PROVENANCE.md)."""
from __future__ import annotations

import json

import pytest

from comfy_core.text_encoders.ace_lyrics import (
    DEFAULT_VOCABULARY,
    LANGUAGES,
    language_tag,
    load_lyric_vocabulary,
    shared_lyrics_tokenizer,
    split_language,
)
from comfy_core.text_encoders.ace_text_cleaners import (
    Unspellable,
    clean_lyric_line,
    expand_numbers,
    japanese_to_romaji,
    number_to_words,
)
from comfy_core.text_encoders.errors import VocabularyError


@pytest.fixture(scope="module")
def tokenizer():
    return shared_lyrics_tokenizer()


@pytest.fixture(scope="module")
def oracle():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(DEFAULT_VOCABULARY))


# Inputs of the BPE stage (after the cleaners: tag, lower case, spaces as [SPACE]).
BPE_TEXTS = [
    "[en]for[SPACE]you",  # "for" is a merge listed twice: its last listing's rank gives "fo" "r"
    "[en]neon[SPACE]rain[SPACE]on[SPACE]my[SPACE]screen,",
    "[en]i’m[SPACE]plugged[SPACE]into[SPACE]emotion.",
    "[en]comfy[SPACE]cloud[SPACE]—[SPACE]breathing[SPACE]light,",  # — is not in the vocabulary
    "[en][pre-chorus][chorus][break[SPACE]down][verse[SPACE]two]",
    "[zh-cn]你好世界[SPACE]123",
    "[hi]नमस्ते[SPACE]दुनिया",  # Devanagari vowel signs are marks: word characters
    "[ja]konnichiha,[SPACE]sekai.",
    "[ko]안녕하세요[SPACE][ru]привет[SPACE][ar]مرحبا",
    "[de]grüße[SPACE]straße[SPACE][fr]l'été[SPACE][tr]ıstanbul",
    "[en]x²½ⓐa\u200db[SPACE]e\u0301[SPACE]::;;!?...--",  # ² ½ split words, ⓐ and the joiner do not
    "[en][SPACE][SPACE]a[SPACE]", "", "[START][start][STOP][UNK]",
]


@pytest.mark.parametrize("text", BPE_TEXTS)
def test_bpe_stage_matches_the_tokenizers_library(tokenizer, oracle, text):
    assert tokenizer.bpe.encode(text) == oracle.encode(text).ids


def test_repeated_merges_rank_at_their_last_listing(tokenizer):
    """"f o", "o r" and "f or" are each listed several times; by first listing "o r" (17) then
    "f or" (47) would give "for" (87), by last listing "f o" (4798) comes first: "fo" "r"."""
    merges = json.loads(DEFAULT_VOCABULARY.read_text(encoding="utf-8"))["model"]["merges"]
    ranks = tokenizer.bpe.vocabulary.merge_ranks
    for pair in ("f o", "o r", "f or"):
        assert ranks[tuple(pair.split(" "))] == len(merges) - 1 - merges[::-1].index(pair) > merges.index(pair)
    assert tokenizer.bpe.encode("for") == [182, 31]


# (lyrics, ComfyUI 0.3.64's LyricsTokenizer ids)
COMFY_IDS = [
    ("", [261]),
    ("\n", [261, 2, 2]),
    ("Dreams for you", [261, 259, 481, 18, 122, 32, 2, 182, 31, 2, 74, 2]),
    ("[zh]你好世界", [261, 5023, 1, 1, 1, 1, 2]),  # the tag; Chinese characters are [UNK] here
    ("I have 2 dogs & $5", [261, 259, 22, 2, 21, 789, 2, 232, 28, 2, 6064, 32, 2, 53, 2, 840, 76, 2, 29, 758, 27,
                            33, 2, 517, 89, 2]),  # i have two dogs and five point zero
    ("[verse]", [261, 259, 6683, 2]),
    ("[zh][chorus]", [261, 259, 6684, 2]),  # a structure tag is cleaned and tagged as English
    ("こんにちは", [261, 5412, 475, 27, 91, 21, 2175, 14, 2]),  # kana: romaji, tagged [ja]
    ("[de]Grüße 2", [261, 260, 20, 406, 610, 2, 4497, 2]),  # German keeps its digits
    ("[instrumental]\n[break down]\n[drum fill]\n[chopped samples]\n",  # audio_ace_step_1_t2a_instrumentals
     [261, 259, 1, 718, 1951, 763, 56, 1, 2, 259, 1, 243, 18, 213, 2, 17, 190, 1, 2, 259, 1, 481, 231, 2, 19, 216, 1,
      2, 259, 1, 71, 161, 124, 17, 2, 150, 787, 755, 1, 2, 2]),
    ("Verse\nNeon rain on my screen,\nDreams compile in silver sheen.\nNo weight, just motion,\nI’m plugged into "
     "emotion.\n\nChorus\nComfy Cloud — breathing light,\nCode and color, spark and wire.\nDrift through data, feel "
     "alive,\nIn your circuits, I arrive.",  # audio_ace_step_1_t2a_song / m2m_editing
     [261, 259, 35, 173, 18, 2, 259, 111, 47, 2, 940, 27, 2, 47, 2, 125, 2, 1499, 2948, 27, 7, 2, 259, 481, 18, 122,
      32, 2, 884, 22, 64, 2, 41, 2, 212, 4894, 44, 2, 120, 2738, 9, 2, 259, 95, 2, 100, 343, 583, 7, 2, 226, 2, 26,
      474, 1185, 27, 7, 2, 259, 22, 1473, 26, 2, 178, 34, 1709, 49, 2, 228, 2, 225, 474, 1185, 27, 9, 2, 2, 259, 988,
      563, 32, 2, 259, 170, 19, 38, 2, 1095, 45, 17, 2, 3997, 2, 243, 18, 14, 153, 2, 75, 20, 583, 7, 2, 259, 174,
      126, 2, 53, 2, 1509, 57, 7, 2, 248, 59, 24, 2, 53, 2, 85, 46, 9, 2, 259, 481, 140, 33, 2, 40, 31, 202, 2, 2743,
      14, 7, 2, 132, 249, 2, 1245, 76, 7, 2, 259, 41, 2, 38, 160, 2, 16, 98, 1564, 192, 7, 2, 22, 2, 962, 76, 9, 2]),
]


@pytest.mark.parametrize("lyrics, ids", COMFY_IDS)
def test_lyrics_give_comfyuis_ids(tokenizer, lyrics, ids):
    (chunk,) = tokenizer.tokenize_with_weights(lyrics)
    assert [t for t, _ in chunk] == ids


def test_weights_split_the_text_into_pieces_with_word_ids(tokenizer):
    """ComfyUI's SDTokenizer: `(oh oh)` is its own piece (weight 1.1, its own lines), each piece's
    tokens follow the one 261; `disable_weights` keeps the brackets as text."""
    (chunk,) = tokenizer.tokenize_with_weights("(oh oh)\nla", return_word_ids=True)
    assert chunk == [(261, 1.0, 0)] + [(t, pytest.approx(1.1), 1) for t in (259, 28, 21, 2, 28, 21, 2)] + [
        (t, 1.0, 2) for t in (2, 259, 494, 2)]
    (plain,) = tokenizer.tokenize_with_weights("(oh oh)\nla", disable_weights=True)  # "(" 5, ")" 6
    assert [t for t, _ in plain] == [261, 259, 5, 28, 21, 2, 28, 21, 6, 2, 259, 494, 2]
    (escaped,) = tokenizer.tokenize_with_weights(r"\(oh\)")
    assert escaped == [(t, 1.0) for t in (261, 259, 5, 28, 21, 6, 2)]


def test_padding_options(tokenizer):
    (chunk,) = tokenizer.tokenize_with_weights("", tokenizer_options={"lyrics_min_length": 4})
    assert chunk == [(261, 1.0), (2, 1.0), (2, 1.0), (2, 1.0)]
    (chunk,) = tokenizer.tokenize_with_weights("\n", tokenizer_options={"lyrics_min_padding": 2})
    assert [t for t, _ in chunk] == [261, 2, 2, 2, 2]


def test_language_tags(tokenizer):
    assert split_language("[ZH]你好") == ("zh", "你好") and split_language("[xx]hi") == ("en", "[xx]hi")
    assert split_language("[verse]") == ("en", "[verse]") and split_language("[de] hallo") == ("de", " hallo")
    vocabulary = tokenizer.bpe.vocabulary
    assert all(vocabulary.added[language_tag(lang)] == index for lang, index in LANGUAGES.items())
    assert language_tag("zh") == "[zh-cn]"


def test_number_words():
    assert number_to_words(0) == "zero" and number_to_words(0.0) == "zero"
    assert number_to_words(1_000_000_001) == "one billion one"
    assert number_to_words(2_000_000_000_000) == "two thousand billion"
    assert number_to_words(115) == "one hundred fifteen" and number_to_words(90) == "ninety"
    assert number_to_words(3.14) == "three point one four" and number_to_words(5.0) == "five point zero"
    assert number_to_words(0.5) == " point five"  # ComfyUI's empty integer part
    for value in (1e-05, 1e16, float("inf")):
        with pytest.raises(Unspellable):
            number_to_words(value)


@pytest.mark.parametrize("text, spelled", [
    ("1,000 people", "one thousand people"),
    ("$5 and £3.50 and 7€", "five point zero and three point five and seven point zero"),
    ("21st 3.14 12,5", "twenty one three point one four twelve point five"),
    ("the 1990s", "the one thousand nine hundred ninetys"),
    # the bad amount stops only the currencies: "1.000" is then a decimal, "000" a number
    ("$1.000.000 3.5", "$one point zero.zero three point five"),
])
def test_english_numbers(text, spelled):
    assert expand_numbers(text) == spelled


@pytest.mark.parametrize("text, lang, cleaned", [
    ("Call Dr. Who at 5 & bring 100% #1", "en", "call doctor who at five and bring one hundred percent hash one"),
    ("  \"Quoted\"   words\t", "en", "quoted words"),
    ("0.00001 and 2", "en", "0.00001 and 2"),  # one unspellable number skips the whole number stage
    ("Grüße 2 & co.", "de", "grüße 2 & co."),  # ComfyUI's tables are English only
    ("İSTANBUL ÖZEL Ü", "tr", "istanbul özel ü"),
    ("İ", "en", "i\u0307"),
    (" hallo ", "de", " hallo "),  # only English strips (its symbol stage)
])
def test_cleaners(text, lang, cleaned):
    assert clean_lyric_line(text, lang) == cleaned


@pytest.mark.parametrize("kana, romaji", [
    ("こんにちは", "konnichiha"), ("キャッチ", "kyacchi"), ("ちょっと", "chotto"), ("ジャズ", "jazu"),
    ("ファン", "fuァn"),  # only ゃゅょ / ャュョ make digraphs
    ("っあ", "a"), ("っ", ""), ("ラーメン", "raーmen"), ("はい、そう。", "hai, sou. "), ("a\u3000b", "a b"),
    ("漢字", "漢字"),
])
def test_japanese_to_romaji(kana, romaji):
    assert japanese_to_romaji(kana) == romaji


def test_vocabulary_is_checked(tmp_path):
    data = json.loads(DEFAULT_VOCABULARY.read_text(encoding="utf-8"))
    for token in data["added_tokens"]:
        if token["content"] == "[START]":
            token["id"] = 5
    bad = tmp_path / "vocab.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"\[START\]"):
        load_lyric_vocabulary(bad)
    data = json.loads(DEFAULT_VOCABULARY.read_text(encoding="utf-8"))
    data["pre_tokenizer"] = {"type": "ByteLevel"}
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(VocabularyError, match="Whitespace"):
        load_lyric_vocabulary(bad)
    with pytest.raises(VocabularyError, match="cannot be read"):
        load_lyric_vocabulary(tmp_path / "missing.json")
