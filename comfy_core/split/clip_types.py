"""The `type` choices of ComfyUI's CLIPLoader, DualCLIPLoader and TripleCLIPLoader, and which of
them we can load.

ComfyUI 0.3.64 (`nodes.py` CLIPLoader / DualCLIPLoader, `comfy/sd.py: load_text_encoder_state_dicts`)
builds the text encoder from the files' weights and uses `type` to pick among the model families
that share an encoder. Which types load here is the families' word: an encoder set lists the
types that select it (`EncoderSetSpec.clip_types`: SD1/SD2/the SDXL refiner's single towers for
`stable_diffusion`, `sdxl`, `sd3` (any of CLIP-L, CLIP-G, T5-XXL), `flux` (CLIP-L + T5-XXL), `chroma` (T5-XXL),
`wan` (umT5-XXL, comfy_core/text_encoders/umt5.py, with the file's own SentencePiece tokenizer),
`lumina2` (Z-Image's Qwen3-4B, comfy_core/families/zimage/clip.py), `qwen_image` (Qwen2.5-VL-7B,
comfy_core/families/qwen_image/clip.py)).
Every other type names a family whose text encoders (Llama, Gemma, Qwen, ...) and models this
engine does not have: asking for one is an `UnsupportedClipTypeError` naming the type and what it
needs, never a half-built CLIP.
"""
from __future__ import annotations

from typing import Any, Sequence

from comfy_core.text_encoders.errors import TextEncoderError

# Today's ComfyUI's lists, in its order (object_info): 0.3.64's types first, then those added since.
CLIP_LOADER_TYPES: tuple[str, ...] = (
    "stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv", "pixart", "cosmos", "lumina2",
    "wan", "hidream", "chroma", "ace", "omnigen2", "qwen_image", "hunyuan_image", "flux2", "ovis", "longcat_image",
    "cogvideox", "lens", "pixeldit", "ideogram4", "boogu", "krea2", "joyimage", "mage", "minimax", "flux3", "fibo2")
DUAL_CLIP_LOADER_TYPES: tuple[str, ...] = ("sdxl", "sd3", "flux", "hunyuan_video", "hidream", "hunyuan_image",
                                           "hunyuan_video_15", "kandinsky5", "kandinsky5_image", "ltxv", "newbie",
                                           "ace")
TRIPLE_CLIP_LOADER_TYPES: tuple[str, ...] = ("sd3",)  # TripleCLIPLoader has no type input: SD3's set

# type -> what ComfyUI builds for it (its loaders' recipes), for the error message.
NEEDS: dict[str, str] = {
    "stable_cascade": "the Stable Cascade family (its CLIP-G text encoder and Stage B/C models)",
    "mochi": "the Mochi video family (a T5-XXL text encoder)",
    "pixart": "the PixArt family (a T5-XXL text encoder)",
    "cosmos": "the Cosmos family (the old T5-XXL text encoder)",
    "hunyuan_image": "the HunyuanImage family (Qwen2.5-VL 7B and ByT5-small text encoders)",
}


class UnsupportedClipTypeError(TextEncoderError):
    """A CLIPLoader / DualCLIPLoader `type` whose model family this engine does not have."""

    def __init__(self, clip_type: str, supported: tuple[str, ...] = (),
                 known: tuple[str, ...] = CLIP_LOADER_TYPES + DUAL_CLIP_LOADER_TYPES) -> None:
        self.clip_type = clip_type
        if clip_type in NEEDS:
            detail = f"it needs {NEEDS[clip_type]}, which this engine does not have yet"
        else:
            detail = f"it is not one of ComfyUI's types {sorted(set(known))}"
        super().__init__(f"text encoder type {clip_type!r} is not supported: {detail}; supported: "
                         f"{', '.join(repr(t) for t in supported)}")


class ClipFilesError(TextEncoderError):
    """Text-encoder files that do not form an encoder set of the type asked for."""


def supported_types(sets: Sequence[Any]) -> tuple[str, ...]:
    """The loader types the encoder sets `sets` answer, in their order."""
    out: list[str] = []
    for spec in sets:
        out.extend(t for t in spec.clip_types if t not in out)
    return tuple(out)


def sets_for_type(clip_type: str, sets: Sequence[Any]) -> list[Any]:
    """The encoder sets a loader `type` selects; refuses a type none answers (see the module docstring)."""
    chosen = [spec for spec in sets if clip_type in spec.clip_types]
    if not chosen:
        raise UnsupportedClipTypeError(clip_type, supported_types(sets))
    return chosen
