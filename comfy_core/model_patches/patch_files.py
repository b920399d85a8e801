"""Model patch files (ComfyUI's `model_patches` folder and its ModelPatchLoader,
`comfy_extras/nodes_model_patch.py`): small networks that a model-patch node attaches to a
diffusion model. Which patch a file holds is told from its key names, in ComfyUI's order:

    lllite_conditioning1.conv1.weight                 Anima LLLite                    <- built
    controlnet_blocks.0.y_rms.weight                  Qwen-Image DiffSynth block-wise ControlNet  <- built
    feature_embedder.mid_layer_norm.bias              USO style projector (Flux)      <- built here
    control_all_x_embedder.2-1.weight                 Z-Image Fun ControlNet          <- built here
    control_img_in.weight + control_blocks.0.img_mlp.out.weight   Qwen-Image 2.1 Fun ControlNet
    control_proj_in.weight + control_blocks.0.{adaln_proj.linear,after_proj,before_proj}.weight
                                                      MiniMax H3 Fun ControlNet       <- built
    controlnet_patch_embedding.weight                 Wan Uni3C ControlNet
    *duration_head.attention_pooler.query_tokens      LTX duration head
    audio_proj.proj1.weight                           Wan MultiTalk / InfiniteTalk    <- built here
    [model.]control_model.input_hint_block.0.weight   SUPIR (SDXL)

The USO projector (uso.py), the Qwen-Image DiffSynth ControlNet (diffsynth.py), the Z-Image
Fun ControlNet (zimage_fun.py, its diffusers attention names fused as ComfyUI converts them) and
Wan's MultiTalk / InfiniteTalk audio patch (families/wan/multitalk.py, applied by multitalk.py)
and MiniMax H3's Fun ControlNet-Union (families/minimax_h3/fun_control.py: network, loader with
its int8 ConvRot layers kept as stored, and the DiT block patch) are built;
every other kind is refused with
`UnsupportedModelPatchError` naming it, and a file of none of them with `UnknownModelPatchError`
(ComfyUI fails there with an unbound local). The loaded patch is a `Patcher` over the network,
as ComfyUI's MODEL_PATCH is a model patcher whose `.model` is the network.
"""
from __future__ import annotations

import dataclasses

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.checkpoint.materialize import build_on_meta, materialize
from comfy_core.checkpoint.reader import TORCH_DTYPES, CheckpointFile
from comfy_core.families.minimax_h3.fun_control import MARKERS as MINIMAX_H3_FUN_MARKERS
from comfy_core.families.minimax_h3.fun_control import MiniMaxH3FunControlError, load_fun_control
from comfy_core.families.wan.multitalk import (MULTITALK_MARKER, MultiTalkConfig, MultiTalkError,
                                               MultiTalkPatchNetwork)
from comfy_core.model_patches.anima_lllite import ANIMA_LLLITE_MARKER, load_anima_lllite
from comfy_core.model_patches.diffsynth import (DIFFSYNTH_MARKER, DiffSynthControlNetConfig,
                                                QwenImageBlockWiseControlNet)
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.uso import USO_MARKER, USO_PREFIX, UsoProjectorConfig, UsoStyleProjector
from comfy_core.model_patches.zimage_fun import (ZIMAGE_FUN_MARKER, ZImageFunControlConfig, ZImageFunControlNet,
                                                 convert_zimage_fun_keys, is_broken_release)
from comfy_core.models.storage_cast import cast_weights_at_run_time
from comfy_core.patching.patcher import Patcher

USO = "uso_style_projector"
DIFFSYNTH = "qwen_image_diffsynth_controlnet"
ZIMAGE_FUN = "z_image_fun_controlnet"
MULTITALK = "wan_multitalk"
MINIMAX_H3_FUN = "minimax_h3_fun_controlnet"
ANIMA_LLLITE = "anima_lllite"


@dataclass(frozen=True)
class PatchKind:
    """One kind of patch file: `name` (stable id), `title` (for messages), `family` it patches,
    `matches(names)`, and why it is not built here (None when it is)."""

    name: str
    title: str
    family: str
    matches: Callable[[Mapping[str, Any]], bool]
    refused: str | None = None


