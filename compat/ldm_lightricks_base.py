"""ComfyUI's `comfy.ldm.lightricks.model.LTXBaseModel`: today's abstract base of the LTX-Video DiT
(`LTXVModel`) and the LTX-2 audio-video DiT (`LTXAVModel`) (behaviour of today's ComfyUI
`comfy/ldm/lightricks/model.py`: an abstract `torch.nn.Module` those two subclass). Ours are
`comfy_core.families.ltxv.dit.LTXVModel` and `comfy_core.families.ltx2.dit.LTXAVModel`, which do
not share a base here; `isinstance(network, LTXBaseModel)` is true for either (a pack's test for
"an LTX model", ComfyUI_Patches_ll's LTXVideoPatch), and the class cannot be built itself."""
from __future__ import annotations

from typing import Any

from torch import nn


class _LTXFamily(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        if cls is not LTXBaseModel:
            return False
        from comfy_core.families.ltx2.dit import LTXAVModel
        from comfy_core.families.ltxv.dit import LTXVModel

        return isinstance(obj, (LTXVModel, LTXAVModel))

    def __subclasscheck__(cls, sub: type) -> bool:
        if type.__subclasscheck__(cls, sub):
            return True
        if cls is not LTXBaseModel:
            return False
        from comfy_core.families.ltx2.dit import LTXAVModel
        from comfy_core.families.ltxv.dit import LTXVModel

        return isinstance(sub, type) and issubclass(sub, (LTXVModel, LTXAVModel))


class LTXBaseModel(nn.Module, metaclass=_LTXFamily):
    """Abstract: a subclass (a pack's own LTX network) is built normally; the base itself is not."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if type(self) is LTXBaseModel:
            raise TypeError("LTXBaseModel is abstract: build LTXVModel or LTXAVModel "
                            "(comfy.ldm.lightricks.model / av_model)")
        super().__init__()


__all__ = ["LTXBaseModel"]
