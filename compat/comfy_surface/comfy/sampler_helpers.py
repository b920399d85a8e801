"""ComfyUI's `comfy.sampler_helpers` for node packs (compat/samplers_helpers.py).

ComfyUI's module does `import comfy.utils` (and `comfy.model_management`, ...), so it has a
`comfy` attribute, the `comfy` package: packs reach ComfyUI's modules through it
(`comfy.sampler_helpers.comfy.utils.reshape_mask = f`, RyanOnTheInside's ACE-Step patches). Here
it is the surface's `comfy` package too, whose submodules are its attributes on first read, so
such an assignment sets ComfyUI's name `comfy.utils.reshape_mask` (compat/facade.py)."""
import comfy  # noqa: F401  (ComfyUI's module attribute; the package imports no torch)
from compat.facade import facade

_HELPERS = "compat.samplers_helpers"

facade(__name__, {name: f"{_HELPERS}:{name}" for name in (
    "prepare_mask", "get_models_from_cond", "convert_cond", "get_additional_models", "cleanup_additional_models",
    "cleanup_models", "estimate_memory", "prepare_sampling", "prepare_model_patcher", "get_hooks_from_cond",
    "get_additional_models_from_model_options",
)})
