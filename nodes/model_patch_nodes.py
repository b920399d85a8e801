"""ComfyUI 0.3.64's UNet/CLIP patch nodes: FreeU and FreeU_V2 (comfy_extras/nodes_freelunch.py),
TomePatchModel (nodes_tomesd.py), HyperTile (nodes_hypertile.py), PatchModelAddDownscale
(nodes_model_downscale.py), the attention multipliers (nodes_attention_multiply.py),
HypernetworkLoader (nodes_hypernetwork.py) and ModelComputeDtype (nodes_model_advanced.py).

Each returns a clone of its MODEL (or CLIP) with one more patch from comfy_core/model_patches/;
the input is never changed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from graph.native import Boolean, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

UPSCALE_METHODS = ["bicubic", "nearest-exact", "bilinear", "area", "bislerp"]
COMPUTE_DTYPES = ["default", "fp32", "fp16", "bf16"]
HYPERNETWORKS = "hypernetworks"


def _model_channels(model: Any) -> int:
    """The UNet's base width (ComfyUI's `unet_config["model_channels"]`)."""
    config = getattr(getattr(model.model, "diffusion_model", None), "config", None)
    channels = getattr(config, "model_channels", None)
    if not isinstance(channels, int):
        raise NodeInputError("model", "a MODEL with a UNet (model_channels)", describe(model))
    return channels


def _freeu(model: Any, b1: float, b2: float, s1: float, s2: float, version: int) -> tuple[Any]:
    from comfy_core.model_patches.freeu import FreeU

    model = checks.model(model)
    factors = [checks.number(v, n) for v, n in ((b1, "b1"), (b2, "b2"), (s1, "s1"), (s2, "s2"))]
    patched = model.clone()
    patched.add_block_patch("output_block_patch", FreeU.for_model(_model_channels(model), *factors, version=version))
    return (patched,)


_FREEU_MODULE = "comfy_extras.nodes_freelunch"


def _freeu_inputs(b1: float, b2: float) -> list:
    return [Input("model", "MODEL"),
            Float("b1", default=b1, min=0.0, max=10.0, step=0.01),
            Float("b2", default=b2, min=0.0, max=10.0, step=0.01),
            Float("s1", default=0.9, min=0.0, max=10.0, step=0.01),
            Float("s2", default=0.2, min=0.0, max=10.0, step=0.01)]


@node("FreeU", display_name="FreeU", category="model_patches/unet", python_module=_FREEU_MODULE,
      inputs=_freeu_inputs(1.1, 1.2), outputs=[Output("MODEL")])
def freeu(model: Any, b1: float, b2: float, s1: float, s2: float) -> tuple[Any]:
    """Backbone channels scaled by b, skip features' low frequencies by s (Si et al. 2024)."""
    return _freeu(model, b1, b2, s1, s2, 1)


@node("FreeU_V2", display_name="FreeU_V2", category="model_patches/unet", python_module=_FREEU_MODULE,
      inputs=_freeu_inputs(1.3, 1.4), outputs=[Output("MODEL")])
def freeu_v2(model: Any, b1: float, b2: float, s1: float, s2: float) -> tuple[Any]:
    """FreeU with the backbone scale weighted by the normalised channel mean."""
    return _freeu(model, b1, b2, s1, s2, 2)


@node("TomePatchModel", display_name=None, category="model_patches/unet", python_module="comfy_extras.nodes_tomesd",
      inputs=[Input("model", "MODEL"), Float("ratio", default=0.3, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("MODEL")])
def tome_patch_model(model: Any, ratio: float) -> tuple[Any]:
    """Token merging of the full-resolution self-attention queries (Bolya & Hoffman 2023)."""
    from comfy_core.model_patches.tome import token_merging

    merge, unmerge = token_merging(checks.number(ratio, "ratio", 0.0, 1.0))
    patched = checks.model(model).clone()
    patched.add_block_patch("attn1_patch", merge)
    patched.add_block_patch("attn1_output_patch", unmerge)
    return (patched,)


@node("HyperTile", display_name=None, category="model_patches/unet", python_module="comfy_extras.nodes_hypertile",
      inputs=[Input("model", "MODEL"), Int("tile_size", default=256, min=1, max=2048),
              Int("swap_size", default=2, min=1, max=128), Int("max_depth", default=0, min=0, max=10),
              Boolean("scale_depth", default=False)],
      outputs=[Output("MODEL")])
def hyper_tile(model: Any, tile_size: int, swap_size: int, max_depth: int, scale_depth: bool) -> tuple[Any]:
    """Self-attention over spatial tiles of the queries (HyperTile)."""
    from comfy_core.model_patches.hypertile import hypertile

    if not isinstance(scale_depth, bool):
        raise NodeInputError("scale_depth", "a BOOLEAN", describe(scale_depth))
    tile_in, tile_out = hypertile(checks.integer(tile_size, "tile_size", 1), checks.integer(swap_size, "swap_size", 1),
                                  checks.integer(max_depth, "max_depth", 0), scale_depth)
    patched = checks.model(model).clone()
    patched.add_block_patch("attn1_patch", tile_in)
    patched.add_block_patch("attn1_output_patch", tile_out)
    return (patched,)


@node("PatchModelAddDownscale", display_name="PatchModelAddDownscale (Kohya Deep Shrink)",
      category="model_patches/unet", python_module="comfy_extras.nodes_model_downscale",
      inputs=[Input("model", "MODEL"), Int("block_number", default=3, min=1, max=32, step=1),
              Float("downscale_factor", default=2.0, min=0.1, max=9.0, step=0.001),
              Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001),
              Float("end_percent", default=0.35, min=0.0, max=1.0, step=0.001),
              Boolean("downscale_after_skip", default=True),
              Combo("downscale_method", UPSCALE_METHODS), Combo("upscale_method", UPSCALE_METHODS)],
      outputs=[Output("MODEL")])
