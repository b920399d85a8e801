"""ComfyUI `comfy.controlnet` names for model families this engine does not run."""
from __future__ import annotations

from typing import Any

from comfy_core.controlnet.runner import ControlNet


class UnsupportedControlNet(NotImplementedError):
    """A ControlNet kind whose base model family this engine does not run."""


class ControlNetSD35(ControlNet):
    """ComfyUI's SD3.5 (MMDiT) ControlNet. Packs subclass it at import time (Advanced-ControlNet),
    so the class exists; making one is an error naming what is missing: this engine runs no SD3
    models."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedControlNet("SD3.5 ControlNets (comfy.controlnet.ControlNetSD35) need an SD3 model, "
                                    "which this engine does not run")
