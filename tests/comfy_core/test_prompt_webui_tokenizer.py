"""webui's text cleaning before BPE for the A1111 encoding (and none on ComfyUI's path).

References written here, independently of `comfy_core.prompt.webui_tokenizer`:
- open_clip's `SimpleTokenizer.encode` (webui's SD2 / SDXL CLIP-G tokenizer) is OpenAI's
  `SimpleTokenizer.encode` apart from the names of its two special strings, so OpenAI's file
  (shipped by openai-clip, loaded by path) is the reference for texts without those strings;
- transformers' slow `CLIPTokenizer` with ftfy (webui's SD1 / SDXL CLIP-L tokenizer) is written in
  `transformers_reference` below from its documented steps, with OpenAI's pattern and BPE.
"""
from __future__ import annotations

import importlib.util

import ftfy
import pytest
import regex
import torch

from comfy_core.prompt.conditioning import PromptOptions, encode_prompt
from comfy_core.prompt.encode import encode_texts
from comfy_core.prompt.webui_tokenizer import WebuiTokenizer, open_clip_clean, transformers_clean
from comfy_core.text_encoders.tokenizer import ClipTokenizer
from comfy_core.text_encoders.vocab import find_vocabulary_file
from tests.fixtures.clips import one_thread, sd1, sdxl  # noqa: F401 -- fixtures

BOS, EOS = 49406, 49407

# Prompts whose ids change under webui's cleaning, and some that must not change.
PROMPTS = [
    "“Ｃａｔ” &amp; ﬁsh’s",
    "&amp;amp; x",
    "<b> &amp; x",  # a `<` in the line: ftfy leaves entities alone, open_clip still unescapes
    "Broken text&hellip; it&#x2019;s ﬂubberiﬁc!",
    "ＬＯＵＤ　ＮＯＩＳＥＳ",
    "cafÃ© CAFÃ©",  # mojibake
    "ΟΔΟΣ end",  # a final sigma: lower-cased as a whole string
    "line one &amp;\n<line> two &amp;",  # ftfy works line by line
    "x\x1cy  \t z\xa0w",
    "’tis the ‘thing’",
    "caf\u0065\u0301 &#x301;e",
    "a photo of a cat",
    "don't STOP, it's 3.5mm",
    "",
]


@pytest.fixture(scope="module")
def bpe() -> ClipTokenizer:
    return ClipTokenizer.shared_default()


