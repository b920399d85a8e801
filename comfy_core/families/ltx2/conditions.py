"""What the LTX-2 DiT receives besides the noisy latent and the text context: ComfyUI's
`comfy/model_base.py` `LTXAV.extra_conds`, from the conditioning keys its nodes set; written here.

- `c_crossattn`: the text conditioning through the network's connectors
  (`LTXAVModel.preprocess_text_embeds`), which pass the connectors' own output (LTX-2.0's text
  encoder already ran them) unless the entry says `unprocessed_ltxav_embeds`;
- `attention_mask` (the text token mask) as it is; `frame_rate` (LTXVConditioning; default 25);
- `latent_shapes`: the shapes of the video and audio latents a sampler packed into one tensor
  (ComfyUI's `utils.pack_latents` convention, `[B, 1, sum of the flattened parts]`), passed on so
  the network unpacks its input and packs its output the same way;
- `denoise_mask` (`concat_mask` if given): with `latent_shapes` it is packed too and split into
  the video mask and `audio_denoise_mask`; `keyframe_idxs`, `guide_attention_entries`,
  `ref_audio` (LTXVReferenceAudio's `{"tokens": [B, R, 128]}`) and `generated_keyframes`
  (LTXVAddGeneratedKeyframes' record, whose slots the DiT marks) as they are.
- The region a denoise mask keeps stays the clean latent (ComfyUI's `LTXAV.scale_latent_inpaint`).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.ltx2.latent import unpack_latents
from comfy_core.models.model_conditions import ModelConditions

DEFAULT_FRAME_RATE = 25


class LTXAVConditions(ModelConditions):
    name = "ltxav"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        cross_attn = kwargs.get("cross_attn")
        network = getattr(model, "diffusion_model", None)
        if cross_attn is not None and hasattr(network, "preprocess_text_embeds"):
            dtype = getattr(model, "manual_cast_dtype", None) or model.get_dtype()
            device = kwargs.get("device") or cross_attn.device
            with torch.no_grad():
                unprocessed = bool(kwargs.get("unprocessed_ltxav_embeds", False))
                out["c_crossattn"] = network.preprocess_text_embeds(cross_attn.to(device=device, dtype=dtype),
                                                                    unprocessed=unprocessed)
        if kwargs.get("attention_mask") is not None:
            out["attention_mask"] = kwargs["attention_mask"]
        out["frame_rate"] = kwargs.get("frame_rate", DEFAULT_FRAME_RATE)
        shapes = kwargs.get("latent_shapes")
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        if mask is not None and shapes is not None:
            parts = unpack_latents(mask, shapes)
            mask = parts[0]
            if len(parts) > 1:
                out["audio_denoise_mask"] = parts[1]
        if mask is not None:
            out["denoise_mask"] = mask
        if shapes is not None:
            out["latent_shapes"] = shapes
        for key in ("keyframe_idxs", "guide_attention_entries", "ref_audio", "generated_keyframes"):
            if kwargs.get(key) is not None:
                out[key] = kwargs[key]
        return out

    @property
    def scale_latent_inpaint(self) -> Any:
        return lambda model, sigma, noise, latent_image: latent_image