def _has(*keys: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda names: all(k in names for k in keys)


_NO_FAMILY = "its model family ({}) is not implemented here"
_NO_NODE = "the {} family is here but this patch's network and apply node are not implemented yet"

# ComfyUI's detection order (a file is the first kind that matches).
PATCH_KINDS: tuple[PatchKind, ...] = (
    PatchKind(ANIMA_LLLITE, "Anima LLLite", "Anima", _has(ANIMA_LLLITE_MARKER)),
    PatchKind(DIFFSYNTH, "Qwen-Image DiffSynth ControlNet", "Qwen-Image", _has(DIFFSYNTH_MARKER)),
    PatchKind(USO, "USO style projector", "Flux", _has(USO_MARKER)),
    PatchKind(ZIMAGE_FUN, "Z-Image Fun ControlNet", "Z-Image", _has(ZIMAGE_FUN_MARKER)),
    PatchKind("qwen_image_21_fun_controlnet", "Qwen-Image 2.1 Fun ControlNet", "Qwen-Image",
              _has("control_img_in.weight", "control_blocks.0.img_mlp.out.weight"), _NO_NODE.format("Qwen-Image")),
    PatchKind(MINIMAX_H3_FUN, "MiniMax H3 Fun ControlNet", "MiniMax H3", _has(*MINIMAX_H3_FUN_MARKERS)),
    PatchKind("wan_uni3c_controlnet", "Wan Uni3C ControlNet", "Wan", _has("controlnet_patch_embedding.weight"),
              _NO_NODE.format("Wan")),
    PatchKind("ltx_duration_head", "LTX duration head", "LTX-Video",
              lambda names: "attention_pooler.query_tokens" in names
              or any(k.endswith("duration_head.attention_pooler.query_tokens") for k in names),
              _NO_FAMILY.format("LTX-Video")),
    PatchKind(MULTITALK, "Wan MultiTalk audio patch", "Wan", _has(MULTITALK_MARKER)),
    PatchKind("supir", "SUPIR", "SDXL",
              lambda names: ("model.control_model.input_hint_block.0.weight" in names
                             or "control_model.input_hint_block.0.weight" in names),
              _NO_NODE.format("SDXL")),
)


class UnsupportedModelPatchError(ModelPatchError):
    """A model patch file of a kind ComfyUI loads but this engine does not build; `kind` names it."""

    def __init__(self, path: str | Path, kind: PatchKind) -> None:
        self.path = Path(path)
        self.kind = kind.name
        super().__init__(f"{self.path}: a {kind.title} model patch (for {kind.family}) is not supported: "
                         f"{kind.refused}")


class UnknownModelPatchError(ModelPatchError):
    """A file that is none of the model patch kinds (`PATCH_KINDS`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        known = ", ".join(k.title for k in PATCH_KINDS)
        super().__init__(f"{self.path}: not a model patch file (none of: {known})")


def detect_model_patch(names: Mapping[str, Any]) -> PatchKind | None:
    """The kind of patch whose keys `names` holds (ComfyUI's order), or None."""
    for kind in PATCH_KINDS:
        if kind.matches(names):
            return kind
    return None


def _weight_dtype(checkpoint: CheckpointFile, prefix: str) -> torch.dtype:
    """ComfyUI's `comfy.utils.weight_dtype`: the floating dtype most tensors are stored in."""
    counts = Counter(TORCH_DTYPES[info.dtype] for name, info in checkpoint.tensors.items()
                     if name.startswith(prefix) and TORCH_DTYPES[info.dtype].is_floating_point)
    return counts.most_common(1)[0][0] if counts else torch.float32


def _uso(tensors: Mapping[str, Any], prefix: str) -> Callable[[], torch.nn.Module]:
    config = UsoProjectorConfig.detect_from_weights(tensors, prefix)
    return lambda: UsoStyleProjector(config)


def _diffsynth(tensors: Mapping[str, Any], prefix: str) -> Callable[[], torch.nn.Module]:
    config = DiffSynthControlNetConfig.detect_from_weights(tensors, prefix)
    return lambda: QwenImageBlockWiseControlNet(config)


def _multitalk(tensors: Mapping[str, Any], prefix: str) -> Callable[[], torch.nn.Module]:
    try:
        config = MultiTalkConfig.detect_from_weights(tensors, prefix)
    except MultiTalkError as exc:
        raise ModelPatchError(str(exc)) from None
    return lambda: MultiTalkPatchNetwork(config)


# The kinds built here: (key prefix, config reader returning the network's constructor).
_BUILDERS: dict[str, tuple[str, Callable[[Mapping[str, Any], str], Callable[[], torch.nn.Module]]]] = {
    USO: (USO_PREFIX, _uso),
    DIFFSYNTH: ("", _diffsynth),
    MULTITALK: ("", _multitalk),
}
# Kinds ComfyUI builds with `manual_cast` layers: stored in the file's dtype, each weight cast to
# its input's dtype as its layer runs (the MultiTalk patch's fp16 weights in a bf16 Wan run).
_CAST_AT_RUN_TIME = {MULTITALK}


def _load_zimage_fun(checkpoint: CheckpointFile, dtype: torch.dtype) -> torch.nn.Module:
    """The Z-Image Fun ControlNet: every tensor read (in `dtype` when floating), the attention
    names converted (`convert_zimage_fun_keys`), the network built from their shapes."""
    state = {name: checkpoint.read(name, dtype if TORCH_DTYPES[info.dtype].is_floating_point else None)
             for name, info in checkpoint.tensors.items()}
    try:
        state = convert_zimage_fun_keys(state)
        config = ZImageFunControlConfig.detect_from_weights(state)
        if config.refiner_control and is_broken_release(state):
            config = dataclasses.replace(config, broken=True)
    except ModelPatchError as exc:
        raise ModelPatchError(f"{checkpoint.path}: {exc}") from None
    module = build_on_meta(lambda: ZImageFunControlNet(config))
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelPatchError(f"{checkpoint.path}: Z-Image Fun ControlNet: {exc}") from None
    # ComfyUI builds it with `manual_cast` layers: stored in the file's dtype (bf16 as released),
    # computed in the main model's dtype, each weight cast as its layer runs.
    cast_weights_at_run_time(module)
    return module


def load_model_patch(path: str | Path, *, load_device: torch.device | str | None = None,
                     offload_device: torch.device | str | None = "cpu", mmap: bool = True) -> Patcher:
    """A model patch file -> a `Patcher` over its network (stored in the file's weight dtype, on
    `offload_device`). Raises `UnsupportedModelPatchError` (naming the kind) for a patch that
    is recognised but not built here, `UnknownModelPatchError` for any other file,
    `ModelPatchError` for a built kind whose tensors disagree, and the checkpoint reader's
    `CheckpointError` for an unreadable file."""
    with CheckpointFile(path) as checkpoint:
        kind = detect_model_patch(checkpoint.tensors)
        if kind is None:
            raise UnknownModelPatchError(checkpoint.path)
        if kind.refused is not None:
            raise UnsupportedModelPatchError(checkpoint.path, kind)
        dtype = _weight_dtype(checkpoint, "")
        if kind.name == ZIMAGE_FUN:  # renamed and fused tensors: read, converted, then assigned
            module = _load_zimage_fun(checkpoint, dtype)
        elif kind.name == ANIMA_LLLITE:  # its metadata says the version, ASPP dilations, inpaint input
            try:
                module = load_anima_lllite(checkpoint)
            except (ModelPatchError, CheckpointError) as exc:
                raise ModelPatchError(f"{checkpoint.path}: {exc}") from None
        elif kind.name == MINIMAX_H3_FUN:  # quantised layers kept as stored, float32 islands
            try:
                module = load_fun_control(checkpoint)
            except (MiniMaxH3FunControlError, CheckpointError) as exc:
                raise ModelPatchError(f"{checkpoint.path}: {exc}") from None
        else:
            prefix, build = _BUILDERS[kind.name]
            try:
                make = build(checkpoint.tensors, prefix)
            except ModelPatchError as exc:
                raise ModelPatchError(f"{checkpoint.path}: {exc}") from None
            dtype = _weight_dtype(checkpoint, prefix)
            try:
                module = materialize(build_on_meta(make), checkpoint, prefix, dtype, kind.title, zero_copy=mmap)
            except CheckpointError as exc:
                raise ModelPatchError(str(exc)) from None
            if kind.name in _CAST_AT_RUN_TIME:
                cast_weights_at_run_time(module)
    module.eval()
    module.requires_grad_(False)
    if offload_device is not None:
        module.to(offload_device)
    return Patcher(module, load_device=load_device, offload_device=offload_device)


__all__ = ["ANIMA_LLLITE", "DIFFSYNTH", "MINIMAX_H3_FUN", "MULTITALK", "PATCH_KINDS", "USO", "PatchKind", "UnknownModelPatchError",
           "UnsupportedModelPatchError", "detect_model_patch", "load_model_patch"]
