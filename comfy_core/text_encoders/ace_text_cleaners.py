"""ACE-Step 1's lyric text cleaners, as ComfyUI runs them before the lyric BPE
(`comfy/text_encoders/ace_text_cleaners.py`, ComfyUI's own reduced rewrite of the Coqui XTTS
multilingual cleaners that ACE-Step ships), written here from that behaviour.

`clean_lyric_line(text, lang)` is ComfyUI's `multilingual_cleaners`:

1. `"` removed; for Turkish `İ`, `Ö`, `Ü` -> `i`, `ö`, `ü` first (Python's `lower()` would give
   `i` + a combining dot); then lower case.
2. English only (ComfyUI's tables hold English alone; for any other language each stage fails
   on its missing table and is skipped as a whole, so the text keeps its digits and symbols):
   - numbers (`expand_numbers`): thousands commas dropped (`1,000` -> `1000`); amounts in
     pounds, dollars, euros spelled as floats without the currency (`$5` -> `five point zero`);
     decimals (`3.14` -> `three point one four`; the integer part of `0.5` is empty:
     ` point five`); ordinals spelled as cardinals (`21st` -> `twenty one`); the remaining digit
     runs spelled (`one thousand two hundred`). A number a float cannot spell (its `repr` has an
     exponent: `0.00001`, `1e16` and above, or infinite) makes ComfyUI's stage raise, and the
     whole number stage is then skipped; an unspellable currency amount stops only the currency
     substitutions from there on.
   - abbreviations followed by a dot (`dr.` -> `doctor`, ...), at a word start.
   - symbols spelled with spaces around (`&` -> ` and `, `@`, `%`, `#`, `$`, `£`, `°`), each
     followed by one pass of `"  "` -> `" "`; then the text is stripped.
3. Whitespace runs collapsed to one space.

`japanese_to_romaji` is ComfyUI's kana transliteration (Hepburn-like, hiragana and katakana,
small `っ`/`ッ` doubling the next consonant, `ゃゅょャュョ` digraphs, `、` `。` and the ideographic
space), which ComfyUI applies to every lyric line; a line it changes is tokenized as Japanese.
"""
from __future__ import annotations

import math
import re

# --- kana ----------------------------------------------------------------------------------------

# Gojūon rows of five: their romaji, hiragana and katakana (the y- and w- rows and ん are listed apart).
_KANA_ROWS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("a", "i", "u", "e", "o"), "あいうえお", "アイウエオ"),
    (("ka", "ki", "ku", "ke", "ko"), "かきくけこ", "カキクケコ"),
    (("sa", "shi", "su", "se", "so"), "さしすせそ", "サシスセソ"),
    (("ta", "chi", "tsu", "te", "to"), "たちつてと", "タチツテト"),
    (("na", "ni", "nu", "ne", "no"), "なにぬねの", "ナニヌネノ"),
    (("ha", "hi", "fu", "he", "ho"), "はひふへほ", "ハヒフヘホ"),
    (("ma", "mi", "mu", "me", "mo"), "まみむめも", "マミムメモ"),
    (("ra", "ri", "ru", "re", "ro"), "らりるれろ", "ラリルレロ"),
    (("ga", "gi", "gu", "ge", "go"), "がぎぐげご", "ガギグゲゴ"),
    (("za", "ji", "zu", "ze", "zo"), "ざじずぜぞ", "ザジズゼゾ"),
    (("da", "ji", "zu", "de", "do"), "だぢづでど", "ダヂヅデド"),
    (("ba", "bi", "bu", "be", "bo"), "ばびぶべぼ", "バビブベボ"),
    (("pa", "pi", "pu", "pe", "po"), "ぱぴぷぺぽ", "パピプペポ"),
)
_SMALL_Y = {"ゃ": "a", "ゅ": "u", "ょ": "o", "ャ": "a", "ュ": "u", "ョ": "o"}
_SMALL_TSU = ("っ", "ッ")
# Digraph stems (kana + small ya/yu/yo): the romaji before the vowel; the sh/ch/j stems drop the "y".
_DIGRAPH_STEMS = {"き": "ky", "し": "sh", "ち": "ch", "に": "ny", "ひ": "hy", "み": "my", "り": "ry",
                  "ぎ": "gy", "じ": "j", "び": "by", "ぴ": "py"}


