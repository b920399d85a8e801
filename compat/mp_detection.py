"""ComfyUI's `comfy.model_detection` (and `supported_models.models`) for the families we load.

`detect_unet_config(state_dict, key_prefix)` reads the diffusion model's structure from names and
shapes with our detectors and answers in ComfyUI's `unet_config` keys: a UNet's
(`UNetConfig.detect_from_weights`, through our family registry), an MMDiT's
(`MMDiTConfig.detect_from_weights(...).comfy_unet_config()`) or a Flux's (`image_model: "flux"`
and `FluxConfig.detect_from_weights(...).params()`: read from the shapes, where ComfyUI writes
Flux.1's full-size widths whatever the file). `model_config_from_unet(...)` picks the first
config class whose `unet_config` matches, in ComfyUI's order (comfy_core/models/model_config.py).
`convert_diffusers_mmdit` converts diffusers-layout SD3 and Flux transformers to SAI / BFL names
(comfy_core/families/sd3/keys.py, comfy_core/families/flux/keys.py). Diffusers-layout UNets are not converted here
(`unet_config_from_diffusers_unet` says so).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.models import model_config as mc
from compat.mp_supported_models import our_config_class

# ComfyUI's match order for these classes (specific before general); each family package holds its
# own (`supported_models.py`).
SUPPORTED_MODELS: list[type[mc.BASE]] = [
    our_config_class(name) for name in ("SD15_instructpix2pix", "SD15", "SD20", "SD21UnclipH", "SDXL_instructpix2pix",
                                        "SDXLRefiner", "SDXL", "SD3", "FluxInpaint", "Flux", "FluxSchnell",
                                        "SVD_img2vid")]


class DetectionError(NotImplementedError):
    """A state dict or layout this detection does not handle."""


class ClipTarget:
    """ComfyUI's `supported_models_base.ClipTarget`: a tokenizer class and a text-model class."""

    def __init__(self, tokenizer: Any, clip: Any) -> None:
        self.clip = clip
        self.tokenizer = tokenizer
        self.params: dict[str, Any] = {}


def count_blocks(state_dict_keys: Any, prefix_string: str) -> int:
    """How many consecutive `prefix_string.format(i)` prefixes start some key (i = 0, 1, ...)."""
    keys = list(state_dict_keys)
    count = 0
    while any(k.startswith(prefix_string.format(count)) for k in keys):
        count += 1
    return count


def unet_prefix_from_state_dict(state_dict: Mapping[str, Any]) -> str:
    """The prefix the diffusion model's keys carry: ComfyUI's candidates, the most common wins."""
    candidates = ["model.diffusion_model.", "model.model.", "net."]
    counts = {c: sum(1 for k in state_dict if k.startswith(c)) for c in candidates}
    best = max(counts, key=lambda c: counts[c])
    return best if counts[best] > 0 else "model."


class _Shape:
    def __init__(self, shape: Any) -> None:
        self.shape = tuple(shape)


def _detect(state_dict: Mapping[str, Any], key_prefix: str) -> Any:
    """Our family detection (names and shapes) on the UNet under `key_prefix`."""
    from comfy_core.families import default_registry
    from comfy_core.families.errors import AmbiguousFamilyError, UnknownFamilyError

    tensors = {"model.diffusion_model." + k[len(key_prefix):]: _Shape(v.shape)
               for k, v in state_dict.items() if k.startswith(key_prefix)}
    if "model.diffusion_model.input_blocks.0.0.weight" not in tensors:
        raise DetectionError(f"model detection: no SD-family UNet under {key_prefix!r} (only the SD1/SD2/SDXL/SVD "
                             "UNets this engine loads are detected)")
    try:
        return default_registry().detect_diffusion_model(tensors)
    except (UnknownFamilyError, AmbiguousFamilyError) as exc:
        raise DetectionError(f"model detection: {exc}") from None


def _dit_config(state_dict: Mapping[str, Any], key_prefix: str) -> Any:
    """Our config of the MMDiT or Flux transformer under `key_prefix`, or None when it is neither
    (ComfyUI's marker keys); a broken one raises the detector's typed error."""
    from comfy_core.families.flux.dit import FluxConfig, is_flux
    from comfy_core.families.sd3.mmdit import MMDiTConfig

    tensors = {k: _Shape(v.shape) for k, v in state_dict.items() if k.startswith(key_prefix)}
    if key_prefix + "joint_blocks.0.context_block.attn.qkv.weight" in tensors:
        return MMDiTConfig.detect_from_weights(tensors, key_prefix)
    if is_flux(tensors, key_prefix):
        return FluxConfig.detect_from_weights(tensors, key_prefix)
    return None


