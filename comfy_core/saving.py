"""Patchers -> checkpoint files in ComfyUI's layouts, with every patch applied (materialized).

The save side of `comfy_core.loading`: `checkpoint/save.py` writes the file format, this module
decides what goes in it, after ComfyUI 0.3.64's `comfy/sd.py: save_checkpoint`,
`comfy/model_base.py: state_dict_for_saving` and `comfy/supported_models.py:
process_*_state_dict_for_saving`:

- the UNet under the family's prefix (`model.diffusion_model.*`), the VAE under
  `first_stage_model.*`, the text encoders where each family keeps them (`EncoderOptions.save_prefix`:
  SD1's CLIP-L in transformers' layout under `cond_stage_model.transformer.text_model.*`, SD2's
  and SDXL's OpenCLIP towers in open_clip's layout, ...);
- marker tensors: `v_pred` (and `ztsnr`) for v-prediction models, `edm_vpred.sigma_max/min`
  for a continuous-EDM v schedule;
- metadata: `modelspec.predict_key`, and for the SDXL families Stability's ModelSpec block
  (`modelspec.architecture`, `.sai_model_spec`, `.implementation`, `.title`).

The split files: `text_encoder_tensors` gives one state dict per encoder, in transformers'
layout without the slot prefix (what ComfyUI's CLIPSave writes), `vae_tensors` the VAE's own
keys. Patched tensors exist only while a patcher is applied, so the tensor builders are context
managers; the tensors they yield are valid inside the block.
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from comfy_core.checkpoint.save import write_safetensors
from comfy_core.models.model_sampling import ContinuousEDMModelSampling
from comfy_core.text_encoders.config import LAYOUT_HF
from comfy_core.text_encoders.convert import to_checkpoint_layout

UNET_KEY_PREFIX = "diffusion_model."
DEFAULT_UNET_PREFIX = "model.diffusion_model."
DEFAULT_VAE_PREFIX = "first_stage_model."
# Inside each encoder slot, the transformers model sits under `transformer.` (our module names).
_ENCODER_MODULE = "transformer."
_POSITION_IDS = "text_model.embeddings.position_ids"


_PREDICT_KEYS = {"eps": "epsilon", "v": "v"}


class SaveLayoutError(ValueError):
    """A component has no checkpoint layout to save it in (an encoder set not listed above)."""


# --- tensors ---

def _family(model: Any) -> Any:
    return getattr(model.model, "family", None)


def unet_state(module: torch.nn.Module, family: Any) -> dict[str, torch.Tensor]:
    """The UNet's tensors of an (applied) DiffusionModel under the family's checkpoint prefix."""
    prefix = getattr(family, "unet_prefix", DEFAULT_UNET_PREFIX)
    return {prefix + k[len(UNET_KEY_PREFIX):]: t for k, t in module.state_dict().items()
            if k.startswith(UNET_KEY_PREFIX)}


def encoder_set_state(encoders: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The text encoders of an (applied) TextEncoderSet in their family's checkpoint layout."""
    layouts = encoders.spec.encoders
    if any(option.save_prefix is None for option in layouts):
        raise SaveLayoutError(f"no checkpoint layout is known for the {encoders.spec.name!r} text encoders "
                              "(their EncoderOptions.save_prefix)")
    out: dict[str, torch.Tensor] = {}
    for layout in layouts:
        encoder = encoders.encoder(layout.slot)
        config = dataclasses.replace(encoder.config, prefix=layout.save_prefix)
        if config.layout == LAYOUT_HF:
            config = dataclasses.replace(config, has_projection=False)
        transformer = encoder.transformer
        out.update(to_checkpoint_layout(config, transformer.state_dict()))
        if layout.save_position_ids:
            out[layout.save_prefix + _POSITION_IDS[len("text_model."):]] = transformer.text_model.embeddings.position_ids
    return out


