"""ComfyUI's `comfy.taesd.taehv` (madebyollin's TAEHV, the tiny video autoencoder ComfyUI previews
video latents with): this engine does not implement it, so its classes are importable, subclassable
stand-ins (compat/unsupported_networks.py) and building one raises `UnsupportedNetworkError`. A
pack that imports `TAEHV` at start-up (CRT-Nodes' LTX sampler) loads; its own TAEHV previews are
then off, and the sampler's previews are the engine's (latent2rgb / TAESD)."""
from __future__ import annotations

from compat.unsupported_networks import UnsupportedNetwork


class _TAEHV(UnsupportedNetwork):
    family = "TAEHV (tiny video autoencoder)"


class TAEHV(_TAEHV):
    """The tiny video autoencoder (not implemented here)."""


class MemBlock(_TAEHV):
    """TAEHV's block with the previous frame's memory (not implemented here)."""


class TPool(_TAEHV):
    """TAEHV's temporal downsampling (not implemented here)."""


class TGrow(_TAEHV):
    """TAEHV's temporal upsampling (not implemented here)."""


__all__ = ["MemBlock", "TAEHV", "TGrow", "TPool"]
