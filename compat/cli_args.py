"""`comfy.cli_args` for packs: `args` (the server's flags under ComfyUI's attribute names),
`LatentPreviewMethod` and `PerformanceFeature`.

`args` answers, at each attribute access, from the flags the host gave the session
(`compat.install(env, registry, comfy_args=...)`: the web host's web/comfy_args.py, every
ComfyUI 0.3.64 flag as the server runs with it), plus the session environment's folders
(`output_directory`, ...) and `preview_method` as ComfyUI's enum. A session whose host gave
no flags answers only those. Any other name is an AttributeError. This module never imports the
hosts: what they parsed comes in as a plain mapping.

`preview_method` is the live one: the environment's `preview_method`, which the built-in
samplers and `latent_preview.get_previewer` follow. Packs may set it (ComfyUI-Manager's preview
setting does `args.preview_method = LatentPreviewMethod.TAESD`), and previews change from the
next sampling step on, as in ComfyUI. Every other flag is read-only here: the server acted on
them when it started.
"""
from __future__ import annotations

import copy
import enum
from typing import Any

from compat.active import active

__all__ = ["LatentPreviewMethod", "PerformanceFeature", "args"]


class LatentPreviewMethod(str, enum.Enum):
    NoPreviews = "none"
    Auto = "auto"
    Latent2RGB = "latent2rgb"
    TAESD = "taesd"


class PerformanceFeature(str, enum.Enum):
    """ComfyUI's `--fast` options (comfy/cli_args.py PerformanceFeature); web/flags.py parses
    `--fast` into these, so a pack's `PerformanceFeature.X in args.fast` holds."""

    Fp16Accumulation = "fp16_accumulation"
    Fp8MatrixMultiplication = "fp8_matrix_mult"
    CublasOps = "cublas_ops"
    AutoTune = "autotune"


def _values() -> dict[str, Any]:
    session = active()
    env = session.env
    values = copy.deepcopy(dict(session.comfy_args or {}))  # packs may mutate what they read (lists, --fast)
    values.update({
        "output_directory": str(env.output_dir), "input_directory": str(env.input_dir),
        "temp_directory": str(env.temp_dir), "user_directory": str(env.user_dir),
        "preview_method": LatentPreviewMethod(getattr(env, "preview_method", None)
                                              or values.get("preview_method", LatentPreviewMethod.NoPreviews.value)),
    })
    return values


class _Args:
    """ComfyUI's parsed command line, read-only."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        values = _values()
        if name in values:
            return values[name]
        raise AttributeError(f"comfy.cli_args.args has no flag {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "preview_method":
            # LatentPreviewMethod(value) rejects anything but ComfyUI's four methods.
            active().env.preview_method = LatentPreviewMethod(value).value
            return
        raise AttributeError(f"comfy.cli_args.args.{name} is read-only here (only preview_method can be set "
                             "while the server runs); flags are given on the command line")

    def __dir__(self) -> list[str]:
        return sorted(_values())


args = _Args()
