"""Building an upscale model from its weights with `spandrel`, after ComfyUI's
`comfy_extras/nodes_upscale_model.py: UpscaleModelLoader` (0.3.64), written here:

1. the state dict is read as ComfyUI reads it (`files.read_state_dict`);
2. one key fix ComfyUI makes before spandrel: a SwinIR saved from `DataParallel` has its keys
   under `module.` (detected by `module.layers.0.residual_group.blocks.0.norm1.weight`); that
   prefix is stripped from every key that has it. Everything else (the old and new ESRGAN key
   layouts, `params_ema` wrappers, a `module.` / `netG.` prefix on all keys) spandrel handles;
3. spandrel detects the architecture and hyper-parameters from key names and shapes; the
   result must be an `ImageModelDescriptor` (one image in, one image out), which is what the
   UPSCALE_MODEL wire type carries (`.model`, `.scale`, `.input_channels`, `.device`, `.dtype`,
   called on `[1, C, H, W]` in 0..1). Inpainting (masked) models are refused.

The architectures are spandrel's own registry plus, when the optional `spandrel_extra_arches`
package is installed, its non-commercial ones, as ComfyUI; here in a copy of the registry made
per load, never by changing spandrel's global one.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from comfy_core.upscale.files import UpscaleModelError, read_state_dict

if TYPE_CHECKING:
    from spandrel import ArchRegistry, ImageModelDescriptor

# A SwinIR state dict saved from a DataParallel wrapper (ComfyUI's test for the prefix fix).
WRAPPED_SWINIR_KEY = "module.layers.0.residual_group.blocks.0.norm1.weight"
WRAPPER_PREFIX = "module."


def prepare_state_dict(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A new dict with ComfyUI's key fix applied (module docstring, step 2); the input is not
    changed. Where a stripped key meets an existing one, the stripped key's tensor wins, as in
    ComfyUI's `state_dict_prefix_replace`."""
    if WRAPPED_SWINIR_KEY not in state_dict:
        return dict(state_dict)
    prepared = {key: value for key, value in state_dict.items() if not key.startswith(WRAPPER_PREFIX)}
    for key, value in state_dict.items():
        if key.startswith(WRAPPER_PREFIX):
            prepared[key[len(WRAPPER_PREFIX):]] = value
    return prepared


def architectures() -> "ArchRegistry":
    """spandrel's architectures, plus `spandrel_extra_arches`' when that package is installed."""
    from spandrel import MAIN_REGISTRY

    registry = MAIN_REGISTRY.copy()
    try:
        from spandrel_extra_arches import EXTRA_REGISTRY
    except ImportError:
        return registry
    registry.add(*EXTRA_REGISTRY, ignore_duplicates=True)
    return registry


def model_from_state_dict(state_dict: Mapping[str, Any], name: str = "state dict", *,
                          registry: "ArchRegistry | None" = None) -> "ImageModelDescriptor":
    """The single-image model spandrel detects in `state_dict`, on the CPU, in eval mode.
    `registry`: the architectures to detect among (default: `architectures()`)."""
    from spandrel import ImageModelDescriptor, ModelLoader, UnsupportedModelError

    loader = ModelLoader(registry=registry if registry is not None else architectures())
    try:
        model = loader.load_from_state_dict(prepare_state_dict(state_dict)).eval()
    except UnsupportedModelError:
        raise UpscaleModelError(f"{name}: no architecture spandrel knows matches these weights") from None
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as exc:
        # Detected, but the weights do not fit the architecture (a truncated or edited file).
        raise UpscaleModelError(f"{name}: spandrel could not build the model ({type(exc).__name__}: {exc})") from exc
    if not isinstance(model, ImageModelDescriptor):
        raise UpscaleModelError(f"{name}: upscale model must be a single-image model, this is a "
                                f"{type(model).__name__} ({model.architecture.name})")
    return model


def load_upscale_model(path: str | Path) -> "ImageModelDescriptor":
    """The upscale model in the file `path` (`.safetensors`, `.pth`, `.pt`, ...)."""
    path = Path(path)
    return model_from_state_dict(read_state_dict(path), path.name)
