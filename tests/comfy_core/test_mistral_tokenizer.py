"""Mistral's tekken tokenizer read from the `tekken_model` tensor: token ids equal to an independent
tiktoken encoding over the same ranks on 100+ prompts (unicode, special tokens in the text, digits,
whitespace runs, long inputs), ids offset by the special-token count, entries past the vocabulary
size ignored, malformed data refused; ComfyUI's Mistral3Tokenizer chunk (`<s>` first, left padding
with `<pad>`) and Flux.2 dev's template."""
from __future__ import annotations

import base64
import json
import random

import pytest
import torch

from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.llama_tokenizer import PRETOKENIZE_PATTERN
from comfy_core.text_encoders.tekken_tokenizer import (MissingTekkenError, MistralTokenizer, build_tekken_tokenizer,
                                                       mistral_tokenizer)
from tests.fixtures.mistral_files import CORPUS, NUM_SPECIAL, tekken_tensor, tiny_tekken


@pytest.fixture(scope="module")
def tekken():
    return tiny_tekken(seed=3)


@pytest.fixture(scope="module")
def backend(tekken):
    return build_tekken_tokenizer(tekken_tensor(tekken))


@pytest.fixture(scope="module")
def reference(tekken):
    """tiktoken's Encoding over the same data, built from the JSON here (not through our module)."""
    import tiktoken

    limit = tekken["config"]["default_vocab_size"] - tekken["config"]["default_num_special_tokens"]
    ranks = {base64.b64decode(e["token_bytes"]): e["rank"] + NUM_SPECIAL for e in tekken["vocab"] if e["rank"] < limit}
    specials = {e["token_str"]: e["rank"] for e in tekken["special_tokens"]}
    encoding = tiktoken.Encoding("tiny_tekken", pat_str=PRETOKENIZE_PATTERN, mergeable_ranks=ranks,
                                 special_tokens=specials)
    return lambda text: encoding.encode(text, allowed_special="all")


def _prompts() -> list[str]:
    rng = random.Random(11)
    words = CORPUS.split(" ")
    extra = ["[INST]", "[/INST]", "<s>", "[SYSTEM_PROMPT]", "  ", "\n", "\n\n", "\t", "!!", "12345", "3.14",
             "don't", "WE'LL", "(red:1.2)", "émoji🙂", "a\r\nb", "  leading", "trailing  ", "x" * 40]
    prompts = ["", " ", "a", "A red fox.", "[SYSTEM_PROMPT]sys[/SYSTEM_PROMPT][INST]hi[/INST]",
               " ".join(words) * 3]
    while len(prompts) < 130:
        pieces = [rng.choice(words + extra) for _ in range(rng.randint(1, 14))]
        prompts.append(rng.choice([" ", "", ", ", "\n"]).join(pieces))
    return prompts


def test_ids_equal_tiktoken_on_many_prompts(backend, reference):
    prompts = _prompts()
    assert len(prompts) >= 100
    for text in prompts:
        assert backend.encode(text, add_special_tokens=False).ids == reference(text), text


def test_ids_are_offset_by_the_special_tokens_and_specials_match_in_text(backend, tekken):
    entry = next(e for e in tekken["vocab"] if base64.b64decode(e["token_bytes"]) == b"q")
    assert backend.encode("q", add_special_tokens=False).ids == [entry["rank"] + NUM_SPECIAL]
    ids = backend.encode("[INST]a[/INST]<pad>[SYSTEM_PROMPT]", add_special_tokens=False).ids
    assert ids[0] == 3 and ids[-3:] == [4, 11, 17]
    assert all(i >= NUM_SPECIAL for i in backend.encode("plain text", add_special_tokens=False).ids)
    assert backend.decode(backend.encode("café 🦊", add_special_tokens=False).ids) == "café 🦊"


def test_entries_past_the_vocabulary_size_are_ignored(backend, tekken):
    limit = tekken["config"]["default_vocab_size"]
    ids = backend.encode("never-used-0", add_special_tokens=False).ids
    assert max(ids) < limit and len(ids) > 1
    assert backend.get_vocab_size(with_added_tokens=True) == limit


def test_malformed_tekken_data_is_refused(tekken):
    with pytest.raises(VocabularyError, match="not a Mistral tekken"):
        build_tekken_tokenizer(b"{}")
    with pytest.raises(VocabularyError, match="uint8"):
        build_tekken_tokenizer(torch.zeros(4, dtype=torch.float32))
    gap = json.loads(json.dumps(tekken))
    gap["vocab"] = gap["vocab"][:10] + gap["vocab"][11:]
    with pytest.raises(VocabularyError, match="without gaps"):
        build_tekken_tokenizer(json.dumps(gap))
    clash = json.loads(json.dumps(tekken))
    clash["special_tokens"][5]["token_str"] = "a"
    with pytest.raises(VocabularyError, match="also regular"):
        build_tekken_tokenizer(json.dumps(clash))
    with pytest.raises(MissingTekkenError, match="tekken_model"):
        mistral_tokenizer({})


def test_mistral_tokenizer_puts_the_start_token_first_and_pads_left(tekken, reference):
    tokenizer = mistral_tokenizer({"tekken_model": tekken_tensor(tekken)}, embedding_width=32)
    assert isinstance(tokenizer, MistralTokenizer)
    (chunk,) = tokenizer.tokenize_with_weights("a red (fox:1.3) in the snow")
    assert [t for t, _ in chunk] == [1] + reference("a red (fox:1.3) in the snow")
    assert {w for _, w in chunk} == {1.0}  # weights disabled, as ComfyUI's Mistral3Tokenizer
    padded = tokenizer.tokenize_with_weights("fox", tokenizer_options={"mistral3_24b_min_length": 8})[0]
    ids = [t for t, _ in padded]
    assert len(ids) == 8 and ids[-len(reference("fox")) - 1:] == [1] + reference("fox")
    assert set(ids[:8 - len(reference("fox")) - 1]) == {11}
    assert tokenizer.state_dict()["tekken_model"] is not None