def detect_unet_config(state_dict: Mapping[str, Any], key_prefix: str, metadata: Any = None) -> dict[str, Any]:
    """ComfyUI-keyed config of the diffusion model under `key_prefix`: an MMDiT's or a Flux's
    (see the module docstring), else the SD-family UNet's (heads from its family)."""
    dit = _dit_config(state_dict, key_prefix)
    if dit is not None:
        return mc.comfy_unet_config(dit)
    detection = _detect(state_dict, key_prefix)
    return mc.unet_config_dict(detection.unet_config)


def model_config_from_unet_config(unet_config: dict[str, Any], state_dict: Any = None) -> mc.BASE | None:
    """The first config class (ComfyUI's order) whose `unet_config` values all match."""
    for cls in SUPPORTED_MODELS:
        if cls.matches(unet_config, state_dict):
            return cls(unet_config)
    return None


def model_config_from_unet(state_dict: Mapping[str, Any], unet_key_prefix: str, use_base_if_no_match: bool = False,
                           metadata: Any = None) -> mc.BASE | None:
    """The config of the UNet under `unet_key_prefix`, by our family detection (which reads the
    structure, so it also knows tiny test UNets whose widths ComfyUI's tables would not match)."""
    dit = _dit_config(state_dict, unet_key_prefix)
    if dit is not None:
        unet_config = mc.comfy_unet_config(dit)
        config = model_config_from_unet_config(unet_config, state_dict)
        return mc.BASE(unet_config) if config is None and use_base_if_no_match else config
    detection = _detect(state_dict, unet_key_prefix)
    cls = detection.family.supported_model
    unet_config = mc.unet_config_dict(detection.unet_config)
    if cls is None:
        return mc.BASE(unet_config) if use_base_if_no_match else None
    return cls(unet_config)


def convert_config(unet_config: dict[str, Any]) -> dict[str, Any]:
    """ComfyUI turns `num_res_blocks` / per-level depths into per-block lists; ours are that already."""
    return dict(unet_config)


def unet_config_from_diffusers_unet(state_dict: Mapping[str, Any], dtype: Any = None) -> dict[str, Any]:
    raise DetectionError("unet_config_from_diffusers_unet: diffusers-layout UNets are loaded by "
                         "comfy_core.split.load_diffusers, not detected through comfy.model_detection here")


def model_config_from_diffusers_unet(state_dict: Mapping[str, Any]) -> mc.BASE | None:
    """ComfyUI's `model_detection.model_config_from_diffusers_unet`: the config class matching
    `unet_config_from_diffusers_unet(state_dict)`, or None when that finds no config. Both are read
    from this module's globals at call time, as ComfyUI reads its own, so a pack that replaced
    `comfy.model_detection.unet_config_from_diffusers_unet` or `comfy.supported_models.models`
    (Kolors-MZ's `apply_kolors`) is what answers; unreplaced, the diffusers-layout detection
    raises `DetectionError` (see `unet_config_from_diffusers_unet`)."""
    unet_config = unet_config_from_diffusers_unet(state_dict)
    if unet_config is None:
        return None
    return model_config_from_unet_config(unet_config)


def convert_diffusers_mmdit(state_dict: Mapping[str, Any], output_prefix: str = "") -> dict[str, Any] | None:
    """A diffusers-layout SD3 (`SD3Transformer2DModel`) or Flux (`FluxTransformer2DModel`) state
    dict in SAI / BFL names under `output_prefix` (q/k/v fused, adaLN halves swapped), or None
    for other layouts (ComfyUI also converts AuraFlow and PixArt; those are not here). Unlike
    ComfyUI's, `state_dict` is left as it is (ComfyUI pops the converted keys)."""
    from comfy_core.families.flux import keys as flux_keys
    from comfy_core.families.sd3 import keys as mmdit_keys

    if flux_keys.is_diffusers_flux(state_dict):
        return flux_keys.convert_diffusers_state_dict(state_dict, output_prefix=output_prefix)
    if mmdit_keys.is_diffusers_mmdit(state_dict):
        return mmdit_keys.convert_diffusers_state_dict(state_dict, output_prefix=output_prefix)
    return None
