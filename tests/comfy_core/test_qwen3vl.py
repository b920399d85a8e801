"""The Qwen3-VL tower (comfy_core/text_encoders/qwen3vl.py, qwen3vl_vision.py) against transformers'
`Qwen3VLModel` on the same tiny random weights and token ids (within 1e-5): text prompts, the vision
tower with its DeepStack features, image prompts (interleaved M-RoPE positions, DeepStack added to the
first blocks), and detection from names and shapes (ComfyUI's 4B / 8B rule, DeepStack taps)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.text_encoders.qwen25vl import image_position_ids
from comfy_core.text_encoders.qwen3 import rotary_tables
from comfy_core.text_encoders.qwen3vl import (QWEN3VL_4B_SLOT, QWEN3VL_8B_SLOT, Qwen3VLConfig, Qwen3VLKeyError,
                                              Qwen3VLNames, build_qwen3vl_encoder, interleaved_mrope_tables)
from comfy_core.text_encoders.qwen3vl_vision import (MEAN, STD, Qwen3VLDetectionError, Qwen3VLInputError,
                                                     encode_image_patches, preprocess_image)
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3vl_files import (IMAGE_PAD, TEXT_WIDTH, VISION_END, VISION_START, hf_config, reference_model,
                                          tiny_qwen3vl_state_dict)
from tests.fixtures.t5_files import header_of

PROMPT = [151644, 872, 198, 64, 2518, 38835, 151645, 198, 151644, 77091, 198]  # a chat turn, ids as tokenized


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3vl_state_dict(seed=3)


@pytest.fixture(scope="module")
def config(state):
    return Qwen3VLConfig.detect_from_weights(header_of(state), "")


@pytest.fixture(scope="module")
def tower(config, state):
    return build_qwen3vl_encoder(config, state)


@pytest.fixture(scope="module")
def reference(state):
    return reference_model(state)


def _image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, height, width, 3, generator=torch.Generator().manual_seed(seed))


def _reference_states(reference, ids: list[int], images: list[torch.Tensor]) -> torch.Tensor:
    """transformers' final normed states for `ids` (each image's pads in place) fed the images' patches
    as ComfyUI's preprocessing makes them."""
    kwargs = {}
    if images:
        prepared = [preprocess_image(image, reference.config.vision_config, MEAN, STD) for image in images]
        kwargs = dict(pixel_values=torch.cat([p for p, _ in prepared]),
                      image_grid_thw=torch.cat([g for _, g in prepared]),
                      mm_token_type_ids=torch.tensor([[1 if t == IMAGE_PAD else 0 for t in ids]]))
    with torch.no_grad():
        return reference(input_ids=torch.tensor([ids]), **kwargs).last_hidden_state


def test_detection_reads_comfyuis_layout(config, state):
    assert (config.hidden_size, config.num_layers, config.num_heads, config.num_kv_heads, config.head_dim) == \
        (TEXT_WIDTH, 3, 2, 1, 128)
    assert config.slot == QWEN3VL_8B_SLOT and config.rope_theta == 5e6 and config.mrope_section == (24, 20, 20)
    vision = config.vision
    assert (vision.hidden_size, vision.depth, vision.patch_size, vision.num_position_embeddings) == (64, 3, 16, 16)
    assert vision.deepstack_visual_indexes == (0, 1)  # a reduced tower's 2 mergers tap blocks evenly
    # ComfyUI's loaded names (`model.` / `visual.`) are the same tower
    renamed = Qwen3VLNames(header_of(state))
    assert Qwen3VLConfig.detect_from_weights(dict(renamed.items()), "") == config
    assert Qwen3VLConfig.detect_from_weights({"model.layers.0.self_attn.q_norm.weight": None}, "") is None
    broken = {k: v for k, v in header_of(state).items() if k != "model.visual.blocks.1.mlp.linear_fc2.weight"}
    with pytest.raises(Qwen3VLDetectionError, match="blocks.1.mlp.linear_fc2.weight"):
        Qwen3VLConfig.detect_from_weights(broken, "")


