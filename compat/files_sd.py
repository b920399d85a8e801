"""ComfyUI's `comfy.sd` loaders for packs, on comfy_core's loaders (ComfyUI's comfy/sd.py signatures).

The objects returned are the ones our built-in loaders return (a `ModelPatcher`, our `CLIP`, a
`VaePatcher`), loaded with the same options from the host environment (dtype policy, memory
map), given the same default attention backend, embedding lookup and memory tracking as
`CheckpointLoaderSimple` / `LoraLoader` give theirs (nodes/loaders.py), so a pack that loads a
model itself gets exactly what the node would and can hand it to our nodes, and back.

State dicts are loaded through the same loaders as files (`CheckpointFile` over a mapping), so
`load_diffusion_model_state_dict(sd)` and `VAE(sd=sd)` detect and convert exactly as the file
loaders do. torch is imported inside the functions: packs import `comfy.sd` at start-up.
"""
from __future__ import annotations

import dataclasses
import logging
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class CLIPType(Enum):
    """ComfyUI's `comfy.sd.CLIPType` members and values (today's, through YUE2). `load_clip` passes the
    member's lower-cased name to comfy_core.split's loader as a CLIPLoader type: a type no family here
    answers raises `UnsupportedClipTypeError` naming it."""

    STABLE_DIFFUSION = 1
    STABLE_CASCADE = 2
    SD3 = 3
    STABLE_AUDIO = 4
    HUNYUAN_DIT = 5
    FLUX = 6
    MOCHI = 7
    LTXV = 8
    HUNYUAN_VIDEO = 9
    PIXART = 10
    COSMOS = 11
    LUMINA2 = 12
    WAN = 13
    HIDREAM = 14
    CHROMA = 15
    ACE = 16
    OMNIGEN2 = 17
    QWEN_IMAGE = 18
    HUNYUAN_IMAGE = 19
    HUNYUAN_VIDEO_15 = 20
    OVIS = 21
    KANDINSKY5 = 22
    KANDINSKY5_IMAGE = 23
    NEWBIE = 24
    FLUX2 = 25
    LONGCAT_IMAGE = 26
    COGVIDEOX = 27
    LENS = 28
    PIXELDIT = 29
    IDEOGRAM4 = 30
    BOOGU = 31
    KREA2 = 32
    JOYIMAGE = 33
    MAGE = 34
    MINIMAX = 35
    YUE2 = 36


class LoaderOptionError(ValueError):
    """A `comfy.sd` loader option this engine cannot honour (named in the message)."""


def _loader_type(clip_type: Any) -> str:
    """CLIPType (or its name) -> the type name comfy_core.split takes ("stable_diffusion", "sd3", ...)."""
    if isinstance(clip_type, CLIPType):
        return clip_type.name.lower()
    if isinstance(clip_type, str):
        return clip_type.lower()
    raise LoaderOptionError(f"clip_type: expected a comfy.sd.CLIPType, got {clip_type!r}")


def _options(model_options: Mapping | None = None, te_model_options: Mapping | None = None) -> Any:
    """The built-in loaders' options (the host's dtype policy and memory map), with ComfyUI's
    `model_options["dtype"|"weight_dtype"]` (UNet storage) and `te_model_options["dtype"]`."""
    from nodes.loaders import _options as node_options

    options = node_options()
    policy = options.dtype_policy
    for source, component in ((model_options, "unet"), (te_model_options, "text")):
        source = dict(source or {})
        dtype = source.pop("dtype", None) or source.pop("weight_dtype", None)
        if source.pop("custom_operations", None) is not None:
            raise LoaderOptionError("model option 'custom_operations' (ComfyUI's ops classes) is not supported")
        unknown = sorted(set(source) - {"fp8_optimizations", "load_device", "offload_device"})
        if unknown:
            raise LoaderOptionError(f"model options {unknown} are not supported by this engine's loaders")
        if dtype is not None:
            policy = dataclasses.replace(policy, **{component: dtype})
    return dataclasses.replace(options, dtype_policy=policy)


