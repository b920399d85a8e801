"""ComfyUI's `comfy_extras.nodes_lt.LTXVAddGuide` class methods that packs call to place their own
guides (Fill-Nodes' FL_LTXVMaskedICLoRAGuide, KJNodes' LTXV guide nodes), over the engine's LTXV
guide code (nodes/ltxv_nodes.py: `keyframe_count`, `_add_keyframe_index`, `_dilate`,
`attach_guide`). Behaviour of today's ComfyUI `comfy_extras/nodes_lt.py` (read there, written here):

- `get_latent_index(cond, latent_length, guide_length, frame_idx, scale_factors, latent_shape=None)`
  -> `(frame_idx, latent_idx)`: a negative `frame_idx` counts back from the end of the latent's
  frames that are not guides (`get_keyframe_idxs`); a multi-frame guide's index is snapped down
  to `8k + 1` (time scale `k`) unless 0; `latent_idx = ceil(frame_idx / time_scale)`.
- `add_keyframe_index(cond, frame_idx, guiding_latent, scale_factors, latent_downscale_factor=1,
  causal_fix=None)` -> `cond` with `keyframe_idxs` extended by the guide tokens' pixel positions
  (start, end; shifted by `frame_idx`; a dilated guide's spatial ends widened);
  `causal_fix` None means `frame_idx == 0 or one latent frame`.
- `append_keyframe(positive, negative, frame_idx, latent_image, noise_mask, guiding_latent,
  strength, scale_factors, guide_mask=None, in_channels=128, latent_downscale_factor=1,
  causal_fix=None)` -> `(positive, negative, latent_image, noise_mask)`: both conds indexed, the
  guide appended after the latent's frames, the noise mask extended by `max(0, 1 - strength)`
  (or `guide_mask - strength`, the noise mask and a 1-wide guide mask expanded to the larger
  grid). `ValueError` when either latent has not `in_channels` channels. No attention entry
  (`attach_guide_latent` adds it).
- `encode(vae, latent_width, latent_height, images, scale_factors, latent_downscale_factor=1)` ->
  `(pixels, guide_latent)`: the images cut to `(n - 1) // t * t + 1` frames (`scale_factors` is
  the VAE's `(time, height, width)`), resized (centre crop, bilinear) to the latent's pixel size
  over `latent_downscale_factor`, RGB kept and encoded by the VAE: the node's own
  `nodes/ltxv_nodes.py: encode_guide`.
- `dilate_latent(guide_latent, latent_downscale_factor)`, `get_reference_downscale_factor(params)`
  and `attach_guide_latent(positive, negative, latent_image, noise_mask, guide_latent, frame_idx,
  strength, scale_factors, latent_downscale_factor=1, causal_fix=None, attention_mask=None)`
  (dilate, `append_keyframe`, attention entry): the engine's `_dilate`, `_downscale_factor`,
  `attach_guide`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch
# torch is imported where it runs: `comfy_extras.nodes_lt` installs these methods at import.


def get_latent_index(cls: Any, cond: list, latent_length: int, guide_length: int, frame_idx: int,
                     scale_factors: Sequence[int], latent_shape: Any = None) -> tuple[int, int]:
    from nodes.ltxv_nodes import keyframe_count

    ratio = int(scale_factors[0])
    _, guides = keyframe_count(cond, latent_shape)
    count = latent_length - guides
    if frame_idx < 0:
        frame_idx = max((count - 1) * ratio + 1 + frame_idx, 0)
    if guide_length > 1 and frame_idx != 0:
        frame_idx = (frame_idx - 1) // ratio * ratio + 1  # frame_idx - 1 a multiple of the time scale
    return frame_idx, (frame_idx + ratio - 1) // ratio


def add_keyframe_index(cls: Any, cond: list, frame_idx: int, guiding_latent: torch.Tensor,
                       scale_factors: Sequence[int], latent_downscale_factor: int = 1,
                       causal_fix: bool | None = None) -> list:
    from nodes.ltxv_nodes import _add_keyframe_index

    if causal_fix is None:
        causal_fix = frame_idx == 0 or guiding_latent.shape[2] == 1
    return _add_keyframe_index(cond, frame_idx, guiding_latent, tuple(int(s) for s in scale_factors),
                               int(latent_downscale_factor), bool(causal_fix))


def append_keyframe(cls: Any, positive: list, negative: list, frame_idx: int, latent_image: torch.Tensor,
                    noise_mask: torch.Tensor, guiding_latent: torch.Tensor, strength: float,
                    scale_factors: Sequence[int], guide_mask: torch.Tensor | None = None, in_channels: int = 128,
                    latent_downscale_factor: int = 1,
                    causal_fix: bool | None = None) -> tuple[list, list, torch.Tensor, torch.Tensor]:
    if latent_image.shape[1] != in_channels or guiding_latent.shape[1] != in_channels:
        raise ValueError(f"LTXVAddGuide.append_keyframe: the latent ({latent_image.shape[1]} channels) and the "
                         f"guide ({guiding_latent.shape[1]}) must both have {in_channels} channels (adding a "
                         "guide to a combined audio/video latent is not supported)")
    from nodes.ltxv_nodes import append_guide_frames

    positive = cls.add_keyframe_index(positive, frame_idx, guiding_latent, scale_factors, latent_downscale_factor,
                                      causal_fix=causal_fix)
    negative = cls.add_keyframe_index(negative, frame_idx, guiding_latent, scale_factors, latent_downscale_factor,
                                      causal_fix=causal_fix)
    latent_image, noise_mask = append_guide_frames(latent_image, noise_mask, guiding_latent, guide_mask, strength)
    return positive, negative, latent_image, noise_mask


def encode(cls: Any, vae: Any, latent_width: int, latent_height: int, images: torch.Tensor,
           scale_factors: Sequence[int], latent_downscale_factor: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    from nodes.ltxv_nodes import encode_guide

    return encode_guide(vae, int(latent_width), int(latent_height), images, tuple(int(s) for s in scale_factors),
                        int(latent_downscale_factor))


def dilate_latent(cls: Any, guide_latent: torch.Tensor,
                  latent_downscale_factor: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    from nodes.ltxv_nodes import _dilate

    return _dilate(guide_latent, int(latent_downscale_factor))


def get_reference_downscale_factor(cls: Any, iclora_parameters: Any) -> int:
    from nodes.ltxv_nodes import _downscale_factor

    return _downscale_factor(iclora_parameters)


def attach_guide_latent(cls: Any, positive: list, negative: list, latent_image: torch.Tensor,
                        noise_mask: torch.Tensor, guide_latent: torch.Tensor, frame_idx: int, strength: float,
                        scale_factors: Sequence[int], latent_downscale_factor: int = 1,
                        causal_fix: bool | None = None,
                        attention_mask: torch.Tensor | None = None) -> tuple[list, list, torch.Tensor, torch.Tensor]:
    from nodes.ltxv_nodes import attach_guide

    return attach_guide(positive, negative, latent_image, noise_mask, guide_latent, frame_idx, strength,
                        tuple(int(s) for s in scale_factors), int(latent_downscale_factor), causal_fix, attention_mask)


CLASS_METHODS = {fn.__name__: fn for fn in (encode, get_latent_index, add_keyframe_index, append_keyframe, dilate_latent,
                                            get_reference_downscale_factor, attach_guide_latent)}


def install(add_guide: type) -> type:
    """Give the `LTXVAddGuide` facade class these class methods (a pack's subclass inherits them,
    and its override of `add_keyframe_index` is what `append_keyframe` calls)."""
    for name, fn in CLASS_METHODS.items():
        setattr(add_guide, name, classmethod(fn))
    return add_guide


__all__ = ["CLASS_METHODS", "install", *CLASS_METHODS]
