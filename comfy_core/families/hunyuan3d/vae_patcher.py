"""`ShapeVaePatcher`: the VAE wire object over Hunyuan3D's ShapeVAE decoder.

It answers as ComfyUI's `comfy.sd.VAE` does for this VAE (`comfy/sd.py`, the Hunyuan 3D branch):
`decode(samples [B, 64, N], vae_options={"num_chunks", "octree_resolution"})` returns the
occupancy grid through the VAE's generic image output rule, `clamp((logits + 1) / 2, 0, 1)`
(that branch keeps the default `process_output`), with the decoder's (x, y, z) grid moved as
ComfyUI moves it (its decoder swaps the last two axes, its `decode` moves axis 1 last): the
result is indexed `[B, z, y, x]`, which the meshing nodes read back as (x, y, z) vertices.
`latent_channels` 64, `latent_dim` 1; there is no encoder. A ShapeVAE state dict alone (VAELoader,
ComfyUI's `comfy.sd.VAE(sd=...)`: its `geo_decoder.cross_attn_decoder.ln_1.bias`) builds one too
(registered in `STATE_DICT_KINDS` when this module is imported: the family package imports it).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.hunyuan3d.shape_vae import ShapeVAE, ShapeVAEConfig, ShapeVAEConfigError, is_shape_vae
from comfy_core.patching.vae import STATE_DICT_KINDS, VaeConstructionError, VaePatcher


class ShapeVaeInputError(ValueError):
    """A latent or option the ShapeVAE cannot decode."""


class ShapeVaePatcher(VaePatcher):
    """See the module docstring."""

    def __init__(self, model: Any = None, load_device: Any = None, offload_device: Any = None, *,
                 sd: Mapping[str, torch.Tensor] | None = None, device: Any = None, config: Any = None,
                 dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None,
                 cache_patched_weights: bool = True) -> None:
        if config is not None:
            raise VaeConstructionError("comfy.sd.VAE(config=...) with a ShapeVAE state dict: its architecture is "
                                       "read from the weights")
        if isinstance(model, Mapping):
            model, sd = None, model
        if model is None:
            if sd is None:
                raise VaeConstructionError("ShapeVaePatcher: give the ShapeVAE or its state dict (sd=...)")
            state = {k: v for k, v in sd.items() if not k.startswith("encoder.")}  # the unused encoder half
            try:
                model = ShapeVAE(ShapeVAEConfig.detect_from_weights(state))
            except ShapeVAEConfigError as exc:
                raise VaeConstructionError(str(exc)) from None
            model.load_state_dict({k: v.to(dtype or torch.float32) for k, v in state.items()}, strict=True)
            model.eval()
        if not isinstance(model, ShapeVAE):
            raise TypeError(f"ShapeVaePatcher: expected a ShapeVAE, got {type(model).__name__}")
        VaePatcher.__init__(self, model, load_device if load_device is not None else device, offload_device,
                            cache_patched_weights=cache_patched_weights)

    @property
    def latent_channels(self) -> int:
        return int(self.model.config.embed_dim)

    @property
    def latent_dim(self) -> int:
        return 1

    @property
    def downscale_ratio(self) -> int:  # type: ignore[override]
        return 1

    @property
    def upscale_ratio(self) -> int:  # type: ignore[override]
        return 1

    def spacial_compression_decode(self) -> int:
        return 1

    def spacial_compression_encode(self) -> int:
        return 1

    def memory_used_decode(self, shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """ComfyUI's estimate: batch x tokens x width x dtype size x (1 + 2 x 16)."""
        size = torch.empty((), dtype=dtype).element_size()
        return int(shape[0] * shape[-1] * self.model.config.width * size * (1 + 2 * 16))

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        raise ShapeVaeInputError("Hunyuan3D's ShapeVAE has no encoder here: it only decodes shape latents")

    def decode(self, latent: torch.Tensor,  # type: ignore[override]
               vae_options: Mapping[str, Any] | None = None) -> torch.Tensor:
        options = dict(vae_options or {})
        channels = self.latent_channels
        if latent.ndim != 3 or latent.shape[1] != channels:
            raise ShapeVaeInputError(f"Hunyuan3D ShapeVAE decode: expected a latent [B, {channels}, N], "
                                     f"got {tuple(latent.shape)}")
        unknown = set(options) - {"num_chunks", "octree_resolution", "bounds"}
        if unknown:
            raise ShapeVaeInputError(f"Hunyuan3D ShapeVAE decode: unknown options {sorted(unknown)}")
        with torch.no_grad(), self.applied() as vae:
            grid = ShapeVAE.decode(vae, latent.to(self.load_device), **options)  # [B, x, y, z]
        occupancy = torch.clamp((grid + 1.0) / 2.0, 0.0, 1.0)
        return occupancy.permute(0, 3, 2, 1).to(self.offload_device)  # [B, z, y, x]

    def decode_tiled(self, samples: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return self.decode(samples)


STATE_DICT_KINDS.append((is_shape_vae, ShapeVaePatcher))
