"""comfy_core.merging: the strengths of each merge kind, ModelMergeBlocks' prefix rule, and what
`merge_into` patches (weights of another shape, weights the target lacks)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from comfy_core.merging import (
    add_strengths,
    block_ratio,
    block_strengths,
    merge_into,
    simple_strengths,
    subtract_strengths,
)
from comfy_core.patching import ModelPatcher, ModelWeight


def test_strengths_are_comfyuis_patch_and_model_strengths():
    assert simple_strengths(0.3)("k") == (pytest.approx(0.7), 0.3)
    assert subtract_strengths(2.0)("k") == (-2.0, 2.0)
    assert add_strengths()("k") == (1.0, 1.0)


@pytest.mark.parametrize("name, expected", [
    ("input_blocks.1.0.weight", 0.1),
    ("input_blocks.10.0.weight", 0.3),  # "input_blocks.1" is shorter than "input_blocks.10"
    ("middle_block.0.weight", 0.5),
    ("time_embed.0.weight", 0.1),  # no prefix: the first ratio
])
def test_block_ratio_takes_the_longest_prefix_else_the_first(name, expected):
    ratios = [("input_blocks.1", 0.1), ("input_blocks.10", 0.3), ("middle_block", 0.5)]
    assert block_ratio(name, ratios) == expected


def test_block_ratio_ties_keep_the_first_and_the_strengths_strip_the_prefix():
    assert block_ratio("out.0.weight", [("a", 0.9), ("out", 0.2), ("out", 0.4)]) == 0.2
    assert block_strengths([("input", 0.25), ("out", 0.75)])("diffusion_model.out.2.weight") == (0.25, 0.75)


class Two(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(2, 2)


def test_merge_into_reports_and_keeps_comfyuis_rules_for_odd_keys():
    target, source = ModelPatcher(Two(3)), ModelPatcher(Two(4))
    source.model.add_module("extra", nn.Linear(1, 1))
    report = merge_into(target, source, simple_strengths(0.5))
    assert sorted(report.mismatched) == ["a.bias", "a.weight"]
    assert sorted(report.missing) == ["extra.bias", "extra.weight"]
    assert sorted(report.merged) == ["a.bias", "a.weight", "b.bias", "b.weight"]
    assert all(isinstance(e.data, ModelWeight) for entries in target.patches.values() for e in entries)
    with target.applied() as module:
        torch.testing.assert_close(module.a.weight, 0.5 * target.model_state_dict()["a.weight"])
        torch.testing.assert_close(module.b.weight, 0.5 * target.model_state_dict()["b.weight"]
                                   + 0.5 * source.model.b.weight)


def test_prefix_and_skipped_suffixes_limit_the_merge():
    target, source = ModelPatcher(Two(3)), ModelPatcher(Two(3))
    report = merge_into(target, source, add_strengths(), prefix="b.", skip_suffixes=(".bias",))
    assert report.merged == ["b.weight"] and list(target.patches) == ["b.weight"]