def _finish(model: Any = None, clip: Any = None, vae: Any = None, embedding_directory: Any = None) -> None:
    """What the built-in loader nodes do to what they load: default attention backend, embedding
    lookup (over `embedding_directory` when given, else the embeddings folders), memory tracking."""
    from nodes.loaders import _default_attention, _embedding_lookup, _track

    _default_attention(model=model, vae=vae)
    if clip is not None:
        if embedding_directory is not None:
            from comfy_core.text_encoders.embedding_files import FolderEmbeddingLookup

            folders = [embedding_directory] if isinstance(embedding_directory, (str, Path)) else list(embedding_directory)
            clip.set_embedding_lookup(FolderEmbeddingLookup(folders))
        else:
            _embedding_lookup(clip)
    _track(model, clip, vae)


# --- checkpoints ---

def load_checkpoint_guess_config(ckpt_path: str | Path, output_vae: bool = True, output_clip: bool = True,
                                 output_clipvision: bool = False, embedding_directory: Any = None,
                                 output_model: bool = True, model_options: Mapping | None = None,
                                 te_model_options: Mapping | None = None,
                                 disable_dynamic: bool = False) -> tuple[Any, Any, Any, Any]:
    """ComfyUI's loader: `(model, clip, vae, clipvision)` of a single-file checkpoint, the family
    detected from its weights. `clipvision` is the CLIP vision tower the file embeds (unCLIP /
    SVD checkpoints) when `output_clipvision`, else None. `disable_dynamic` (today's: build a
    plain ModelPatcher rather than a dynamic-VRAM one) changes nothing here: no patcher here is
    dynamic. The file is read memory-mapped by our loader, not first loaded whole as ComfyUI does
    before calling `load_state_dict_guess_config`, so a pack's replacement of that function is
    not called from here (it is when the pack calls it itself)."""
    from comfy_core.loading import load_checkpoint

    options = _options(model_options, te_model_options)
    model, clip, vae = load_checkpoint(ckpt_path, options, output_vae=output_vae, output_clip=output_clip)
    clip_vision = _embedded_clip_vision(ckpt_path) if output_clipvision else None
    if not output_model:
        model = None
    _finish(model, clip, vae, embedding_directory)
    return model, clip, vae, clip_vision


def load_state_dict_guess_config(sd: Mapping[str, torch.Tensor], output_vae: bool = True, output_clip: bool = True,
                                 output_clipvision: bool = False, embedding_directory: Any = None,
                                 output_model: bool = True, model_options: Mapping | None = None,
                                 te_model_options: Mapping | None = None, metadata: Mapping[str, str] | None = None,
                                 disable_dynamic: bool = False) -> tuple[Any, Any, Any, Any]:
    """Today's ComfyUI's loader of a checkpoint already in memory: `(model, clip, vae, clipvision)`
    of the state dict `sd`, detected and loaded as `load_checkpoint_guess_config` loads a file.

    As ComfyUI: quantised layers described by the file metadata's `_quantization_metadata` get
    their `comfy_quant` tensors first (`comfy.utils.convert_old_quants`, unless
    `model_options["custom_operations"]` is set), and a state dict that is no checkpoint of a
    known family is loaded as a diffusion model alone: `(model, None, vae, None)`, where ComfyUI's
    `vae` is a `VAE(sd={})` without weights and ours is None (a VAE with no weights cannot decode).
    Legacy scaled-fp8 markers are left as they are: our loaders read them directly.
    `disable_dynamic` changes nothing (no patcher here is dynamic)."""
    from comfy_core.families.errors import UnknownFamilyError
    from comfy_core.loading import load_checkpoint
    from comfy_core.weights.quant_registry import METADATA_KEY
    from compat.files_utils import convert_old_quants

    if metadata and METADATA_KEY in metadata and (model_options or {}).get("custom_operations") is None:
        sd, metadata = convert_old_quants(dict(sd), "", metadata=metadata)
    options = _options(model_options, te_model_options)
    try:
        model, clip, vae = load_checkpoint(sd, options, output_vae=output_vae, output_clip=output_clip)
    except UnknownFamilyError as not_a_checkpoint:
        try:
            model = load_diffusion_model_state_dict(sd, model_options, metadata=metadata)
        except Exception:  # noqa: BLE001 -- neither form: the checkpoint error says what was looked for
            raise not_a_checkpoint from None
        return model, None, None, None
    clip_vision = _embedded_clip_vision(sd) if output_clipvision else None
    if not output_model:
        model = None
    _finish(model, clip, vae, embedding_directory)
    return model, clip, vae, clip_vision


