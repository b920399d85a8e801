"""Merge nodes (nodes/model_merging.py, nodes/model_merging_specific.py) on two tiny SD1
checkpoints: every merged weight against the formula computed here, the merged model's output
against a model given those weights directly, inputs left alone, model2's LoRA honoured, CLIP
merges, the per-block nodes' prefix rule, typed errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.loading import load_checkpoint
from comfy_core.lora import load_lora_for_models
from nodes.errors import NodeInputError
from nodes.model_merging import (
    clip_merge_add,
    clip_merge_simple,
    clip_merge_subtract,
    model_merge_add,
    model_merge_blocks,
    model_merge_simple,
    model_merge_subtract,
)
from nodes.model_merging_specific import model_merge_sd1
from tests.fixtures.checkpoints import write_tiny_checkpoint

UNET = "diffusion_model."


@pytest.fixture(scope="module")
def models(tiny_sd1_ckpt, tmp_path_factory):
    other = write_tiny_checkpoint(tmp_path_factory.mktemp("merge") / "other.safetensors", "sd1", seed=1)
    m1, c1, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    m2, c2, _ = load_checkpoint(other, output_vae=False)
    return m1, c1, m2, c2


def _originals(patcher, prefix=None):
    return {k: v.clone() for k, v in patcher.model_state_dict(prefix).items()}


def _applied_weights(patcher, prefix=None):
    with patcher.applied() as module:
        return {k: v.detach().clone() for k, v in module.state_dict().items() if prefix is None or k.startswith(prefix)}


def _unet_output(patcher):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    context = torch.randn(1, 77, patcher.model.diffusion_model.config.context_dim, generator=gen)
    with torch.no_grad(), patcher.applied() as module:
        return module.apply_model(x, torch.tensor([3.0]), c_crossattn=context)


def _assert_weights(merged, expected):
    got = _applied_weights(merged, UNET)
    assert set(got) == set(expected)
    bad = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert bad == []


def test_merge_simple_is_ratio_w1_plus_one_minus_ratio_w2_and_runs_as_those_weights(models):
    m1, _, m2, _ = models
    w1, w2 = _originals(m1, UNET), _originals(m2, UNET)
    (merged,) = model_merge_simple(m1, m2, 0.3)
    expected = {k: 0.3 * w1[k] + (1.0 - 0.3) * w2[k] for k in w1}
    _assert_weights(merged, expected)
    direct = m1.clone()
    direct.add_patches({k: ("set", (v,)) for k, v in expected.items()})
    assert torch.equal(_unet_output(merged), _unet_output(direct))
    # The inputs are untouched: no patches, same tensors.
    assert m1.patches == {} and m2.patches == {}
    assert all(torch.equal(m1.model_state_dict()[k], w1[k]) for k in w1)


def test_merge_subtract_and_add(models):
    m1, _, m2, _ = models
    w1, w2 = _originals(m1, UNET), _originals(m2, UNET)
    (diff,) = model_merge_subtract(m1, m2, 1.5)
    _assert_weights(diff, {k: 1.5 * w1[k] + (-1.5) * w2[k] for k in w1})
    (total,) = model_merge_add(m1, m2)
    _assert_weights(total, {k: w1[k] + w2[k] for k in w1})


def test_model2s_lora_is_part_of_what_is_merged(models):
    m1, _, m2, _ = models
    target = f"{UNET}input_blocks.1.1.proj_in.weight"
    shape = m2.model_state_dict()[target].shape  # [out, in, 1, 1]
    gen = torch.Generator().manual_seed(5)
    up, down = torch.randn(shape[0], 2, generator=gen), torch.randn(2, shape[1], generator=gen)
    lora = {"diffusion_model.input_blocks.1.1.proj_in.lora_up.weight": up,
            "diffusion_model.input_blocks.1.1.proj_in.lora_down.weight": down}
    m2_lora, _, report = load_lora_for_models(m2, None, lora, 0.8, 0.0, "test")
    assert report.model_keys == 1
    (merged,) = model_merge_simple(m1, m2_lora, 0.25)
    w1, w2 = m1.model_state_dict()[target], m2.model_state_dict()[target]
    w2_lora = w2 + 0.8 * (up @ down).reshape(shape)
    torch.testing.assert_close(_applied_weights(merged)[target], 0.25 * w1 + 0.75 * w2_lora)
    assert list(m2_lora.patches) == [target]  # still only its LoRA


def test_merge_blocks_picks_input_middle_out_by_prefix(models):
    m1, _, m2, _ = models
    w1, w2 = _originals(m1, UNET), _originals(m2, UNET)
    (merged,) = model_merge_blocks(m1, m2, input=0.2, middle=0.5, out=0.9)

    def ratio(key):
        name = key[len(UNET):]
        if name.startswith("middle"):
            return 0.5
        if name.startswith("out"):  # output_blocks.* and out.*
            return 0.9
        return 0.2  # input_blocks.*, and time_embed.* (no prefix: the first ratio)
    _assert_weights(merged, {k: ratio(k) * w1[k] + (1.0 - ratio(k)) * w2[k] for k in w1})


def test_the_sd1_node_has_a_ratio_per_block_and_dots_keep_block_1_from_10(models):
    m1, _, m2, _ = models
    from nodes._merge_blocks import BLOCKS

    ratios = {name: 1.0 for name in BLOCKS["ModelMergeSD1"]}
    ratios["input_blocks.1."] = 0.0
    (merged,) = model_merge_sd1(m1, m2, **ratios)
    w1, w2 = _originals(m1, UNET), _originals(m2, UNET)
    expected = {k: w2[k] if k.startswith(f"{UNET}input_blocks.1.") else w1[k] for k in w1}
    assert any(k.startswith(f"{UNET}input_blocks.10.") for k in w1)
    got = _applied_weights(merged, UNET)
    assert [k for k in expected if not torch.equal(got[k], expected[k])] == []


def test_clip_merges_mix_every_weight_but_position_ids(models):
    _, c1, _, c2 = models
    w1, w2 = _originals(c1.patcher), _originals(c2.patcher)
    (merged,) = clip_merge_simple(c1, c2, 0.6)
    assert not any(k.endswith((".position_ids", ".logit_scale")) for k in merged.patcher.patches)
    got = _applied_weights(merged.patcher)
    for key in got:
        if key.endswith(".position_ids"):
            continue
        # Computed in fp32 and stored in the weights' dtype (the text encoders are fp16 here).
        expected = (0.6 * w1[key].float() + (1.0 - 0.6) * w2[key].float()).to(w1[key].dtype)
        assert torch.equal(got[key], expected), key
    (diff,) = clip_merge_subtract(c1, c2, 2.0)
    (total,) = clip_merge_add(c1, c2)
    key = "clip_l.transformer.text_model.encoder.layers.0.mlp.fc1.weight"
    a, b = w1[key].float(), w2[key].float()
    assert torch.equal(_applied_weights(diff.patcher)[key], (2.0 * a + (-2.0) * b).to(w1[key].dtype))
    assert torch.equal(_applied_weights(total.patcher)[key], (a + b).to(w1[key].dtype))
    assert c1.patcher.patches == {} and c2.patcher.patches == {}
    assert not torch.equal(merged.encode("a cube"), c1.encode("a cube"))


def test_repeated_merges_have_the_same_value_identity(models):
    m1, _, m2, _ = models
    first, again = model_merge_simple(m1, m2, 0.5)[0], model_merge_simple(m1, m2, 0.5)[0]
    assert first.cache_signature() is not None and first.cache_signature() == again.cache_signature()
    assert model_merge_simple(m1, m2, 0.4)[0].cache_signature() != first.cache_signature()


def test_bad_inputs_are_typed_errors(models):
    m1, c1, m2, _ = models
    with pytest.raises(NodeInputError, match="model2"):
        model_merge_simple(m1, "not a model", 0.5)
    with pytest.raises(NodeInputError, match="ratio"):
        model_merge_simple(m1, m2, 1.5)
    with pytest.raises(NodeInputError, match="clip2"):
        clip_merge_add(c1, None)
    with pytest.raises(NodeInputError, match="middle"):
        model_merge_blocks(m1, m2, input=0.5, out=0.5)
