"""ManualSigmas (ComfyUI's nodes_custom_sampler.py, 2026): every number in the text, in order,
as a float32 SIGMAS tensor."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.manual_sigmas import manual_sigmas, parse_sigmas


@pytest.mark.parametrize("text, values", [
    ("1, 0.5", [1.0, 0.5]), ("14.6 7 3.5 0", [14.6, 7.0, 3.5, 0.0]), ("[1.0; .5; -0.25, +2]", [1.0, 0.5, -0.25, 2.0]),
    ("", []), ("sigmas: 0.9,0.1", [0.9, 0.1]),
])
def test_numbers_in_the_text(text, values):
    assert parse_sigmas(text) == values


def test_a_float32_tensor():
    (sigmas,) = manual_sigmas("1, 0.5, 0")
    assert sigmas.dtype == torch.float32 and torch.equal(sigmas, torch.tensor([1.0, 0.5, 0.0]))


def test_dots_that_make_no_number_are_an_error():
    with pytest.raises(NodeInputError):
        manual_sigmas("1..5")
