"""The `type` choices of ComfyUI's CLIPLoader and DualCLIPLoader, and which of them we can load.

ComfyUI 0.3.64 (`nodes.py` CLIPLoader / DualCLIPLoader, `comfy/sd.py: load_text_encoder_state_dicts`)
builds the text encoder from the files' weights and uses `type` to pick among the model families
that share an encoder. The CLIP text towers of the SD1.x, SD2.x and SDXL families are ours
(CLIP-L, OpenCLIP-H, OpenCLIP-bigG); so `stable_diffusion` (one file: CLIP-L -> SD1, OpenCLIP-H ->
SD2, bigG -> the SDXL refiner's encoder, as ComfyUI) and `sdxl` (CLIP-L + bigG) load. Every other
type names a family whose text encoders (T5, UMT5, Llama, Gemma, Qwen, ...) and models this
engine does not have: asking for one is an `UnsupportedClipTypeError` naming the type and what it
needs, never a half-built CLIP.
"""
from __future__ import annotations

from comfy_core.text_encoders.errors import TextEncoderError

# ComfyUI's lists, in its order (object_info).
CLIP_LOADER_TYPES: tuple[str, ...] = (
    "stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv", "pixart", "cosmos", "lumina2",
    "wan", "hidream", "chroma", "ace", "omnigen2", "qwen_image", "hunyuan_image")
DUAL_CLIP_LOADER_TYPES: tuple[str, ...] = ("sdxl", "sd3", "flux", "hunyuan_video", "hidream", "hunyuan_image")

# The types whose encoders we build from CLIP-L / OpenCLIP-H / OpenCLIP-bigG files.
SUPPORTED_TYPES: frozenset[str] = frozenset({"stable_diffusion", "sdxl"})

# type -> what ComfyUI builds for it (its loaders' recipes), for the error message.
NEEDS: dict[str, str] = {
    "stable_cascade": "the Stable Cascade family (its CLIP-G text encoder and Stage B/C models)",
    "sd3": "the SD3 family (T5-XXL with CLIP-L / CLIP-G, and the MMDiT model)",
    "stable_audio": "the Stable Audio family (a T5-base text encoder)",
    "mochi": "the Mochi video family (a T5-XXL text encoder)",
    "ltxv": "the LTX-Video family (a T5-XXL text encoder)",
    "pixart": "the PixArt family (a T5-XXL text encoder)",
    "cosmos": "the Cosmos family (the old T5-XXL text encoder)",
    "lumina2": "the Lumina 2 family (a Gemma 2 2B text encoder)",
    "wan": "the Wan video family (a UMT5-XXL text encoder)",
    "hidream": "the HiDream family (Llama 3.1 and/or T5-XXL, CLIP-L, CLIP-G text encoders)",
    "chroma": "the Chroma family (a T5-XXL text encoder)",
    "ace": "the ACE-Step audio family (a T5-base text encoder)",
    "omnigen2": "the OmniGen2 family (a Qwen2.5-VL 3B text encoder)",
    "qwen_image": "the Qwen-Image family (a Qwen2.5-VL 7B text encoder)",
    "hunyuan_image": "the HunyuanImage family (Qwen2.5-VL 7B and ByT5-small text encoders)",
    "flux": "the Flux family (CLIP-L with T5-XXL, and the Flux DiT)",
    "hunyuan_video": "the HunyuanVideo family (CLIP-L with a Llama text encoder)",
}


class UnsupportedClipTypeError(TextEncoderError):
    """A CLIPLoader / DualCLIPLoader `type` whose model family this engine does not have."""

    def __init__(self, clip_type: str, known: tuple[str, ...] = CLIP_LOADER_TYPES + DUAL_CLIP_LOADER_TYPES) -> None:
        self.clip_type = clip_type
        if clip_type in NEEDS:
            detail = f"it needs {NEEDS[clip_type]}, which this engine does not have yet"
        else:
            detail = f"it is not one of ComfyUI's types {sorted(set(known))}"
        super().__init__(f"text encoder type {clip_type!r} is not supported: {detail}; supported: "
                         "'stable_diffusion' (one CLIP-L, OpenCLIP-H or OpenCLIP-bigG file: SD1.x, SD2.x, SDXL "
                         "refiner) and 'sdxl' (CLIP-L + OpenCLIP-bigG)")


class ClipFilesError(TextEncoderError):
    """Text-encoder files that do not form an encoder set of the type asked for."""


def check_type(clip_type: str) -> None:
    """Refuse a type we cannot load (see the module docstring)."""
    if clip_type not in SUPPORTED_TYPES:
        raise UnsupportedClipTypeError(clip_type)