def patch_model_add_downscale(model: Any, block_number: int, downscale_factor: float, start_percent: float,
                              end_percent: float, downscale_after_skip: bool, downscale_method: str,
                              upscale_method: str) -> tuple[Any]:
    """Features after input block `block_number` shrunk by `downscale_factor` between the two
    percents of the schedule, and grown back on the way up (Kohya's Deep Shrink)."""
    from comfy_core.model_patches.downscale import DownscaleInput, UpscaleOutput

    model = checks.model(model)
    checks.choice(downscale_method, UPSCALE_METHODS, "downscale_method")
    checks.choice(upscale_method, UPSCALE_METHODS, "upscale_method")
    factor = checks.number(downscale_factor, "downscale_factor")
    if factor <= 0:
        raise NodeInputError("downscale_factor", "a FLOAT above 0", repr(downscale_factor))
    sampling = model.get_model_object("model_sampling")
    sigma_start = float(sampling.percent_to_sigma(checks.number(start_percent, "start_percent")))
    sigma_end = float(sampling.percent_to_sigma(checks.number(end_percent, "end_percent")))
    shrink = DownscaleInput(checks.integer(block_number, "block_number"), float(factor), sigma_start, sigma_end,
                            downscale_method)
    patched = model.clone()
    if downscale_after_skip:
        patched.add_block_patch("input_block_patch_after_skip", shrink)
    else:
        patched.add_block_patch("input_block_patch", shrink)
    patched.add_block_patch("output_block_patch", UpscaleOutput(upscale_method))
    return (patched,)


# --- attention multipliers ---

_ATTN_MODULE = "comfy_extras.nodes_attention_multiply"
_ATTN_CATEGORY = "_for_testing/attention_experiments"


def _factor_inputs(*names: str) -> list:
    return [Float(name, default=1.0, min=0.0, max=10.0, step=0.01) for name in names]


def _factors(**values: float) -> dict[str, float]:
    return {name: float(checks.number(v, name)) for name, v in values.items()}


def _multiply_unet(model: Any, attn: str, q: float, k: float, v: float, out: float) -> tuple[Any]:
    from comfy_core.model_patches.attention_multiply import UNET_PROJECTIONS, add_multipliers, projection_factors

    model = checks.model(model)
    factors = _factors(q=q, k=k, v=v, out=out)
    patched = model.clone()
    add_multipliers(patched, projection_factors(model.model_state_dict(), f"{attn}.", UNET_PROJECTIONS, factors))
    return (patched,)


@node("UNetSelfAttentionMultiply", display_name=None, category=_ATTN_CATEGORY, python_module=_ATTN_MODULE,
      experimental=True, inputs=[Input("model", "MODEL"), *_factor_inputs("q", "k", "v", "out")],
      outputs=[Output("MODEL")])
def unet_self_attention_multiply(model: Any, q: float, k: float, v: float, out: float) -> tuple[Any]:
    """The UNet self-attention (attn1) q/k/v/out projections multiplied by the factors."""
    return _multiply_unet(model, "attn1", q, k, v, out)


@node("UNetCrossAttentionMultiply", display_name=None, category=_ATTN_CATEGORY, python_module=_ATTN_MODULE,
      experimental=True, inputs=[Input("model", "MODEL"), *_factor_inputs("q", "k", "v", "out")],
      outputs=[Output("MODEL")])
def unet_cross_attention_multiply(model: Any, q: float, k: float, v: float, out: float) -> tuple[Any]:
    """The UNet cross-attention (attn2) q/k/v/out projections multiplied by the factors."""
    return _multiply_unet(model, "attn2", q, k, v, out)


@node("CLIPAttentionMultiply", display_name=None, category=_ATTN_CATEGORY, python_module=_ATTN_MODULE,
      experimental=True, inputs=[Input("clip", "CLIP"), *_factor_inputs("q", "k", "v", "out")],
      outputs=[Output("CLIP")])