def test_the_releases_sizes_name_the_4b_and_tap_comfyuis_blocks():
    """The 4B (merger projecting to 2560) and its 24-block tower's DeepStack blocks 5, 11, 17, read from
    a header of the real shapes (a meta-device model: no tensor data)."""
    from transformers import Qwen3VLForConditionalGeneration

    config = hf_config()
    config.text_config.hidden_size = 2560
    config.text_config.num_hidden_layers = 1
    config.text_config.num_attention_heads = 32
    config.text_config.num_key_value_heads = 8
    config.vision_config.update(dict(hidden_size=1024, intermediate_size=4096, depth=24, out_hidden_size=2560,
                                     num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17]))
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(config)
    header = header_of(model.state_dict())
    detected = Qwen3VLConfig.detect_from_weights(header, "")
    assert detected.slot == QWEN3VL_4B_SLOT and detected.vision.deepstack_visual_indexes == (5, 11, 17)


def test_interleaved_mrope_is_transformers(reference):
    positions = torch.stack([torch.arange(9), torch.arange(9) // 3 + 2, torch.arange(9) % 3 + 2])  # [3, T]
    cos, sin = interleaved_mrope_tables(positions, 128, 5e6, (24, 20, 20), torch.device("cpu"))
    theirs_cos, theirs_sin = reference.language_model.rotary_emb(torch.zeros(1, 9, 1), positions[:, None])
    torch.testing.assert_close(cos, theirs_cos[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, theirs_sin[0], atol=1e-6, rtol=0)
    text = interleaved_mrope_tables(torch.arange(9).expand(3, -1), 128, 5e6, (24, 20, 20), torch.device("cpu"))
    torch.testing.assert_close(text, rotary_tables(9, 128, 5e6, torch.device("cpu")))  # text: plain RoPE
    with pytest.raises(Qwen3VLInputError, match="sections"):
        interleaved_mrope_tables(positions, 64, 5e6, (24, 20, 20), torch.device("cpu"))


def test_a_text_prompt_matches_transformers(tower, reference):
    expected = _reference_states(reference, PROMPT, [])
    torch.testing.assert_close(tower.encode_ids(torch.tensor([PROMPT]), layer_idx=None), expected, atol=1e-5, rtol=1e-5)
    # ComfyUI's layer: the last block's output without the final norm (norming it gives transformers' output)
    cond, pooled, extra = tower([PROMPT])
    assert cond.shape == (1, len(PROMPT), TEXT_WIDTH) and pooled is None and extra["attention_mask"].all()
    normed = torch.nn.functional.rms_norm(cond, (TEXT_WIDTH,), tower.transformer.model.norm.weight, 1e-6)
    torch.testing.assert_close(normed, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(cond, expected, atol=1e-3)


def test_the_vision_tower_and_deepstack_match_transformers(tower, reference, config):
    patches, grid = preprocess_image(_image(70, 100), config.vision, MEAN, STD)
    assert grid.tolist() == [[1, 4, 6]]  # 70 x 100 -> 64 x 96 pixels (multiples of 32) -> 4 x 6 patches of 16
    ours, deepstack = encode_image_patches(tower.transformer.visual, config.vision, patches, grid)
    with torch.no_grad():
        theirs = reference.visual(patches, grid_thw=grid)
    assert ours.shape == (6, TEXT_WIDTH) and len(deepstack) == 2
    torch.testing.assert_close(ours, theirs.pooler_output, atol=1e-5, rtol=1e-5)
    for mine, their in zip(deepstack, theirs.deepstack_features):
        torch.testing.assert_close(mine, their, atol=1e-5, rtol=1e-5)


def test_image_prompts_match_transformers(tower, reference):
    """Two images between text: the vision tokens spliced in, their M-RoPE positions, DeepStack added
    after the first two blocks; the final normed states equal transformers' (the layer-(-1) states,
    normed, too)."""
    first, second = _image(70, 100, seed=1), _image(40, 40, seed=2)
    before, middle, after = [151644, 872, 198, VISION_START], [VISION_END, 64, VISION_START], [VISION_END, 2518, 151645]
    counts = [tower.image_token_count(first), tower.image_token_count(second)]
    assert counts == [6, 4]  # 4 x 6 patches; 40 x 40 is below 3,136 pixels: 64 x 64, 4 x 4 patches; merged 2 x 2
    ids = before + [IMAGE_PAD] * counts[0] + middle + [IMAGE_PAD] * counts[1] + after
    expected = _reference_states(reference, ids, [first, second])
    row = before + [{"type": "image", "data": first}] + middle + [{"type": "image", "data": second}] + after
    with tower.using_options(dataclasses.replace(tower.options, layer_idx=None)):
        cond, _, extra = tower([row])
    assert cond.shape == (1, len(ids), TEXT_WIDTH) and extra["attention_mask"].shape == (1, len(ids))
    torch.testing.assert_close(cond, expected, atol=1e-5, rtol=1e-5)
    last, _, _ = tower([row])
    normed = torch.nn.functional.rms_norm(last, (TEXT_WIDTH,), tower.transformer.model.norm.weight, 1e-6)
    torch.testing.assert_close(normed, expected, atol=1e-5, rtol=1e-5)


def test_positions_are_transformers_get_rope_index(reference):
    grids = [torch.tensor([[1, 4, 6]]), torch.tensor([[1, 2, 2]])]
    ids = [1, 2, VISION_START] + [IMAGE_PAD] * 6 + [VISION_END, 5, VISION_START] + [IMAGE_PAD] + [VISION_END, 7]
    types = torch.tensor([[1 if t == IMAGE_PAD else 0 for t in ids]])
    theirs, _ = reference.get_rope_index(torch.tensor([ids]), types, image_grid_thw=torch.cat(grids))
    ours = image_position_ids([(3, 6, grids[0]), (12, 1, grids[1])], len(ids), None, torch.device("cpu"))
    assert ours.tolist() == theirs[:, 0].tolist()


def test_bad_input_is_typed(tower, config, state):
    with pytest.raises(Qwen3VLInputError, match="one row at a time"):
        tower([[1, {"type": "image", "data": _image(32, 32)}], [1, 2]])
    with pytest.raises(Qwen3VLInputError, match="IMAGE tensor"):
        tower.image_token_count("not an image")
    unknown = dict(state, **{"model.language_model.layers.0.mlp.extra.weight": torch.zeros(1)})
    with pytest.raises(Qwen3VLKeyError, match="extra.weight"):
        build_qwen3vl_encoder(config, unknown)
    nvfp4 = dict(state, **{"model.language_model.layers.0.mlp.up_proj.comfy_quant":
                           torch.tensor(list(b'{"format": "nvfp4"}'), dtype=torch.uint8),
                           "model.language_model.layers.0.mlp.up_proj.weight_scale": torch.ones(1)})
    with pytest.raises(Qwen3VLKeyError, match="nvfp4"):
        build_qwen3vl_encoder(config, nvfp4)


def test_float8_layers_stay_fp8_and_compute_with_their_scale(config, state):
    """ComfyUI's per-layer float8 form (`comfy_quant` {"format": "float8_e4m3fn"} + `weight_scale`) in the
    language model and the vision tower: the weights kept fp8, the output that of weight x scale."""
    description = torch.tensor(list(b'{"format": "float8_e4m3fn"}'), dtype=torch.uint8)
    stored, dequantized = dict(state), dict(state)
    for layer in ("model.language_model.layers.1.mlp.up_proj", "model.visual.blocks.0.attn.qkv"):
        weight = state[layer + ".weight"]
        scale = weight.abs().max() / 448.0
        fp8 = (weight / scale).to(torch.float8_e4m3fn)
        stored.update({layer + ".weight": fp8, layer + ".weight_scale": scale.reshape(1),
                       layer + ".comfy_quant": description})
        dequantized[layer + ".weight"] = fp8.float() * scale
    tower = build_qwen3vl_encoder(config, stored)
    assert tower.transformer.model.layers[1].mlp.up_proj.weight.dtype == torch.float8_e4m3fn
    assert tower.transformer.visual.blocks[0].attn.qkv.weight.dtype == torch.float8_e4m3fn
    plain = build_qwen3vl_encoder(config, dequantized)
    row = [151644, 872, 198, VISION_START, {"type": "image", "data": _image(32, 64)}, VISION_END, 64]
    torch.testing.assert_close(tower([row])[0], plain([row])[0], atol=1e-5, rtol=1e-5)
