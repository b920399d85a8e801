"""bench/memory_curve.py's prompt cycle and figures (the benchmark itself runs a server: bench only)."""
from __future__ import annotations

import pytest

from bench.memory_curve import CYCLE, prompt_for, slope_per_100


def _combination(prompt: dict) -> tuple:
    lora = prompt.get("2", {}).get("inputs", {}).get("lora_name")
    latent = prompt["5"]["inputs"]
    return prompt["1"]["inputs"]["ckpt_name"], lora, latent["width"]


def test_each_cycle_runs_every_checkpoint_lora_and_size_once():
    first = [_combination(prompt_for(i)) for i in range(CYCLE)]
    assert len(set(first)) == CYCLE == 2 * 3 * 3
    assert [_combination(prompt_for(i)) for i in range(CYCLE, 2 * CYCLE)] == first
    sampler = prompt_for(5)["6"]["inputs"]
    assert sampler["steps"] == 2 and sampler["seed"] == 5 and sampler["model"] == ["2", 0]
    assert prompt_for(3)["6"]["inputs"]["model"] == ["1", 0]  # no LoRA: the checkpoint's model


def test_slope_is_per_hundred_prompts():
    assert slope_per_100([18, 36, 54], [100.0, 101.0, 102.0]) == pytest.approx(100 / 18)
    assert slope_per_100([1, 2, 3], [5.0, 5.0, 5.0]) == 0
