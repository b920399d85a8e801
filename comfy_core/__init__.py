"""The diffusion runtime: model families, loaders, UNet/VAE/text encoders, patchers, samplers.

Usable as a library without the server. Never imports `graph` or `web`.

    from comfy_core import load_checkpoint
    model, clip, vae = load_checkpoint("models/checkpoints/v1-5-pruned-emaonly.safetensors")

`import comfy_core` itself stays cheap (no torch): public names are imported on first use.
"""
from __future__ import annotations

from typing import Any

__all__ = ["load_checkpoint"]


def __getattr__(name: str) -> Any:
    if name == "load_checkpoint":
        from comfy_core.loading import load_checkpoint

        return load_checkpoint
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