def clip_attention_multiply(clip: Any, q: float, k: float, v: float, out: float) -> tuple[Any]:
    """The text encoders' self-attention q/k/v/out projections multiplied by the factors."""
    from comfy_core.model_patches.attention_multiply import CLIP_PROJECTIONS, add_multipliers, projection_factors

    clip = checks.clip(clip)
    if not hasattr(clip, "patcher") or not hasattr(clip, "add_patches"):
        raise NodeInputError("clip", "a CLIP object of this engine (with a patcher)", describe(clip))
    factors = _factors(q=q, k=k, v=v, out=out)
    patched = clip.clone()
    add_multipliers(patched, projection_factors(patched.patcher.model_state_dict(), "", CLIP_PROJECTIONS, factors))
    return (patched,)


@node("UNetTemporalAttentionMultiply", display_name=None, category=_ATTN_CATEGORY, python_module=_ATTN_MODULE,
      experimental=True,
      inputs=[Input("model", "MODEL"),
              *_factor_inputs("self_structural", "self_temporal", "cross_structural", "cross_temporal")],
      outputs=[Output("MODEL")])
def unet_temporal_attention_multiply(model: Any, self_structural: float, self_temporal: float,
                                     cross_structural: float, cross_temporal: float) -> tuple[Any]:
    """Attention output projections multiplied, temporal (video `time_stack`) layers apart."""
    from comfy_core.model_patches.attention_multiply import add_multipliers, temporal_factors

    model = checks.model(model)
    f = _factors(self_structural=self_structural, self_temporal=self_temporal,
                 cross_structural=cross_structural, cross_temporal=cross_temporal)
    patched = model.clone()
    add_multipliers(patched, temporal_factors(model.model_state_dict(), f["self_structural"], f["self_temporal"],
                                              f["cross_structural"], f["cross_temporal"]))
    return (patched,)


# --- hypernetworks, compute dtype ---

def _hypernetwork_files(env: Any = None) -> list[str]:
    environment = env if isinstance(env, Environment) else current_env()
    return environment.folders.filenames(HYPERNETWORKS)


def load_hypernetwork_file(path: Path) -> Any:
    """A hypernetwork `.pt` file's dict, read with `weights_only` (no code runs)."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise NodeInputError("hypernetwork_name", "a readable AUTOMATIC1111 hypernetwork (.pt)",
                             f"{path.name!r}: {exc}") from exc


@node("HypernetworkLoader", display_name="HypernetworkLoader", category="loaders",
      python_module="comfy_extras.nodes_hypernetwork",
      inputs=[Input("model", "MODEL"), Combo("hypernetwork_name", _hypernetwork_files),
              Float("strength", default=1.0, min=-10.0, max=10.0, step=0.01)],
      outputs=[Output("MODEL")])
def hypernetwork_loader(model: Any, hypernetwork_name: str, strength: float) -> tuple[Any]:
    """An AUTOMATIC1111 hypernetwork on the attention keys and values (self and cross)."""
    from comfy_core.model_patches.errors import ModelPatchError
    from comfy_core.model_patches.hypernetwork import hypernetwork_from_state

    model = checks.model(model)
    strength = checks.number(strength, "strength")
    if not isinstance(hypernetwork_name, str):
        raise NodeInputError("hypernetwork_name", f"a file name in the {HYPERNETWORKS} folders", describe(hypernetwork_name))
    path = model_file(HYPERNETWORKS, hypernetwork_name, "hypernetwork_name")
    # The file's state names the patch (cache keys), taken before reading.
    stat = Path(path).stat()
    source = (str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)
    data = load_hypernetwork_file(Path(path))
    if not isinstance(data, dict):
        raise NodeInputError("hypernetwork_name", "an AUTOMATIC1111 hypernetwork (a dict)", describe(data))
    try:
        patch = hypernetwork_from_state(data, float(strength), source)
    except ModelPatchError as exc:
        raise NodeInputError("hypernetwork_name", "an AUTOMATIC1111 hypernetwork", f"{hypernetwork_name!r}: {exc}") from exc
    patched = model.clone()
    patched.add_block_patch("attn1_patch", patch)
    patched.add_block_patch("attn2_patch", patch)
    return (patched,)


@node("ModelComputeDtype", display_name="ModelComputeDtype", category="advanced/debug/model",
      python_module="comfy_extras.nodes_model_advanced",
      inputs=[Input("model", "MODEL"), Combo("dtype", COMPUTE_DTYPES)], outputs=[Output("MODEL")])
def model_compute_dtype(model: Any, dtype: str) -> tuple[Any]:
    """The diffusion model computed in `dtype` whatever its weights are stored in ("default": as
    loaded)."""
    from comfy_core.model_patches.compute_dtype import ComputeDtype, dtype_from_name

    model = checks.model(model)
    checks.choice(dtype, COMPUTE_DTYPES, "dtype")
    torch_dtype = dtype_from_name(dtype)
    patched = model.clone()
    patched.add_object_patch("manual_cast_dtype", torch_dtype)  # ComfyUI's name, for packs that read it
    previous = patched.model_options.pop("model_function_wrapper", None)
    if isinstance(previous, ComputeDtype):  # a second ModelComputeDtype replaces the first
        previous = previous.inner
    if torch_dtype is not None:
        patched.set_option("model_function_wrapper", ComputeDtype(torch_dtype, previous))
    elif previous is not None:
        patched.set_option("model_function_wrapper", previous)
    return (patched,)