def vae_state(module: torch.nn.Module, family: Any = None) -> dict[str, torch.Tensor]:
    prefix = getattr(family, "vae_prefix", DEFAULT_VAE_PREFIX)
    return {prefix + k: t for k, t in module.state_dict().items()}


@contextlib.contextmanager
def checkpoint_tensors(model: Any, clip: Any = None, vae: Any = None) -> Iterator[dict[str, torch.Tensor]]:
    """The single-file checkpoint's tensors of `model` (a ModelPatcher), `clip` and `vae` (either
    may be None), patches applied, markers included (ComfyUI's `state_dict_for_saving`)."""
    family = _family(model)
    with contextlib.ExitStack() as stack:
        state = unet_state(stack.enter_context(model.applied()), family)
        state.update(marker_tensors(model))
        if clip is not None:
            state.update(encoder_set_state(stack.enter_context(clip.patcher.applied())))
        if vae is not None:
            state.update(vae_state(stack.enter_context(vae.applied()), family))
        yield state


@contextlib.contextmanager
def text_encoder_tensors(clip: Any) -> Iterator[dict[str, dict[str, torch.Tensor]]]:
    """Slot -> that encoder's tensors as ComfyUI's CLIPSave writes them: its transformers state
    dict (`text_model.*`, `text_projection.weight`) without the slot prefix, patches applied."""
    with clip.patcher.applied() as encoders:
        files = {}
        for slot, encoder in encoders.named_children():
            state = encoder.transformer.state_dict()
            state.pop(_POSITION_IDS, None)
            files[slot] = state
        yield files


@contextlib.contextmanager
def vae_tensors(vae: Any) -> Iterator[dict[str, torch.Tensor]]:
    """The VAE's tensors under its own names (`encoder.*`, `decoder.*`, ...), patches applied."""
    with vae.applied() as module:
        yield dict(module.state_dict())


def marker_tensors(model: Any) -> dict[str, torch.Tensor]:
    """ComfyUI's extra keys: `v_pred` (+ `ztsnr`) for a v-prediction model, `edm_vpred.*` for a
    continuous-EDM v-prediction schedule set on the patcher."""
    base = model.model.model_sampling
    sampling = model.get_model_object("model_sampling")
    extra: dict[str, torch.Tensor] = {}
    if isinstance(sampling, ContinuousEDMModelSampling) and sampling.prediction == "v":
        extra["edm_vpred.sigma_max"] = torch.tensor(float(sampling.sigma_max)).float()
        extra["edm_vpred.sigma_min"] = torch.tensor(float(sampling.sigma_min)).float()
    if getattr(base, "prediction", None) == "v":
        extra["v_pred"] = torch.tensor([])
        if getattr(sampling, "zsnr", False):
            extra["ztsnr"] = torch.tensor([])
    return extra


# --- metadata ---

def checkpoint_metadata(model: Any, title: str) -> dict[str, str]:
    """`modelspec.*` as ComfyUI's save_checkpoint writes them; `title` is "<file name> <counter>".

    The prediction key comes from the loaded model (ComfyUI's `model_type`), not from a sampling
    patch on it."""
    metadata: dict[str, str] = {}
    family = _family(model)
    architecture = getattr(family, "modelspec_architecture", None)
    if architecture is not None:
        metadata.update({"modelspec.architecture": architecture, "modelspec.sai_model_spec": "1.0.0",
                         "modelspec.implementation": "sgm", "modelspec.title": title})
    predict_key = _PREDICT_KEYS.get(getattr(model.model.model_sampling, "prediction", None))
    if predict_key is not None:
        metadata["modelspec.predict_key"] = predict_key
    return metadata


# --- files ---

def save_checkpoint(path: str | Path, model: Any, clip: Any = None, vae: Any = None,
                    metadata: Mapping[str, str] | None = None) -> Path:
    """Write `model` (+ `clip`, `vae`) as one `.safetensors` checkpoint at `path`."""
    with checkpoint_tensors(model, clip, vae) as tensors:
        return write_safetensors(path, tensors, metadata)
