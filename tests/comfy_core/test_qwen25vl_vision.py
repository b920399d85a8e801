"""Qwen2.5-VL's vision tower (comfy_core/text_encoders/qwen25vl_vision.py) and image prompts through
the tower and Qwen-Image's encoder set: ComfyUI's preprocessing (size rule, patch order), the ViT
with window attention, 2-D RoPE and the merger against transformers' visual model on the same tiny
random weights (within 1e-4), M-RoPE positions against transformers' `get_rope_index`, and a whole
image prompt against transformers' `Qwen2_5_VLForConditionalGeneration` fed the same patches."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.families.qwen_image.clip import QWEN_IMAGE_TEXT_ENCODERS, LLAMA_TEMPLATE_IMAGES
from comfy_core.text_encoders.factory import build_clip, detect_text_encoders
from comfy_core.text_encoders.qwen25vl import (
    Qwen25VLConfig,
    Qwen25VLInputError,
    image_position_ids,
)
from comfy_core.text_encoders.qwen25vl_vision import (
    CLIP_MEAN,
    CLIP_STD,
    encode_image_patches,
    preprocess_image,
    resized_size,
    window_order,
)
from comfy_core.text_encoders.qwen25vl_load import build_qwen25vl_encoder
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen25vl_files import reference_model, tiny_qwen25vl_state_dict
from tests.fixtures.t5_files import header_of

IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653


@pytest.fixture(scope="module")
def state():
    return tiny_qwen25vl_state_dict(seed=5)


@pytest.fixture(scope="module")
def config(state):
    return Qwen25VLConfig.detect_from_weights(header_of(state), "")


@pytest.fixture(scope="module")
def tower(config, state):
    return build_qwen25vl_encoder(config, state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_model(state)


def _image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(1, height, width, 3, generator=generator)


def _reference_prompt(reference, before: list[int], images: list[tuple[torch.Tensor, torch.Tensor, int]],
                      after_each: list[list[int]]) -> tuple[torch.Tensor, list[int]]:
    """transformers' final normed states for `before`, then per image its `count` pad tokens and the
    ids after it; the images' patches and grids given as ComfyUI's preprocessing makes them."""
    ids = list(before)
    for (_, _, count), after in zip(images, after_each):
        ids += [IMAGE_PAD] * count + after
    types = torch.tensor([[1 if t == IMAGE_PAD else 0 for t in ids]])
    with torch.no_grad():
        out = reference(input_ids=torch.tensor([ids]), pixel_values=torch.cat([p for p, _, _ in images]),
                        image_grid_thw=torch.cat([g for _, g, _ in images]), mm_token_type_ids=types,
                        output_hidden_states=True)
    return out.hidden_states[-1], ids


# --- preprocessing -----------------------------------------------------------------------------------

def test_the_size_rule_is_comfyuis():
    assert resized_size(150, 200, 28) == (140, 196)  # nearest multiples of 28
    assert resized_size(20, 30, 28) == (56, 84)  # below 3,136 pixels: scaled up (ceil)
    assert resized_size(4000, 5000, 28) == (3192, 4004)  # above 12,845,056 pixels: scaled down (floor)


def test_patches_are_listed_merge_block_by_merge_block(config):
    image = _image(56, 84)  # already multiples of 28: no resampling
    patches, grid = preprocess_image(image, config.vision)
    assert grid.tolist() == [[1, 4, 6]] and patches.shape == (24, 3 * 2 * 14 * 14)
    normalised = (image[0].permute(2, 0, 1) - torch.tensor(CLIP_MEAN)[:, None, None]) / torch.tensor(CLIP_STD)[:, None, None]
    # the 4th patch (block (0, 0), sub (1, 1)) is the patch at pixel rows 14.., columns 14..; both frames equal
    fourth = patches[3].view(3, 2, 14, 14)
    torch.testing.assert_close(fourth[:, 0], normalised[:, 14:28, 14:28])
    torch.testing.assert_close(fourth[:, 1], fourth[:, 0])
    # the 5th is block (0, 1)'s first: pixel rows 0.., columns 28..
    torch.testing.assert_close(patches[4].view(3, 2, 14, 14)[:, 0], normalised[:, 0:14, 28:42])
    with pytest.raises(Qwen25VLInputError, match="IMAGE tensor"):
        preprocess_image(torch.zeros(56, 56, 3), config.vision)


def test_windows_are_4x4_merged_tokens_cut_at_the_edge(config):
    order, bounds = window_order(torch.tensor([[1, 10, 14]]), config.vision)  # 5 x 7 merged tokens
    assert order[:4].tolist() == [0, 1, 2, 3] and order[4:8].tolist() == [7, 8, 9, 10]
    assert [b - a for a, b in zip(bounds[:-1], bounds[1:])] == [4 * 16, 4 * 12, 4 * 4, 4 * 3]
    assert sorted(order.tolist()) == list(range(35))


# --- numerics against transformers ---------------------------------------------------------------

@pytest.mark.parametrize("size", [(150, 200), (60, 60)])
def test_the_vision_tower_matches_transformers(tower, reference, config, size):
    patches, grid = preprocess_image(_image(*size), config.vision)
    ours = encode_image_patches(tower.transformer.visual, config.vision, patches, grid)
    with torch.no_grad():
        theirs = reference.model.visual(patches, grid_thw=grid).pooler_output
    assert ours.shape == (int(grid[0, 1] * grid[0, 2]) // 4, 256) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_bf16_vision_weights_compute_in_float32(config, state):
    stored = {k: v.to(torch.bfloat16) for k, v in state.items()}
    tower = build_qwen25vl_encoder(config, stored)
    assert tower.transformer.visual.blocks[0].attn.qkv.weight.dtype == torch.bfloat16
    reference = reference_model({k: v.float() for k, v in stored.items()})
    patches, grid = preprocess_image(_image(60, 90), config.vision)
    with torch.no_grad():
        theirs = reference.model.visual(patches, grid_thw=grid).pooler_output
    torch.testing.assert_close(encode_image_patches(tower.transformer.visual, config.vision, patches, grid), theirs,
                               atol=1e-4, rtol=1e-4)


def test_mrope_positions_are_transformers_get_rope_index(reference):
    grids = [torch.tensor([[1, 10, 14]]), torch.tensor([[1, 4, 4]])]
    ids = [1, 2, VISION_START] + [IMAGE_PAD] * 35 + [VISION_END, 5, VISION_START] + [IMAGE_PAD] * 4 + [VISION_END, 7]
    types = torch.tensor([[1 if t == IMAGE_PAD else 0 for t in ids]])
    theirs, _ = reference.model.get_rope_index(torch.tensor([ids]), types, image_grid_thw=torch.cat(grids))
    ours = image_position_ids([(3, 35, grids[0]), (41, 4, grids[1])], len(ids), torch.ones(1, len(ids)),
                              torch.device("cpu"))
    assert ours.tolist() == theirs[:, 0].tolist()
    assert image_position_ids([], 5, None, torch.device("cpu")) is None


def test_an_image_prompt_matches_transformers(tower, reference, config):
    image = _image(150, 200, seed=1)
    patches, grid = preprocess_image(image, config.vision)
    before, after = [151644, 872, 198, VISION_START], [VISION_END, 64, 6548, 151645, 198]
    expected, ids = _reference_prompt(reference, before, [(patches, grid, 35)], [after])
    cond, pooled, extra = tower([before + [{"type": "image", "data": image}] + after])
    assert cond.shape == (1, len(ids), 256) and pooled is None
    assert extra["attention_mask"].tolist() == [[1] * len(ids)]
    torch.testing.assert_close(cond, expected, atol=1e-4, rtol=1e-4)


def test_qwen_image_edit_conditioning_with_two_images(reference, state, config):
    """The encoder set end to end: ComfyUI's edit template with two images, the system prompt
    dropped; the same states as transformers' model fed the same ids and patches."""
    prefixed = {f"text_encoders.qwen25_7b.transformer.{k}": v for k, v in state.items()}
    configs = detect_text_encoders(header_of(prefixed), [QWEN_IMAGE_TEXT_ENCODERS])
    clip = build_clip(configs, prefixed, torch.float32, spec=QWEN_IMAGE_TEXT_ENCODERS)
    first, second = _image(150, 200, seed=2), _image(60, 60, seed=3)
    tokens = clip.tokenize("swap them", images=[first, second])
    pairs = tokens["qwen25_7b"][0]
    assert [p[0]["data"] for p in pairs if isinstance(p[0], dict)] == [first, second]
    block = "<|vision_start|><|image_pad|><|vision_end|>"  # the second image's block follows the first
    plain = clip.tokenizer.qwen25_7b.encode(LLAMA_TEMPLATE_IMAGES.format("swap them").replace(block, block * 2, 1))
    assert [p[0] for p in pairs if not isinstance(p[0], dict)] == [t for t in plain if t != IMAGE_PAD]
    out = clip.encode_from_tokens(tokens, return_dict=True)
    p1, g1 = preprocess_image(first, config.vision)
    p2, g2 = preprocess_image(second, config.vision)
    pads = [i for i, t in enumerate(plain) if t == IMAGE_PAD]
    expected, ids = _reference_prompt(reference, plain[:pads[0]], [(p1, g1, 35), (p2, g2, 4)],
                                      [plain[pads[0] + 1:pads[1]], plain[pads[1] + 1:]])
    start = [i for i, t in enumerate(ids) if t == 151644][1] + 3  # after "<|im_start|>user\n"
    assert out["cond"].shape == (1, len(ids) - start, 256) and "attention_mask" not in out
    torch.testing.assert_close(out["cond"], expected[:, start:], atol=1e-4, rtol=1e-4)


def test_image_input_errors_are_typed(tower, config, state):
    image = {"type": "image", "data": _image(56, 56)}
    with pytest.raises(Qwen25VLInputError, match="one row at a time"):
        tower([[1, image], [1, 2]])
    with pytest.raises(Qwen25VLInputError, match="images only"):
        tower([[1, {"type": "audio", "data": None}]])
    text_only = build_qwen25vl_encoder(dataclasses.replace(config, vision=None),
                                       {k: v for k, v in state.items() if not k.startswith("visual.")})
    with pytest.raises(Qwen25VLInputError, match="no vision tower"):
        text_only([[1, image]])
    with pytest.raises(Qwen25VLInputError, match="patches for image grids"):
        encode_image_patches(tower.transformer.visual, config.vision, torch.zeros(5, 1176), torch.tensor([[1, 4, 4]]))
