"""Qwen-Image 2.1's conditioning rules (comfy_core/families/qwen_image/qwen21.py): the encoder
template with `<imageN>` references, the reference sizes (multiples of 32), alpha over white, which
encoder positions are conditioning (system turn and, without kept vision, the image spans dropped,
image slots counted), and the prefix-cache settings; each checked against values worked out by hand."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.qwen_image.qwen21 import (
    CACHE_OPTION,
    IM_START_ID,
    PROMPT_TEMPLATE,
    VISION_BLOCK,
    PrefixCacheSettings,
    QwenImage21Error,
    cache_settings,
    conditioning_positions,
    empty_latent,
    over_white,
    prompt_template,
    reference_size,
    with_cache_settings,
)

IMAGE = {"type": "image", "data": None, "original_type": "image"}


def test_template_without_images_is_the_system_and_user_turns():
    assert PROMPT_TEMPLATE == ("<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n"
                               "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
    assert prompt_template(0).format("a cat") == PROMPT_TEMPLATE.format("a cat")


def test_template_names_each_reference_before_the_prompt():
    text = prompt_template(2).format("swap them")
    assert text.endswith(f"<|im_start|>user\n<image1>{VISION_BLOCK} <image2>{VISION_BLOCK}swap them<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert text.count("<|image_pad|>") == 2
    with pytest.raises(QwenImage21Error):
        prompt_template(17)


@pytest.mark.parametrize("size, resolution, expected", [
    ((40, 60), 1024, (832, 1248)),     # sqrt(1024^2 * 1.5) = 1254.1 -> 1248; sqrt(1024^2 / 1.5) = 836.1 -> 832
    ((1024, 1024), 1024, (1024, 1024)),
    ((100, 50), 0, (96, 64)),          # each side rounded to 32: 100 -> 96, 50 -> 64
    ((10, 10), 0, (32, 32)),           # 10 rounds to 0, raised to the 32 floor
    ((1, 4000), 64, (32, 4032)),       # 64 * sqrt(4000) = 4047.7 -> 4032; the short side floors at 32
])
def test_reference_sizes(size, resolution, expected):
    assert reference_size(*size, resolution) == expected


def test_reference_size_refuses_bad_input():
    with pytest.raises(QwenImage21Error):
        reference_size(0, 10, 1024)
    with pytest.raises(QwenImage21Error):
        reference_size(10, 10, -32)


def test_alpha_is_composited_over_white_for_the_vision_tower():
    rgba = torch.tensor([[[[0.2, 0.4, 0.6, 0.5], [1.0, 0.0, 0.0, 0.0]]]])  # [1, 1, 2, 4]
    expected = torch.tensor([[[[0.6, 0.7, 0.8], [1.0, 1.0, 1.0]]]])
    assert torch.allclose(over_white(rgba), expected)
    rgb = rgba[..., :3]
    assert torch.equal(over_white(rgb), rgb)


def test_text_only_drops_the_system_turn():
    # <|im_start|> system ... <|im_end|> \n <|im_start|> user \n a cat ...
    tokens = [IM_START_ID, 1, 2, 3, 4, IM_START_ID, 872, 198, 10, 11]
    keep, slots = conditioning_positions(tokens, [], keep_vision=False)
    assert keep.tolist() == [False] * 5 + [True] * 5 and slots == []


def test_image_expansion_shifts_positions_and_spans_are_dropped_with_slots():
    # system turn of 3, then the user turn: im_start user \n <image1> [img: 4] ' ' [img: 2] prompt
    tokens = [IM_START_ID, 5, 6, IM_START_ID, 872, 198, 7, IMAGE, 8, IMAGE, 9, 10]
    keep, slots = conditioning_positions(tokens, [4, 2], keep_vision=False)
    # expanded: positions 0-2 system, 3-6 (im_start user \n <image1>), 7-10 image 1, 11 ' ',
    # 12-13 image 2, 14-15 prompt: 16 in all
    expected = [False] * 3 + [True] * 4 + [False] * 4 + [True] + [False] * 2 + [True] * 2
    assert keep.tolist() == expected
    assert slots == [4, 5]  # kept positions before each image


def test_kept_vision_keeps_the_spans_and_records_no_slots():
    tokens = [IM_START_ID, 5, IM_START_ID, IMAGE, 9]
    keep, slots = conditioning_positions(tokens, [3], keep_vision=True)
    assert keep.tolist() == [False, False] + [True] * 5 and slots == []


def test_one_im_start_drops_nothing_and_sizes_must_match():
    keep, _ = conditioning_positions([IM_START_ID, 1, 2], [], keep_vision=False)
    assert keep.all()
    with pytest.raises(QwenImage21Error):
        conditioning_positions([IM_START_ID, IMAGE], [], keep_vision=False)
    with pytest.raises(QwenImage21Error):
        conditioning_positions([IM_START_ID, IMAGE], [0], keep_vision=False)


def test_cache_settings_round_trip_and_validate():
    assert cache_settings({}) == PrefixCacheSettings("auto", "default")
    options = with_cache_settings({"other": 1}, PrefixCacheSettings("cpu", "int8"))
    assert options == {"other": 1, CACHE_OPTION: {"device": "cpu", "dtype": "int8"}}
    assert cache_settings(options) == PrefixCacheSettings("cpu", "int8")
    with pytest.raises(QwenImage21Error):
        PrefixCacheSettings("tpu", "default")
    with pytest.raises(QwenImage21Error):
        PrefixCacheSettings("auto", "fp8")
    with pytest.raises(QwenImage21Error):
        cache_settings({CACHE_OPTION: "gpu"})


def test_empty_latent_is_64_channels_at_a_sixteenth():
    assert empty_latent(832, 1248).shape == (1, 64, 52, 78)


def test_template_and_reference_sizes_agree_with_diffusers():
    """diffusers 0.42's Qwen-Image 2.1 pipeline builds the same encoder prompt and reference sizes."""
    encoders = pytest.importorskip("diffusers.modular_pipelines.qwenimage21.encoders")
    for count in (0, 1, 3):
        references = " ".join(encoders.QWENIMAGE21_IMAGE_TEMPLATE.format(i + 1) for i in range(count))
        expected = (f"<|im_start|>system\n{encoders.QWENIMAGE21_SYSTEM_PROMPT}<|im_end|>\n"
                    f"<|im_start|>user\n{references}{{}}<|im_end|>\n<|im_start|>assistant\n")
        assert prompt_template(count) == expected
    for height, width, resolution in ((40, 60, 1024), (768, 1360, 1024), (1000, 333, 512), (64, 64, 256)):
        diffusers_width, diffusers_height, _ = encoders.calculate_dimensions(resolution * resolution, width / height)
        assert reference_size(height, width, resolution) == (diffusers_height, diffusers_width)
