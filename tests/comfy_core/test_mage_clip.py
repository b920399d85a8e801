"""Mage-Flow's text encoder (comfy_core/families/mage/clip.py, CLIPLoader type "mage"): ComfyUI's
templates (text-to-image; edit with `Image k:` before each vision block; no thinking block), the
final normed states of Qwen3-VL with the system turn and the user opening cut, as transformers
computes them on the tiny tower."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.mage.clip import MAGE_EDIT_TEMPLATE, MAGE_T2I_TEMPLATE, MageFlowTEModel, MageFlowTokenizer
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    te_state = tiny_qwen3vl_state_dict(seed=11)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_4b_bf16.safetensors",
                              dtype=torch.float32, state=te_state)
    return te_state, load_text_encoders([path], "mage")


def _slot(clip) -> str:
    (slot,) = clip.cond_stage_model.slots
    return slot


def test_templates_are_mages(encoder):
    _, clip = encoder
    assert isinstance(clip.cond_stage_model, MageFlowTEModel) and isinstance(clip.tokenizer, MageFlowTokenizer)
    slot = _slot(clip)

    def text(prompt: str, **kwargs: object) -> str:
        tokens = clip.tokenize(prompt, **kwargs)
        assert set(tokens) == {slot}
        ids = [t[0] if not isinstance(t[0], dict) else 151655 for t in tokens[slot][0]]
        return clip.tokenizer.decode(ids, skip_special_tokens=False)

    assert text("a red fox") == MAGE_T2I_TEMPLATE.format("a red fox")
    image = torch.rand(1, 32, 48, 3)
    assert text("remove the hat", images=[image, image]) == MAGE_EDIT_TEMPLATE.format(
        f"Image 1: {BLOCK}Image 2: {BLOCK}remove the hat")
    assert text("x", thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    tokens = clip.tokenize("remove the hat", images=[image])
    entries = [t[0] for t in tokens[slot][0] if isinstance(t[0], dict)]
    assert len(entries) == 1 and entries[0]["data"] is image and entries[0]["type"] == "image"


def test_conditioning_is_the_final_normed_states_after_the_template_opening(encoder):
    from tests.fixtures.qwen3vl_files import reference_model

    te_state, clip = encoder
    slot = _slot(clip)
    tokens = clip.tokenize("a lighthouse at dusk")
    ids = [t[0] for t in tokens[slot][0]]
    starts = [i for i, t in enumerate(ids) if t == 151644]  # <|im_start|>
    start = starts[1] + 3  # the second one, "user", "\n"
    assert ids[starts[1] + 1: start] == [872, 198]
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    with torch.no_grad():
        expected = reference_model(te_state)(input_ids=torch.tensor([ids])).last_hidden_state[:, start:]
    assert out["pooled_output"] is None and "attention_mask" not in out
    torch.testing.assert_close(out["cond"], expected, atol=1e-4, rtol=1e-4)


def test_edit_images_stay_in_the_conditioning(encoder):
    _, clip = encoder
    slot = _slot(clip)
    image = torch.rand(1, 64, 96, 3, generator=torch.Generator().manual_seed(1))
    tokens = clip.tokenize("remove the hat", images=[image])
    cond = clip.encode_from_tokens(tokens, return_dict=True)["cond"]
    count = clip.cond_stage_model.encoder(slot).image_token_count(image)
    ids = [t[0] for t in tokens[slot][0]]
    start = [i for i, t in enumerate(ids) if t == 151644][1] + 3
    assert start == 64  # upstream's drop_idx for the edit template
    assert cond.shape[1] == len(ids) - 1 + count - start and count > 1 and torch.isfinite(cond).all()
