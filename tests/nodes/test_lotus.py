"""LotusConditioning (today's ComfyUI, nodes_lotus.py): Lotus's fixed null-prompt conditioning."""
from __future__ import annotations

import hashlib

import torch

from nodes.lotus import lotus_conditioning

# sha256 of the float32 values ComfyUI's node inlines (comfy_core/families/sd2/data/PROVENANCE.md).
DIGEST = "a7ba15b03c89931a7764a7d4b398201b322e00524d03efaac172b48dc637397d"


def test_the_conditioning_is_lotus_null_prompt_embedding():
    (conditioning,) = lotus_conditioning()
    assert len(conditioning) == 1
    tensor, options = conditioning[0]
    assert options == {}
    assert tensor.shape == (1, 2, 1024) and tensor.dtype == torch.float32 and tensor.device.type == "cpu"
    assert hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest() == DIGEST
    # values ComfyUI's literal starts and ends with, and its largest
    assert tensor[0, 0, 0].item() == -0.3134765625 and tensor[0, 1, -1].item() == 1.5009765625
    assert tensor.abs().max().item() == 13.0234375


def test_each_call_gets_its_own_tensor():
    first = lotus_conditioning()[0][0][0]
    first.zero_()
    assert lotus_conditioning()[0][0][0].abs().sum() > 0


def test_it_is_a_conditioning_the_sampler_takes():
    from comfy_core.sampling.conditioning import convert_cond

    (entry,) = convert_cond(lotus_conditioning()[0], "positive")
    assert entry["cross_attn"].shape == (1, 2, 1024)
