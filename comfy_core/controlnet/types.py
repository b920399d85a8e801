"""Names shared by ControlNet objects and nodes: union control types and strength types.

`UNION_CONTROLNET_TYPES` is the task index table of xinsir's ControlNet++ union models
(https://github.com/xinsir6/ControlNetPlus), in the order ComfyUI's `comfy/cldm/control_types.py`
lists it (SetUnionControlNetType's combo shows it in that order after "auto").
"""
from __future__ import annotations

from enum import Enum

UNION_CONTROLNET_TYPES: dict[str, int] = {
    "openpose": 0,
    "depth": 1,
    "hed/pidi/scribble/ted": 2,
    "canny/lineart/anime_lineart/mlsd": 3,
    "normal": 4,
    "segment": 5,
    "tile": 6,
    "repaint": 7,
}


class StrengthType(Enum):
    """How `strength` scales the residuals: the same everywhere, or `strength ** (n - i)` for
    residual i of n (deeper residuals scaled less), as ComfyUI's StrengthType."""

    CONSTANT = 1
    LINEAR_UP = 2
