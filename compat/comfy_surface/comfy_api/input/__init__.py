"""ComfyUI's `comfy_api.input` (kept there for older packs): the input types (compat/v3/video.py)."""
from compat.v3.video import AudioInput, LatentInput, VideoInput

__all__ = ["ImageInput", "AudioInput", "MaskInput", "LatentInput", "VideoInput"]


def __getattr__(name: str):
    """ImageInput / MaskInput: torch.Tensor, looked up on first use (no torch at start-up)."""
    from compat.v3.video import tensor_alias

    try:
        return tensor_alias(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
