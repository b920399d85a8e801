"""Qwen3.5 with images (comfy_core/text_encoders/qwen35_vision.py and the tower's prompt path): the
vision tower's tokens spliced at the image entry, Qwen2-VL's M-RoPE positions rotated interleaved on
the first quarter of each head, decoding continuing after the image's positions; the next-token
logits and greedy generation against transformers' `Qwen3_5ForConditionalGeneration` on the same
tiny weights, patches and ids."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens
from comfy_core.text_encoders.qwen25vl_vision import preprocess_image
from comfy_core.text_encoders.qwen35 import Qwen35Config
from comfy_core.text_encoders.qwen35_load import build_qwen35_encoder
from comfy_core.text_encoders.qwen35_vision import interleaved_tables
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen35_files import reference_vl_model, tiny_state_dict
from tests.fixtures.t5_files import header_of

IMAGE_PAD, VISION_START, VISION_END = 248056, 248053, 248054
BEFORE = [248045, 300, 301, 198, VISION_START]
AFTER = [VISION_END, 40, 41, 42, 248046, 198, 248045, 310, 198]


@pytest.fixture(scope="module")
def state():
    return tiny_state_dict(seed=5, visual=True)


@pytest.fixture(scope="module")
def tower(state):
    return build_qwen35_encoder(Qwen35Config.detect_from_weights(header_of(state), ""), state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_vl_model(state)


@pytest.fixture(scope="module")
def image():
    return torch.rand(1, 64, 96, 3, generator=torch.Generator().manual_seed(0))


def _reference_inputs(tower, image):
    patches, grid = preprocess_image(image, tower.config.vision, (0.5,) * 3, (0.5,) * 3)
    count = int(grid[0, 1] * grid[0, 2]) // 4
    ids = torch.tensor([BEFORE + [IMAGE_PAD] * count + AFTER])
    return {"input_ids": ids, "pixel_values": patches, "image_grid_thw": grid,
            "mm_token_type_ids": (ids == IMAGE_PAD).int()}


def test_the_vision_tower_is_read_from_the_file(tower):
    vision = tower.config.vision
    assert (vision.hidden_size, vision.depth, vision.num_heads, vision.out_hidden_size) == (64, 1, 16, 32)
    assert vision.deepstack_visual_indexes == () and tower.generation_media == ("image",)


def test_text_positions_are_plain_rope():
    positions = torch.arange(7).expand(3, -1)
    cos, sin = interleaved_tables(positions, 64, 1e7)
    inv = 1.0 / (1e7 ** (torch.arange(0, 64, 2).float() / 64))
    angles = torch.arange(7).float()[:, None] * inv
    assert torch.allclose(cos, torch.cat([angles, angles], -1).cos()) and sin.shape == (7, 64)


def test_the_prompt_logits_match_transformers(tower, reference, image):
    inputs = _reference_inputs(tower, image)
    with torch.no_grad():
        expected = reference(**inputs).logits[:, -1]
        embeds, positions = tower.prompt_inputs(BEFORE + [{"type": "image", "data": image}] + AFTER)
        assert embeds.shape[1] == inputs["input_ids"].shape[1] and positions.shape == (3, embeds.shape[1])
        logits = tower.logits(tower.decode_step(embeds, tower.new_cache(1, 64), positions))
    assert torch.allclose(logits, expected, atol=1e-5, rtol=0)


def test_greedy_generation_with_an_image_equals_transformers_generate(tower, reference, image):
    inputs = _reference_inputs(tower, image)
    with torch.no_grad():
        expected = reference.generate(**inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        embeds, positions = tower.prompt_inputs(BEFORE + [{"type": "image", "data": image}] + AFTER)
        ours = generate_tokens(tower, embeds, 6, SamplingOptions(do_sample=False), positions=positions)
    assert ours == expected[0, inputs["input_ids"].shape[1]:].tolist()


def test_quantised_vision_layers_run_int8_and_refuse_other_formats(state, tower, image):
    from comfy_core.weights.quant_registry import QuantFormatError
    from tests.fixtures.template_models_quant import quantize_state, true_state

    visual = {k: v for k, v in state.items() if k.startswith("model.visual.blocks.")}
    tensors, metadata = quantize_state(visual, "int8_tensorwise", convrot=True, float_dtype=torch.float32)
    truth = true_state(tensors, metadata, {n: tuple(v.shape) for n, v in visual.items() if v.dim() == 2})
    quantized = build_qwen35_encoder(tower.config, {**state, **tensors})
    reference = build_qwen35_encoder(tower.config, {**state, **truth})
    with torch.no_grad():
        assert torch.allclose(quantized.encode_image(image)[0], reference.encode_image(image)[0], atol=1e-5, rtol=0)
    fp8, _ = quantize_state(visual, "float8_e4m3fn", float_dtype=torch.float32)
    with pytest.raises(QuantFormatError, match="vision"):
        build_qwen35_encoder(tower.config, {**state, **fp8})