def _kana_table() -> dict[str, str]:
    """One kana (or `、` `。` ideographic space) -> romaji."""
    table: dict[str, str] = {}
    for sounds, hiragana, katakana in _KANA_ROWS:
        for sound, h, k in zip(sounds, hiragana, katakana):
            table[h] = table[k] = sound
    for sound, h, k in (("ya", "や", "ヤ"), ("yu", "ゆ", "ユ"), ("yo", "よ", "ヨ"), ("wa", "わ", "ワ"),
                        ("wo", "を", "ヲ"), ("n", "ん", "ン"), ("ya", "ゃ", "ャ"), ("yu", "ゅ", "ュ"),
                        ("yo", "ょ", "ョ"), ("", "っ", "ッ")):
        table[h] = table[k] = sound
    table["ヴ"] = "vu"
    table.update({"\u3000": " ", "、": ", ", "。": ". "})
    return table


def _digraph_table() -> dict[str, str]:
    """Two kana of one script (stem + small ya/yu/yo) -> romaji, as ComfyUI's table pairs them."""
    table: dict[str, str] = {}
    for stem_kana, stem in _DIGRAPH_STEMS.items():
        katakana = chr(ord(stem_kana) + 0x60)  # the hiragana and katakana blocks are 0x60 apart
        for small, vowel in _SMALL_Y.items():
            table[(stem_kana if small in "ゃゅょ" else katakana) + small] = stem + vowel
    return table


_KANA_SINGLES = _kana_table()
_DIGRAPHS = _digraph_table()


def japanese_to_romaji(text: str) -> str:
    """Kana -> romaji, other characters kept (see the module doc)."""
    out: list[str] = []
    index, last = 0, len(text) - 1
    while index <= last:
        char = text[index]
        if index < last and char in _SMALL_TSU:
            following = _KANA_SINGLES.get(text[index + 1])
            if following and following[0] not in "aiueon":
                out.append(following[0])  # geminate: the next consonant doubled
            index += 1
            continue
        if index < last and text[index + 1] in _SMALL_Y and text[index:index + 2] in _DIGRAPHS:
            out.append(_DIGRAPHS[text[index:index + 2]])
            index += 2
            continue
        out.append(_KANA_SINGLES.get(char, char))
        index += 1
    return "".join(out)


# --- numbers -------------------------------------------------------------------------------------

_ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_DIGITS = ("zero",) + _ONES[1:10]
# Scales from the largest: (size, name); anything at or above a billion recurses on the billions.
_SCALES = ((10 ** 9, "billion"), (10 ** 6, "million"), (10 ** 3, "thousand"), (100, "hundred"))


class Unspellable(ValueError):
    """A number ComfyUI's cleaner fails on (see the module doc); the stage is then skipped."""


def _integer_words(value: int) -> str:
    """English cardinal of a non-negative integer, "" for 0 (ComfyUI's `_int_to_text`)."""
    if value < 20:
        return _ONES[value]
    if value < 100:
        tens, ones = divmod(value, 10)
        return _TENS[tens] + (" " + _ONES[ones] if ones else "")
    for size, name in _SCALES:
        if value >= size:
            head, rest = divmod(value, size)
            return _integer_words(head) + " " + name + (" " + _integer_words(rest) if rest else "")
    raise AssertionError("unreachable")


def number_to_words(value: int | float) -> str:
    """English words for an int or float (ComfyUI's `number_to_text`): "zero" for 0; a float's
    integer part, then " point " and its `repr` digits one by one. Raises `Unspellable` for a
    float whose `repr` has an exponent or that is not finite."""
    if value == 0:
        return "zero"
    sign = "negative " if value < 0 else ""
    value = abs(value)
    if isinstance(value, float):
        text = repr(value)
        if not math.isfinite(value) or "e" in text:
            raise Unspellable(f"{text} has no digits after a point to spell")
        integer, decimals = text.split(".")
        return sign + _integer_words(int(integer)) + " point " + " ".join(_DIGITS[int(d)] for d in decimals)
    return sign + _integer_words(value)


