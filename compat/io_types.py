"""`comfy.comfy_types` for packs: the `IO` type enum and the V1 typing helpers.

`IO` follows ComfyUI's comfy/comfy_types/node_typing.py semantics (read, not copied): a `str`
enum whose `__ne__` says two types are compatible (so `!=` is False) when either is `*`, or when
one comma-separated set of type names contains the other. The engine's type check starts with
`not (received != expected)` (graph/types.py), so an `IO` member decides for itself.
"""
from __future__ import annotations

from abc import ABC
from enum import Enum
from typing import Any, Literal, TypedDict


class IO(str, Enum):
    """Wire type names; `IO.ANY` matches everything, `IO.NUMBER` is `FLOAT,INT`."""

    STRING = "STRING"
    IMAGE = "IMAGE"
    MASK = "MASK"
    LATENT = "LATENT"
    BOOLEAN = "BOOLEAN"
    INT = "INT"
    FLOAT = "FLOAT"
    COMBO = "COMBO"
    CONDITIONING = "CONDITIONING"
    SAMPLER = "SAMPLER"
    SIGMAS = "SIGMAS"
    GUIDER = "GUIDER"
    NOISE = "NOISE"
    CLIP = "CLIP"
    CONTROL_NET = "CONTROL_NET"
    VAE = "VAE"
    MODEL = "MODEL"
    LORA_MODEL = "LORA_MODEL"
    LOSS_MAP = "LOSS_MAP"
    CLIP_VISION = "CLIP_VISION"
    CLIP_VISION_OUTPUT = "CLIP_VISION_OUTPUT"
    STYLE_MODEL = "STYLE_MODEL"
    GLIGEN = "GLIGEN"
    UPSCALE_MODEL = "UPSCALE_MODEL"
    AUDIO = "AUDIO"
    WEBCAM = "WEBCAM"
    POINT = "POINT"
    FACE_ANALYSIS = "FACE_ANALYSIS"
    BBOX = "BBOX"
    SEGS = "SEGS"
    VIDEO = "VIDEO"
    ANY = "*"
    NUMBER = "FLOAT,INT"
    PRIMITIVE = "STRING,FLOAT,INT,BOOLEAN"

    def __str__(self) -> str:
        return self.value

    def __ne__(self, value: object) -> bool:
        return not types_compatible(str(self.value), value)

    def __eq__(self, value: object) -> bool:  # keep str equality (Enum would compare identity)
        return str.__eq__(self, value)

    __hash__ = str.__hash__


def types_compatible(a: str, b: object) -> bool:
    """ComfyUI's IO rule: `*` on either side, or one comma-set of names containing the other."""
    if a == "*" or b == "*":
        return True
    if not isinstance(b, str):
        return False
    left, right = frozenset(a.split(",")), frozenset(str(b).split(","))
    return left <= right or right <= left


class InputTypeOptions(TypedDict, total=False):
    """Options of one V1 input (`INPUT_TYPES()[section][name][1]`); only `lazy`, `rawLink`,
    `min`, `max` and combo lists matter to the engine, the rest is for the editor."""

    default: Any
    defaultInput: bool
    forceInput: bool
    lazy: bool
    rawLink: bool
    tooltip: str
    min: float
    max: float
    step: float
    round: float | bool
    display: Literal["number", "slider"]
    control_after_generate: bool
    multiline: bool
    placeholder: str
    dynamicPrompts: bool
    label_on: str
    label_off: str
    image_upload: bool
    image_folder: Literal["input", "output", "temp"]
    remote: dict
    options: list
    multi_select: dict
    socketless: bool
    widgetType: str


class HiddenInputTypeDict(TypedDict, total=False):
    node_id: Literal["UNIQUE_ID"]
    unique_id: Literal["UNIQUE_ID"]
    prompt: Literal["PROMPT"]
    extra_pnginfo: Literal["EXTRA_PNGINFO"]
    dynprompt: Literal["DYNPROMPT"]


class InputTypeDict(TypedDict, total=False):
    """What `INPUT_TYPES()` returns."""

    required: dict[str, tuple]
    optional: dict[str, tuple]
    hidden: HiddenInputTypeDict


class ComfyNodeABC(ABC):
    """Base class V1 nodes may inherit for type hints; it adds no behaviour (as in ComfyUI)."""

    DESCRIPTION: str
    CATEGORY: str
    EXPERIMENTAL: bool
    DEPRECATED: bool
    API_NODE: bool | None
    RETURN_TYPES: tuple
    RETURN_NAMES: tuple
    OUTPUT_TOOLTIPS: tuple
    FUNCTION: str
    OUTPUT_NODE: bool
    INPUT_IS_LIST: bool
    OUTPUT_IS_LIST: tuple


class CheckLazyMixin:
    """A default `check_lazy_status`: ask for every lazy input that is still None (ComfyUI's)."""

    def check_lazy_status(self, **kwargs: Any) -> list[str]:
        return [name for name, value in kwargs.items() if value is None]


class FileLocator(TypedDict):
    """Where a file lives: `{"filename", "subfolder", "type"}` (UI outputs)."""

    filename: str
    subfolder: str
    type: Literal["input", "output", "temp"]
