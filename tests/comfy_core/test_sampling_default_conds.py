"""`default` conditioning entries (ConditioningSetDefaultCombine): they fill what the other entries
of their list leave uncovered, weighted by `relu(1 - sum of the others' weights)`, and are not
run where nothing is left (ComfyUI's comfy/samplers.py `finalize_default_conds`)."""
from __future__ import annotations

import uuid

import torch

from comfy_core.sampling.cond_batch import calc_cond_batch


def entry(value: float, **options) -> dict:
    """A prepared entry whose model output is `value` everywhere (see `apply_model`)."""
    return {"model_conds": {"c_crossattn": torch.full((1, 2, 4), value)}, "uuid": uuid.uuid4(), **options}


def apply_model(x, sigma, c_crossattn, transformer_options=None, **_):
    calls.append(c_crossattn[:, 0, 0].tolist())
    return c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1).expand_as(x).clone()


calls: list = []


def run(entries):
    calls.clear()
    x = torch.zeros(1, 4, 4, 4)
    return calc_cond_batch(apply_model, [entries], x, torch.ones(1), {})[0]


def test_a_default_entry_fills_what_a_masked_entry_leaves():
    mask = torch.zeros(1, 4, 4)
    mask[:, :, :2] = 1.0  # the left half
    out = run([entry(3.0, mask=mask), entry(10.0, default=True)])
    assert torch.allclose(out[..., :2], torch.full_like(out[..., :2], 3.0))
    assert torch.allclose(out[..., 2:], torch.full_like(out[..., 2:], 10.0))


def test_a_default_entry_under_a_partial_weight_takes_the_rest():
    out = run([entry(2.0, strength=0.25), entry(6.0, default=True)])
    # (0.25 * 2 + 0.75 * 6) / (0.25 + 0.75)
    assert torch.allclose(out, torch.full_like(out, 0.25 * 2.0 + 0.75 * 6.0))


def test_a_default_entry_is_not_run_where_nothing_is_left():
    out = run([entry(3.0), entry(10.0, default=True)])
    assert torch.allclose(out, torch.full_like(out, 3.0))
    assert calls == [[3.0]]


def test_a_default_entry_alone_covers_everything():
    out = run([entry(10.0, default=True)])
    assert torch.allclose(out, torch.full_like(out, 10.0))