def _to_int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError as exc:  # longer than Python's int-from-string limit
        raise Unspellable(str(exc)) from None


_COMMA_NUMBER = re.compile(r"\b\d{1,3}(,\d{3})*(\.\d+)?\b")
_CURRENCIES = (  # pounds, dollars, euros in ComfyUI's order; the symbol before or after the amount
    re.compile(r"((£[0-9\.\,]*[0-9]+)|([0-9\.\,]*[0-9]+£))"),
    re.compile(r"((\$[0-9\.\,]*[0-9]+)|([0-9\.\,]*[0-9]+\$))"),
    re.compile(r"(([0-9\.\,]*[0-9]+€)|((€[0-9\.\,]*[0-9]+)))"),
)
_DECIMAL = re.compile(r"([0-9]+[.,][0-9]+)")
_ORDINAL = re.compile(r"([0-9]+)(st|nd|rd|th)")
_NUMBER = re.compile(r"[0-9]+")


def _currency_words(match: re.Match) -> str:
    amount = re.sub(r"[^\d.]", "", match.group(0).replace(",", "."))
    try:
        value = float(amount)
    except ValueError:  # several points: `$1.000.000`
        raise Unspellable(f"{match.group(0)!r} is not an amount") from None
    return number_to_words(value)


def expand_numbers(text: str) -> str:
    """English number spelling (module doc, stage 2); raises `Unspellable` where ComfyUI's stage
    fails as a whole."""
    text = _COMMA_NUMBER.sub(lambda m: m.group(0).replace(",", ""), text)
    for pattern in _CURRENCIES:
        try:
            text = pattern.sub(_currency_words, text)
        except Unspellable:
            break  # ComfyUI: one try around the three substitutions
    text = _DECIMAL.sub(lambda m: number_to_words(float(m.group(1).replace(",", "."))), text)
    text = _ORDINAL.sub(lambda m: number_to_words(_to_int(m.group(1))), text)
    return _NUMBER.sub(lambda m: number_to_words(_to_int(m.group(0))), text)


# --- abbreviations and symbols -------------------------------------------------------------------

_ABBREVIATIONS = tuple((re.compile(rf"\b{short}\.", re.IGNORECASE), long) for short, long in (
    ("mrs", "misess"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"), ("rev", "reverend"),
    ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"), ("capt", "captain"),
    ("esq", "esquire"), ("ltd", "limited"), ("col", "colonel"), ("ft", "fort")))
_SYMBOLS = (("&", " and "), ("@", " at "), ("%", " percent "), ("#", " hash "), ("$", " dollar "),
            ("£", " pound "), ("°", " degree "))
_WHITESPACE = re.compile(r"\s+")


def expand_abbreviations(text: str) -> str:
    for pattern, long in _ABBREVIATIONS:
        text = pattern.sub(long, text)
    return text


def expand_symbols(text: str) -> str:
    for symbol, words in _SYMBOLS:
        text = text.replace(symbol, words).replace("  ", " ")
    return text.strip()


def clean_lyric_line(text: str, lang: str) -> str:
    """ComfyUI's `multilingual_cleaners(text, lang)` (module doc)."""
    text = text.replace('"', "")
    if lang == "tr":
        text = text.replace("İ", "i").replace("Ö", "ö").replace("Ü", "ü")
    text = text.lower()
    if lang == "en":
        try:
            text = expand_numbers(text)
        except Unspellable:
            pass  # ComfyUI skips the whole number stage when one number fails
        text = expand_symbols(expand_abbreviations(text))
    return _WHITESPACE.sub(" ", text)


__all__ = ["Unspellable", "clean_lyric_line", "expand_abbreviations", "expand_numbers", "expand_symbols",
           "japanese_to_romaji", "number_to_words"]
