"""Modules built with no data: meta tensors, default initialisation skipped, real tensors untouched."""
from __future__ import annotations

import torch
from torch import nn

from comfy_core.checkpoint.meta_build import build_on_meta, meta_build


class _Initialised(nn.Module):
    """A module whose constructor initialises its weights the way torch and transformers do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.conv = nn.Conv2d(3, 5, 3)
        self.norm = nn.LayerNorm(4)
        self.table = nn.Parameter(torch.empty(6, 2))
        nn.init.trunc_normal_(self.table, std=0.02)
        nn.init.kaiming_uniform_(self.linear.weight, a=5 ** 0.5)
        self.linear.bias.data.zero_()


def test_built_module_is_all_meta_with_the_plain_build_s_names_shapes_and_dtypes():
    plain = _Initialised()
    built = build_on_meta(_Initialised)
    assert all(t.is_meta for t in built.state_dict().values())
    assert {k: (v.shape, v.dtype) for k, v in built.state_dict().items()} == \
        {k: (v.shape, v.dtype) for k, v in plain.state_dict().items()}


def test_init_fills_on_meta_tensors_return_their_input_and_real_tensors_are_still_written():
    with meta_build():
        meta = torch.empty(3)
        assert meta.is_meta
        assert nn.init.normal_(meta) is meta and nn.init.uniform_(tensor=meta) is meta and meta.fill_(1.0) is meta
        real = torch.zeros(3, device="cpu")
        real.fill_(2.0)
        nn.init.constant_(real, 5.0)
        real.add_(1.0)
    assert not real.is_meta and torch.equal(real, torch.full((3,), 6.0))
    assert not torch.empty(2).is_meta  # outside the block: the default device again


def test_a_built_module_loads_a_state_dict_by_assignment_and_computes():
    source = _Initialised()
    built = build_on_meta(_Initialised)
    built.load_state_dict(source.state_dict(), assign=True)
    x = torch.randn(2, 8)
    assert torch.equal(built.linear(x), source.linear(x))


class _WithValueBuffers(nn.Module):
    """Position ids and a frequency table, as text encoders and DiTs build them in their constructors."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.register_buffer("position_ids", torch.arange(10).expand((1, -1)), persistent=False)
        self.register_buffer("freqs", torch.linspace(0.0, 1.0, 5), persistent=False)
        self.scale = nn.Parameter(torch.ones(4))


def test_value_factories_keep_their_values_on_the_cpu_while_weights_go_to_meta():
    # Building arange / linspace on meta gains nothing (no checkpoint replaces them) and makes torch
    # import its symbolic-shape machinery (sympy) on the first load of every process.
    built = build_on_meta(_WithValueBuffers)
    assert built.embedding.weight.is_meta and built.scale.is_meta
    assert not built.position_ids.is_meta and not built.freqs.is_meta
    assert torch.equal(built.position_ids, torch.arange(10).expand((1, -1)))
    assert torch.equal(built.freqs, torch.linspace(0.0, 1.0, 5))
    with meta_build():
        asked = torch.arange(3, device="meta")  # an explicit device is still obeyed
    assert asked.is_meta