def _embedded_clip_vision(ckpt_path: str | Path) -> Any:
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.clip_vision.load import clip_vision_from_checkpoint, detect_clip_vision

    with CheckpointFile(ckpt_path) as checkpoint:
        config = detect_clip_vision(checkpoint, ("embedder.model.", "conditioner.embedders.0.open_clip.model.",
                                                 "cond_stage_model.model."))
        if config is None:
            return None
        return clip_vision_from_checkpoint(checkpoint, config)


def load_checkpoint(config_path: str | Path | None = None, ckpt_path: str | Path | None = None,
                    output_vae: bool = True, output_clip: bool = True, embedding_directory: Any = None,
                    state_dict: Mapping | None = None, config: Any = None) -> tuple[Any, Any, Any]:
    """ComfyUI's deprecated yaml-config loader: `(model, clip, vae)`. The config's
    `parameterization: v` chooses v-prediction, as CheckpointLoader does; the architecture is
    read from the weights."""
    from comfy_core.loading import load_checkpoint as ours
    from nodes.loaders import config_prediction

    source = state_dict if state_dict is not None else ckpt_path
    if source is None:
        raise LoaderOptionError("comfy.sd.load_checkpoint: give ckpt_path (or state_dict)")
    if config is not None:
        raise LoaderOptionError("comfy.sd.load_checkpoint: a parsed config dict is not supported; give config_path")
    options = _options()
    if config_path is not None:
        options = dataclasses.replace(options, prediction=config_prediction(Path(config_path)))
    model, clip, vae = ours(source, options, output_vae=output_vae, output_clip=output_clip)
    _finish(model, clip, vae, embedding_directory)
    return model, clip, vae


# --- diffusion models (UNETLoader) ---

def load_diffusion_model_state_dict(sd: Mapping[str, torch.Tensor], model_options: Mapping | None = None,
                                    metadata: Mapping[str, str] | None = None, disable_dynamic: bool = False) -> Any:
    """A diffusion model (LDM, `model.diffusion_model.`-prefixed or diffusers UNet names) from a
    state dict -> `ModelPatcher`, as UNETLoader loads a file (`disable_dynamic`: see
    `load_checkpoint_guess_config`)."""
    return _diffusion_model(sd, model_options)


def load_diffusion_model(unet_path: str | Path, model_options: Mapping | None = None,
                         disable_dynamic: bool = False) -> Any:
    """A diffusion model file -> `ModelPatcher` (ComfyUI's `load_diffusion_model`)."""
    return _diffusion_model(unet_path, model_options)


def _diffusion_model(source: Any, model_options: Mapping | None) -> Any:
    from comfy_core.split import load_diffusion_model as ours

    model_options = dict(model_options or {})
    weight_dtype = model_options.pop("dtype", None) or model_options.pop("weight_dtype", None)
    fp8 = bool(model_options.pop("fp8_optimizations", False))
    # ComfyUI's `custom_operations`: the UNet's layer classes (a pack's comfy.ops subclass, e.g.
    # ComfyUI-GGUF's GGMLOps, given a class or an instance), which then load their own tensors.
    operations = model_options.pop("custom_operations", None)
    model = ours(source, _options(model_options), weight_dtype=weight_dtype, fp8_optimizations=fp8,
                 operations=operations)
    _finish(model)
    return model


