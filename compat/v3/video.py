"""ComfyUI's video types for packs (`comfy_api.latest.Types` / `InputImpl` / `Input`, its
comfy_api/latest/_util/video_types.py, _input/ and _input_impl/video_types.py; the older
`comfy_api.input`, `comfy_api.input_impl` and `comfy_api.util` paths re-export them).

They are the engine's own classes (comfy_core/video/): a VIDEO a pack receives from LoadVideo or
CreateVideo is the very object it may build itself, decoded and encoded with PyAV; bad files
raise `comfy_core.video.UnreadableVideoError` (a ValueError) naming the file.
"""
from __future__ import annotations

from typing import Any, List, Optional, TypedDict

from comfy_core.video import (VideoCodec, VideoComponents, VideoContainer, VideoFromComponents, VideoFromFile,
                              VideoInput)

# ComfyUI's `ImageInput` ([B, H, W, C] in 0..1) and `MaskInput` ([B, H, W]) are `torch.Tensor`;
# they are looked up on first use (module and `Input` attributes), as importing ComfyUI's modules
# must not import torch at server start-up.
TENSOR_NAMES = {"ImageInput": "Tensor", "MaskInput": "Tensor"}


def tensor_alias(name: str) -> Any:
    """`torch.Tensor` for ImageInput / MaskInput (a module `__getattr__` helper)."""
    if name not in TENSOR_NAMES:
        raise AttributeError(name)
    import torch

    return torch.Tensor


def __getattr__(name: str) -> Any:
    try:
        return tensor_alias(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


class AudioInput(TypedDict):
    """ComfyUI's AUDIO: `waveform` `[B, C, S]` float, `sample_rate` int."""

    waveform: Any  # torch.Tensor
    sample_rate: int


class LatentInput(TypedDict, total=False):
    """ComfyUI's LATENT dict."""

    samples: Any  # torch.Tensor
    noise_mask: Optional[Any]
    batch_index: Optional[List[int]]
    type: Any


class _TensorNames(type):
    """`Input.Image` / `Input.Mask` resolve to `torch.Tensor` when first read."""

    def __getattr__(cls, name: str) -> Any:
        if name in ("Image", "Mask"):
            return tensor_alias(f"{name}Input")
        raise AttributeError(f"type object {cls.__name__!r} has no attribute {name!r}")


class Input(metaclass=_TensorNames):
    """ComfyUI's `comfy_api.latest.Input` namespace (`Image`, `Mask`: torch.Tensor)."""

    Audio = AudioInput
    Latent = LatentInput
    Video = VideoInput


class InputImpl:
    """ComfyUI's `comfy_api.latest.InputImpl` namespace."""

    VideoFromFile = VideoFromFile
    VideoFromComponents = VideoFromComponents


class Types:
    """ComfyUI's `comfy_api.latest.Types` namespace."""

    VideoCodec = VideoCodec
    VideoContainer = VideoContainer
    VideoComponents = VideoComponents


__all__ = ["ImageInput", "MaskInput", "AudioInput", "LatentInput", "VideoInput", "VideoFromFile",
           "VideoFromComponents", "VideoCodec", "VideoContainer", "VideoComponents", "Input", "InputImpl", "Types"]
