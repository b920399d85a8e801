"""ConditioningSetAreaPercentageVideo: ComfyUI's 7-part percentage area on a copy of every entry."""
from __future__ import annotations

import pytest
import torch

from nodes.conditioning_video import conditioning_set_area_percentage_video
from nodes.errors import NodeInputError


def test_sets_the_video_area_on_copies():
    cond = [[torch.zeros(1, 2, 3), {"pooled_output": "p"}], [torch.ones(1, 2, 3), {}]]
    out = conditioning_set_area_percentage_video(cond, 0.5, 0.25, 0.75, 0.1, 0.2, 0.3, 2.0)[0]
    area = ("percentage", 0.75, 0.25, 0.5, 0.3, 0.2, 0.1)  # (t, h, w, z, y, x)
    assert [entry[1] for entry in out] == [
        {"pooled_output": "p", "area": area, "strength": 2.0, "set_area_to_bounds": False},
        {"area": area, "strength": 2.0, "set_area_to_bounds": False}]
    assert out[0][0] is cond[0][0] and cond[0][1] == {"pooled_output": "p"}


@pytest.mark.parametrize("index, name", [(1, "width"), (6, "z"), (7, "strength")])
def test_refuses_values_out_of_range(index, name):
    args = [[[torch.zeros(1, 2, 3), {}]], 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    args[index] = -0.5
    with pytest.raises(NodeInputError) as info:
        conditioning_set_area_percentage_video(*args)
    assert info.value.input_name == name