def load_unet(unet_path: str | Path, dtype: Any = None) -> Any:
    """ComfyUI's older name of `load_diffusion_model` (`dtype`: the UNet's storage dtype)."""
    return load_diffusion_model(unet_path, {"dtype": dtype} if dtype is not None else None)


def load_unet_state_dict(sd: Mapping[str, torch.Tensor], dtype: Any = None) -> Any:
    """ComfyUI's older name of `load_diffusion_model_state_dict`."""
    return load_diffusion_model_state_dict(sd, {"dtype": dtype} if dtype is not None else None)


# --- text encoders (CLIPLoader, DualCLIPLoader) ---

def load_clip(ckpt_paths: Sequence[str | Path], embedding_directory: Any = None,
              clip_type: Any = CLIPType.STABLE_DIFFUSION, model_options: Mapping | None = None) -> Any:
    """Text-encoder files -> our CLIP (one CLIP-L / ViT-H / bigG file, or CLIP-L + bigG for SDXL)."""
    return _text_encoders(list(ckpt_paths), embedding_directory, clip_type, model_options)


def load_text_encoder_state_dicts(state_dicts: Iterable[Mapping[str, torch.Tensor]] = (), embedding_directory: Any = None,
                                  clip_type: Any = CLIPType.STABLE_DIFFUSION,
                                  model_options: Mapping | None = None) -> Any:
    """Text-encoder state dicts -> our CLIP, as `load_clip` loads files."""
    return _text_encoders(list(state_dicts), embedding_directory, clip_type, model_options)


def _text_encoders(sources: list, embedding_directory: Any, clip_type: Any, model_options: Mapping | None) -> Any:
    from comfy_core.split import load_text_encoders

    kind = _loader_type(clip_type)
    if kind == "stable_diffusion" and len(sources) == 2:
        kind = "sdxl"  # ComfyUI picks the set from the weights: CLIP-L + bigG is SDXL's
    model_options = dict(model_options or {})
    load_device = model_options.pop("load_device", None)
    # ComfyUI's "initial_device": where the encoders sit before first use, our offload device.
    initial_device = model_options.pop("initial_device", None)
    _check_text_operations(model_options.pop("custom_operations", None), sources)
    clip = load_text_encoders(sources, kind, _options(None, model_options),
                              load_device=str(load_device) if load_device is not None else None,
                              offload_device=str(initial_device) if initial_device is not None else "cpu")
    _finish(clip=clip, embedding_directory=embedding_directory)
    return clip


def _check_text_operations(operations: Any, sources: list) -> None:
    """`custom_operations` for text encoders (ComfyUI-GGUF's CLIPLoaderGGUF passes its GGMLOps).

    Our text encoders are not built from ComfyUI's operations classes, so they are honoured where
    they cannot change a result: classes of ComfyUI's `comfy.ops` family (which only cast a plain
    weight to the input's dtype and device) over state dicts of plain tensors. A tensor subclass
    (e.g. GGUF-quantized weights, which only the pack's layers can read) or any other operations
    object is refused, naming what is missing."""
    if operations is None:
        return
    from compat.ldm_ops import disable_weight_init

    ops_class = operations if isinstance(operations, type) else type(operations)
    if not issubclass(ops_class, disable_weight_init):
        raise LoaderOptionError(f"text encoders: custom_operations {ops_class.__name__} is not a comfy.ops class; "
                                "this engine's text encoders take only comfy.ops-family operations")
    import torch

    for source in sources:
        if isinstance(source, Mapping):
            odd = sorted(k for k, v in source.items() if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor)
            if odd:
                raise LoaderOptionError(
                    f"text encoders: {len(odd)} tensors are {type(source[odd[0]]).__name__} (e.g. {odd[0]!r}), which "
                    f"only {ops_class.__name__}'s layers can read; this engine's text encoders do not use "
                    "custom_operations layers (quantized text encoders are not supported)")


