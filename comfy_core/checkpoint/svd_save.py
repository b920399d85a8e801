"""Writing a MODEL, a CLIP_VISION and a VAE as one single-file checkpoint (ImageOnlyCheckpointSave).

After ComfyUI's `comfy_extras/nodes_model_merging.py: save_checkpoint` and `comfy/sd.py:
save_checkpoint` / `BaseModel.state_dict_for_saving`, written here:

- the UNet's state dict with the MODEL's weight patches applied, under `model.diffusion_model.`;
  the VAE's under `first_stage_model.`; the image encoder's (its "hf" names, `ClipVision.get_sd`)
  under the family's `clip_vision_prefix` (ComfyUI writes hf names there too, and both loaders
  accept either layout at that prefix);
- extra tensors: `edm_vpred.sigma_max` / `edm_vpred.sigma_min` (0-d float32) for a continuous EDM
  v-prediction model (SVD), the empty `v_pred` marker for a discrete v-prediction one;
- metadata: `modelspec.*` for the families ComfyUI names (their `Family.modelspec_architecture`:
  SDXL base / inpaint / edit / refiner, SVD), the
  `modelspec.predict_key` of discrete eps / v models, and, unless `with_workflow` is off (the
  server's --disable-metadata), `prompt` (its JSON, "" without one) and each `extra_pnginfo` entry
  as JSON.

The objects are duck-typed (patchers with `applied()`, a model with `family` and
`model_sampling`), so this module imports nothing above the file format.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch

from comfy_core.checkpoint.save import write_safetensors

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."


def checkpoint_metadata(architecture: str | None, model_sampling: Any, title: str, prompt: Any = None,
                        extra_pnginfo: Any = None, with_workflow: bool = True) -> dict[str, str]:
    """The `__metadata__` ComfyUI writes for this model (see the module docstring); `architecture`:
    the family's ModelSpec architecture (`Family.modelspec_architecture`), None for none."""
    metadata: dict[str, str] = {}
    if architecture is not None:
        metadata["modelspec.architecture"] = architecture
        metadata["modelspec.sai_model_spec"] = "1.0.0"
        metadata["modelspec.implementation"] = "sgm"
        metadata["modelspec.title"] = title
    discrete = hasattr(model_sampling, "set_sigmas")  # the DDPM table (ModelSampling), not EDM/flow
    prediction = getattr(model_sampling, "prediction", None)
    if discrete and prediction == "eps":
        metadata["modelspec.predict_key"] = "epsilon"
    elif discrete and prediction == "v":
        metadata["modelspec.predict_key"] = "v"
    if with_workflow:
        metadata["prompt"] = "" if prompt is None else json.dumps(prompt)
        if isinstance(extra_pnginfo, dict):
            for key, value in extra_pnginfo.items():
                metadata[key] = json.dumps(value)
    return metadata


def extra_tensors(model_sampling: Any) -> dict[str, torch.Tensor]:
    """Marker tensors for the prediction type and sigma range."""
    prediction = getattr(model_sampling, "prediction", None)
    if hasattr(model_sampling, "set_sigmas"):
        return {"v_pred": torch.tensor([])} if prediction == "v" else {}
    if prediction == "v" and type(model_sampling).__name__ == "ContinuousEDMModelSampling":
        return {"edm_vpred.sigma_max": torch.tensor(float(model_sampling.sigma_max)).float(),
                "edm_vpred.sigma_min": torch.tensor(float(model_sampling.sigma_min)).float()}
    return {}


def save_image_only_checkpoint(path: str | Path, model: Any, clip_vision: Any, vae: Any, *, title: str,
                               prompt: Any = None, extra_pnginfo: Any = None, with_workflow: bool = True) -> Path:
    """Write MODEL + CLIP_VISION + VAE to `path` (see the module docstring); returns the path."""
    model_sampling = model.get_model_object("model_sampling")
    with contextlib.ExitStack() as stack:
        dm = stack.enter_context(model.applied())
        family = getattr(dm, "family", None)
        prefix = getattr(family, "clip_vision_prefix", None) or "clip_vision."
        tensors: dict[str, torch.Tensor] = {UNET_PREFIX + k: v for k, v in dm.diffusion_model.state_dict().items()}
        if vae is not None:
            first_stage = stack.enter_context(vae.applied())
            tensors.update({VAE_PREFIX + k: v for k, v in first_stage.state_dict().items()})
        if clip_vision is not None:
            stack.enter_context(clip_vision.patcher.applied())
            tensors.update({prefix + k: v for k, v in clip_vision.get_sd().items()})
        tensors.update(extra_tensors(model_sampling))
        # Written while the patches are on: the state dicts are views of the patched modules.
        metadata = checkpoint_metadata(getattr(family, "modelspec_architecture", None), model_sampling, title, prompt,
                                       extra_pnginfo, with_workflow)
        return write_safetensors(path, tensors, metadata)
