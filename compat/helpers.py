"""`node_helpers` for packs (ComfyUI's node_helpers.py behaviour).

torch is imported inside `string_to_torch_dtype`: packs import `node_helpers` at start-up,
before the server answers /object_info, and start-up stays torch-free (torch loads in the
background once the server listens, web/warmup.py).
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")


def conditioning_set_values(conditioning: list, values: dict | None = None, append: bool = False) -> list:
    """A new CONDITIONING whose entries' option dicts carry `values` (with `append`, list values
    are added to the existing lists); the input is never mutated (cached outputs stay valid)."""
    values = values or {}
    out = []
    for entry in conditioning:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], dict):
            raise TypeError(f"conditioning_set_values: expected CONDITIONING entries [tensor, dict], got {entry!r}")
        options = dict(entry[1])
        for key, value in values.items():
            if append and key in options:
                options[key] = list(options[key]) + list(value)
            else:
                options[key] = value
        out.append([entry[0], options])
    return out


def pillow(fn: Callable[[Any], T], arg: Any) -> T:
    """`fn(arg)`, retried once with Pillow's truncated-image loading when the file is damaged."""
    from PIL import ImageFile

    try:
        return fn(arg)
    except (OSError, UnicodeDecodeError, ValueError):
        previous = ImageFile.LOAD_TRUNCATED_IMAGES
        ImageFile.LOAD_TRUNCATED_IMAGES = True
        try:
            return fn(arg)
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = previous


_HASHERS = {"md5": hashlib.md5, "sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}


def hasher() -> Callable[..., Any]:
    """The hash constructor of the server's `--default-hashing-function` (sha256 unless set)."""
    from compat.cli_args import args

    name = getattr(args, "default_hashing_function", "sha256")
    if name not in _HASHERS:
        raise ValueError(f"hasher: --default-hashing-function must be one of {sorted(_HASHERS)}, got {name!r}")
    return _HASHERS[name]


def image_alpha_fix(destination: torch.Tensor, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Make two IMAGE tensors' channel counts compatible before compositing (ComfyUI's
    node_helpers.image_alpha_fix): a source with more channels is cut to the destination's;
    a destination with more channels gets one more channel, set to 1.0 (ComfyUI pads the
    destination, not the source; kept as it is, so results match)."""
    import torch

    if destination.shape[-1] < source.shape[-1]:
        source = source[..., :destination.shape[-1]]
    elif destination.shape[-1] > source.shape[-1]:
        destination = torch.nn.functional.pad(destination, (0, 1))
        destination[..., -1] = 1.0
    return destination, source


def _dtypes() -> dict[str, torch.dtype | None]:
    """ComfyUI's names -> torch dtypes (None where this torch build lacks the fp8 type)."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp8_e4m3fn": getattr(torch, "float8_e4m3fn", None), "fp8_e5m2": getattr(torch, "float8_e5m2", None)}


def string_to_torch_dtype(string: str) -> torch.dtype:
    dtypes = _dtypes()
    dtype = dtypes.get(string)
    if dtype is None:
        raise ValueError(f"string_to_torch_dtype: expected one of {sorted(k for k, v in dtypes.items() if v)}, "
                         f"got {string!r}")
    return dtype
