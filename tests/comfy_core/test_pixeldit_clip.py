"""PixelDiT's text encoder (comfy_core/families/pixeldit/clip.py): CLIPLoader type "pixeldit" on a
Gemma 2 file, ComfyUI's tokens (the chi preamble, padding to its length + 298, an empty prompt as
300 tokens), and the conditioning: Gemma 2's final normed states (transformers' `last_hidden_state`
with the pad mask) with `<bos>` and the last 299 kept."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.pixeldit.clip import CHI_PROMPT, MAX_LENGTH, PixelDiTGemma2TE, PixelDiTGemma2Tokenizer, \
    select_states
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.gemma_files import reference_model, tiny_gemma_state_dict, write_gemma_file


@pytest.fixture(scope="module")
def state():
    return tiny_gemma_state_dict(seed=5)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, state):
    from comfy_core.split.text_encoder_files import load_text_encoders

    path = write_gemma_file(tmp_path_factory.mktemp("pixeldit_clip") / "gemma_2_2b_it_elm_bf16.safetensors", state,
                            dtype=torch.float32)
    return load_text_encoders([path], clip_type="pixeldit")


def _ids(clip, text):
    return [t for t, _ in clip.tokenize(text)["gemma2_2b"][0]]


def test_the_set_and_tokenizer_are_comfyuis_classes(clip):
    assert isinstance(clip.tokenizer, PixelDiTGemma2Tokenizer)
    assert isinstance(clip.cond_stage_model, PixelDiTGemma2TE)
    assert type(clip.tokenizer).__name__ == "PixelDiTGemma2Tokenizer"


def test_tokens_carry_the_chi_prompt_padded_to_its_length(clip):
    chi = _ids(clip, CHI_PROMPT + "x")[:-1]  # `<bos>` + the preamble's ids (the prompt's one id after)
    raw = clip.tokenizer.gemma2_2b.tokenize_with_weights(CHI_PROMPT, disable_weights=True)[0]
    length = len(raw) + MAX_LENGTH - 2
    ids = _ids(clip, "a (photo) of a cat")
    assert len(ids) == length and ids[0] == 2
    prompt_ids = [t for t, _ in clip.tokenizer.gemma2_2b.tokenize_with_weights("a (photo) of a cat",
                                                                                disable_weights=True)[0]][1:]
    body = ids[:len(raw) + len(prompt_ids)]
    assert ids[len(body):] == [0] * (length - len(body))  # <pad>
    assert body == _ids(clip, CHI_PROMPT + "a (photo) of a cat")[:len(body)]
    assert chi[:len(raw)] == body[:len(raw)]
    # a prompt already starting with the preamble is taken as it is (not prefixed twice)
    assert _ids(clip, CHI_PROMPT + "a (photo) of a cat") == ids
    # every weight is 1: parentheses are text
    assert {w for _, w in clip.tokenize("a (photo:1.5) of a cat")["gemma2_2b"][0]} == {1.0}
    assert _ids(clip, "") == [2] + [0] * (MAX_LENGTH - 1)
    assert _ids(clip, "   ") == [2] + [0] * (MAX_LENGTH - 1)


def test_the_conditioning_is_the_final_states_with_bos_and_the_last_299(clip, state):
    tokens = clip.tokenize("a photo of a cat")
    ids = [t for t, _ in tokens["gemma2_2b"][0]]
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    assert cond.shape == (1, MAX_LENGTH, 32) and len(ids) > MAX_LENGTH
    mask = torch.tensor([[1 if t != 0 else 0 for t in ids]])
    with torch.no_grad():
        last = reference_model(state)(input_ids=torch.tensor([ids]), attention_mask=mask).last_hidden_state
    keep = torch.cat([last[:, :1], last[:, -(MAX_LENGTH - 1):]], dim=1)
    real = torch.cat([mask[:, :1], mask[:, -(MAX_LENGTH - 1):]], dim=1)[0].bool()
    # the real tokens' states (pad rows differ by the masking convention of padded queries)
    torch.testing.assert_close(cond[0, real].float(), keep[0, real].float(), atol=1e-4, rtol=1e-4)
    out = clip.encode_from_tokens_scheduled(tokens)
    assert out[0][1]["attention_mask"].shape == (1, MAX_LENGTH)
    empty = clip.encode_from_tokens(clip.tokenize(""))
    assert empty.shape == (1, MAX_LENGTH, 32)


def test_select_states_keeps_short_sequences():
    cond, extra = torch.randn(1, 12, 4), {"attention_mask": torch.ones(1, 12)}
    assert select_states(cond, extra)[0] is cond
    long = torch.arange(400.0).reshape(1, 400, 1)
    kept, mask = select_states(long, {"attention_mask": torch.arange(400.0).reshape(1, 400)})
    assert kept.shape == (1, 300, 1) and kept[0, 0, 0] == 0 and kept[0, 1, 0] == 101
    assert mask["attention_mask"][0, 1] == 101