@pytest.fixture(scope="module")
def openai():
    path = find_vocabulary_file().parent / "simple_tokenizer.py"
    spec = importlib.util.spec_from_file_location("openai_clip_simple_tokenizer_webui_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimpleTokenizer(str(find_vocabulary_file()))


def transformers_reference(openai, text: str) -> list[int]:
    """transformers 4.30.2's slow CLIPTokenizer with ftfy, step by step: split on the exact special
    strings, then each piece: ftfy.fix_text, whitespace runs -> one space, strip, lower case, CLIP's
    pattern, byte-level BPE."""
    ids = []
    for piece in regex.split(r"(<\|startoftext\|>|<\|endoftext\|>)", text):
        if piece in ("<|startoftext|>", "<|endoftext|>"):
            ids.append(openai.encoder[piece])
            continue
        cleaned = regex.sub(r"\s+", " ", ftfy.fix_text(piece)).strip().lower()
        for word in regex.findall(openai.pat, cleaned):
            word = "".join(openai.byte_encoder[b] for b in word.encode("utf-8"))
            ids.extend(openai.encoder[token] for token in openai.bpe(word).split(" "))
    return ids


def test_cleaning_straightens_quotes_decodes_entities_and_folds_forms():
    assert transformers_clean("“Ｃａｔ” &amp; ﬁsh’s  ") == '"cat" & fish\'s'
    assert open_clip_clean("“Ｃａｔ” &amp; ﬁsh’s  ") == '"cat" & fish\'s'
    assert transformers_clean("<b> &amp; x") == "<b> &amp; x"
    assert open_clip_clean("<b> &amp; x") == "<b> & x"


@pytest.mark.parametrize("text", PROMPTS)
def test_open_clip_flavour_matches_openai_simple_tokenizer(bpe, openai, text):
    assert WebuiTokenizer(bpe, "open_clip")(text) == openai.encode(text)


@pytest.mark.parametrize("text", [*PROMPTS, "a <|endoftext|> b", "a<<|endoftext|>b", "x<|ENDOFTEXT|>&amp; y",
                                  "<|startoftext|>A", "<end_of_text> y"])
def test_transformers_flavour_matches_independent_reference(bpe, openai, text):
    assert WebuiTokenizer(bpe, "transformers")(text) == transformers_reference(openai, text)


def test_cleaned_ids_differ_from_uncleaned(bpe):
    webui = WebuiTokenizer(bpe, "transformers")
    assert webui("“Ｃａｔ” &amp; ﬁsh’s") == bpe.encode('"cat" & fish\'s')
    assert webui("“Ｃａｔ” &amp; ﬁsh’s") != bpe.encode("“Ｃａｔ” &amp; ﬁsh’s")


def test_each_library_has_its_own_special_strings(bpe):
    assert WebuiTokenizer(bpe, "transformers")("a <|endoftext|>") == [*bpe.encode("a"), EOS]
    assert EOS not in WebuiTokenizer(bpe, "transformers")("a <end_of_text>")
    assert WebuiTokenizer(bpe, "open_clip")("a <end_of_text>") == [*bpe.encode("a"), EOS]
    assert WebuiTokenizer(bpe, "open_clip")("<START_OF_TEXT>") == [BOS]
    assert EOS not in WebuiTokenizer(bpe, "open_clip")("a <|endoftext|>")


def test_comfyui_path_keeps_uncleaned_ids(sd1):
    """ComfyUI's CLIPTextEncode tokenizer does no ftfy cleaning: ids measured with ComfyUI 0.3.64's
    `SDTokenizer().tokenize_with_weights` (transformers 5, no ftfy) for this text."""
    text = "“cat” &amp; ﬁsh ＡＢＣ’s"
    comfyui = [728, 506, 2368, 728, 507, 261, 6259, 282, 171, 105, 223, 849, 171, 121, 223, 171, 121, 224,
               171, 121, 481, 728, 503, 338]
    [chunk] = sd1.tokenize(text)["l"]
    ids = [token for token, _ in chunk if token not in (BOS, EOS)]
    assert ids == comfyui == sd1.tokenizer.clip_tokenizer.encode(text)
    assert ids != WebuiTokenizer(sd1.tokenizer.clip_tokenizer, "transformers")(text)


def test_a1111_prompt_is_encoded_from_cleaned_text(sd1):
    options = PromptOptions(steps=4)
    [[cleaned, _]] = encode_prompt(sd1, "“Ｃａｔ” &amp; ﬁsh, (ＡＢＣ:1.2)", options)
    [[plain, _]] = encode_prompt(sd1, '"cat" & fish, (abc:1.2)', options)
    assert torch.equal(cleaned, plain)


def run(clip, slot, ids, pad):
    rows = [BOS, *ids, EOS] + [pad] * (75 - len(ids))
    with clip.patcher.applied() as encoders, torch.no_grad():
        return getattr(encoders, slot).encode_ids(torch.tensor([rows]), [], layer_idx=-2, layer_norm_hidden=False)


def test_sdxl_encoders_use_their_own_libraries_cleaning(sdxl):
    """CLIP-L (transformers) keeps `&amp;` after a `<`; CLIP-G (open_clip) decodes it."""
    text = "<b> &amp; x"
    bpe = sdxl.tokenizer.clip_tokenizer
    out = encode_texts(sdxl, [text])
    expected_l = run(sdxl, "clip_l", bpe.encode("<b> &amp; x"), EOS)
    expected_g = run(sdxl, "clip_g", bpe.encode("<b> & x"), 0)
    assert torch.allclose(out.cond[..., :64], expected_l.hidden, atol=1e-5)
    assert torch.allclose(out.cond[..., 64:], expected_g.hidden, atol=1e-5)
    assert torch.allclose(out.pooled, expected_g.pooled, atol=1e-5)
