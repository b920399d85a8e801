"""The CLIP BPE tokenizer built offline from openai-clip's vocabulary file.

Reference: OpenAI's own pure-Python `SimpleTokenizer` (clip/simple_tokenizer.py), loaded by file path so
the `clip` package itself is never imported, plus golden ids from dependencies.md §3.4.
"""
from __future__ import annotations

import gzip
import importlib.util

import pytest

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.tokenizer import ClipTokenizer
from comfy_core.text_encoders.vocab import (
    NUM_MERGES,
    VOCAB_SIZE,
    build_vocabulary,
    bytes_to_unicode,
    find_vocabulary_file,
    load_vocabulary,
)

PROMPTS = [
    "a photo of a cat",
    "a photo of a cat, (masterpiece:1.2), highly detailed",
    "A  Photo  OF an Astronaut riding a horse on Mars!!",
    "(((best quality))), [blurry:0.5], <lora:detail:0.8>, embedding:easynegative",
    "café crème, naïve façade — Ünïcödé",
    "don't stop; it's 3.5mm f/1.8, 1girl, 2 cats",
    "🐱 cute kitten ❤️ 日本語のテキスト, Привет мир",
    "!!!???...,,,;;;:::---___///\\\\|||@@@###$$$%%%^^^&&&***",
    "tab\tand\nnewline   and\u00a0nbsp",
    " ".join(["masterpiece"] * 100),
    "a very long prompt, " * 40,
]


@pytest.fixture(scope="module")
def tokenizer() -> ClipTokenizer:
    return ClipTokenizer.from_file()


@pytest.fixture(scope="module")
def openai_reference():
    """OpenAI's SimpleTokenizer, loaded from its file (not via `import clip`)."""
    path = find_vocabulary_file().parent / "simple_tokenizer.py"
    spec = importlib.util.spec_from_file_location("openai_clip_simple_tokenizer_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimpleTokenizer(str(find_vocabulary_file()))


def test_vocabulary_layout():
    vocabulary = load_vocabulary()
    assert len(vocabulary.vocab) == VOCAB_SIZE
    assert len(vocabulary.merges) == NUM_MERGES
    assert vocabulary.bos_id == 49406 and vocabulary.eos_id == 49407
    # GPT-2 byte order: printable bytes first ('!' is byte 33 but id 0), then their </w> forms.
    assert vocabulary.vocab["!"] == 0
    assert vocabulary.vocab["!</w>"] == 256
    assert vocabulary.vocab[",</w>"] == 267
    assert vocabulary.vocab["cat</w>"] == 2368


def test_bytes_to_unicode_order_and_reversibility():
    table = bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    order = list(table)
    assert order[:3] == [33, 34, 35]  # printable first, in byte order
    assert table[0] == chr(256) and table[32] == chr(256 + 32)  # space is the 33rd non-printable


def test_golden_ids(tokenizer):
    assert tokenizer.encode_with_specials("a photo of a cat") == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert tokenizer.encode("a photo of a cat, (masterpiece:1.2), highly detailed") == [
        320, 1125, 539, 320, 2368, 267, 263, 12066, 281, 272, 269, 273, 2361, 5302, 12609]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ids_equal_openai_reference(tokenizer, openai_reference, prompt):
    assert tokenizer.encode(prompt) == openai_reference.encode(prompt)


def test_no_truncation_of_long_prompts(tokenizer):
    ids = tokenizer.encode(" ".join(["masterpiece"] * 100))
    assert len(ids) == 100


def test_truncated_vocabulary_file_is_refused(tmp_path):
    bad = tmp_path / "short.txt.gz"
    bad.write_bytes(gzip.compress(b"header\ni n\nt h\n"))
    with pytest.raises(VocabularyError, match="merge lines"):
        load_vocabulary(bad)


def test_malformed_merge_line_is_refused():
    lines = ["a b"] * NUM_MERGES
    lines[5] = "abc"
    with pytest.raises(VocabularyError, match="line 7"):
        build_vocabulary(lines)


def test_not_gzip_is_refused(tmp_path):
    bad = tmp_path / "vocab.txt.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(VocabularyError, match="cannot read"):
        load_vocabulary(bad)


SPECIALS = ["hello<|startoftext|>world <|endoftext|> end", "<|endoftext|>", "a<|endoftext|>b"]


@pytest.mark.parametrize("prompt", PROMPTS + SPECIALS)
def test_ids_equal_transformers_clip_tokenizer(tokenizer, prompt):
    """The pipeline built on `tokenizers` is transformers' CLIPTokenizer (what ComfyUI calls), the
    special tokens kept whole included; `backend` is that class, for packs."""
    library = tokenizer.backend
    assert type(library).__name__ == "CLIPTokenizer"
    assert tokenizer.encode(prompt) == library(prompt, add_special_tokens=False)["input_ids"]
    words = prompt.lower().split()
    assert tokenizer.encode_words(words) == (
        library(words, is_split_into_words=True, add_special_tokens=False)["input_ids"] if words else [])


def test_building_and_encoding_do_not_import_transformers():
    import subprocess
    import sys

    code = ("import sys\n"
            "from comfy_core.text_encoders.tokenizer import ClipTokenizer\n"
            "from comfy_core.text_encoders.sd_tokenizer import SDTokenizer\n"
            "tokenizer = ClipTokenizer.from_file()\n"
            "assert tokenizer.encode('a photo of a cat') == [320, 1125, 539, 320, 2368]\n"
            "lazy = tokenizer.lazy_backend\n"
            "import copy\n"
            "assert copy.deepcopy(lazy) is lazy and copy.deepcopy(tokenizer) is tokenizer  # shared, immutable\n"
            "assert 'transformers' not in sys.modules, 'transformers imported by the tokenizer'\n"
            "assert lazy('a cat', add_special_tokens=False)['input_ids'] == [320, 2368]  # built on first use\n"
            "assert 'transformers' in sys.modules and len(lazy) == 49408\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(
        __import__("pathlib").Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_installed_openai_clip_package_imports():
    """We install openai-clip for its vocabulary; packs `import clip` (ComfyUI-MotionDiff), which
    needs setuptools' pkg_resources: requirements.txt keeps a setuptools that has it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pkg_resources announces its own deprecation
        import clip

    assert "ViT-L/14" in clip.available_models()