# --- LoRA ---

def load_lora_for_models(model: Any, clip: Any, lora: Mapping[str, torch.Tensor], strength_model: float,
                         strength_clip: float) -> tuple[Any, Any]:
    """Clones of `model` and `clip` with the LoRA state dict `lora` added (LoraLoader's work)."""
    from comfy_core.lora.loader import load_lora_for_models as ours

    new_model, new_clip, _report = ours(model, clip, lora, strength_model, strength_clip)
    return new_model, new_clip


# --- style models and GLIGEN (what StyleModelLoader and GLIGENLoader load, by path) ---

def _core_style_model() -> type:
    from comfy_core.style_models.style_model import StyleModel as Core

    return Core


class _StyleModelType(type):
    """`isinstance(x, comfy.sd.StyleModel)` holds for our style models (what StyleModelLoader
    returns, comfy_core's class), as it does for ComfyUI's STYLE_MODEL objects."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, _core_style_model())

    def __subclasscheck__(cls, subclass: type) -> bool:
        return type.__subclasscheck__(cls, subclass) or issubclass(subclass, _core_style_model())


class StyleModel(metaclass=_StyleModelType):
    """ComfyUI's `comfy.sd.StyleModel` (a STYLE_MODEL): built as ComfyUI builds it, `StyleModel(model,
    device="cpu")` over a T2I-Adapter style network or a Flux Redux encoder, it is our style model
    (comfy_core/style_models/style_model.py) over that module; `get_cond(input)` gives the style
    tokens of a CLIP vision output. `device` is accepted and unused, as in ComfyUI."""

    def __new__(cls, model: Any, device: Any = "cpu") -> Any:
        from comfy_core.style_models.redux import ReduxImageEncoder
        from comfy_core.style_models.t2i_style import T2IStyleAdapter

        kinds = ((T2IStyleAdapter, "t2i_style"), (ReduxImageEncoder, "redux"))
        kind = next((name for network, name in kinds if isinstance(model, network)), None)
        if kind is None:
            raise TypeError(f"comfy.sd.StyleModel: {type(model).__name__} is not a style model network "
                            "(a T2I-Adapter style adapter or a Flux Redux encoder)")
        return _core_style_model()(model, kind)

    def __init__(self, model: Any, device: Any = "cpu") -> None:  # noqa: D107 -- built in __new__
        pass

    def get_cond(self, input: Any) -> Any:  # noqa: A002 -- ComfyUI's parameter name
        """The style tokens `[B, T, ctx]` of the CLIP vision output `input`."""
        return _core_style_model().get_cond(self, input)


def load_style_model(ckpt_path: str | Path) -> Any:
    """A T2I-Adapter style model or a Flux Redux file -> STYLE_MODEL (StyleModelLoader's)."""
    from comfy_core.style_models.style_model import load_style_model as ours
    from nodes.environment import current_env

    return ours(ckpt_path, mmap=getattr(current_env(), "mmap", True))


def load_gligen(ckpt_path: str | Path) -> Any:
    """A GLIGEN file -> the GLIGEN wire object (GLIGENLoader's): a patcher over the model, on the
    environment's device, tracked by its memory manager."""
    from comfy_core.gligen.load import load_gligen as ours
    from nodes.environment import current_env

    env = current_env()
    gligen = ours(ckpt_path, load_device=getattr(env.memory, "device", None), offload_device="cpu")
    if env.memory is not None:
        env.memory.track(gligen)
    return gligen


def model_detection_module() -> Any:
    """`comfy.sd.model_detection`: ComfyUI's sd.py imports comfy.model_detection as a name."""
    import importlib

    return importlib.import_module("comfy.model_detection")
