"""SAM 3 / 3.1 files -> the network (`Sam3Wrapper`; comfy_core/loading.py `load_sam3` puts it in a
MODEL patcher beside its text encoder, comfy_core/text_encoders/sam3_clip.py).

ComfyUI loads `sam3.1_multiplex*.safetensors` with CheckpointLoaderSimple (MODEL + CLIP, no
VAE) and UNETLoader (MODEL); both loaders here check `is_sam3` first (comfy_core/loading.py,
comfy_core/split/diffusion_model.py), as for the RT-DETR detectors: SAM 3 is never sampled, so it
is no family. Names: `detector.*` and `tracker.*` at the top level (or under
`model.diffusion_model.`); the text encoder in transformers' CLIP layout (`text_model.*`) under
one of sam3_clip.py's `TEXT_PREFIXES`. SAM 3.1's video tracker (memory encoder and attention,
multiplex decoder: tracker.py) is built and read when the file has all of it (config.py
`VIDEO_MARKERS`); a file without it loads for detection, and SAM 3's own video tensors are left
unread (logged).
"""
from __future__ import annotations

import logging
from typing import Any

import torch

from comfy_core.models.sam3.config import DETECTOR, TRACKER, Sam3Config, Sam3ConfigError, is_sam3

log = logging.getLogger(__name__)

MODEL_PREFIXES = ("", "model.diffusion_model.")


def model_prefix(names: Any) -> str | None:
    """The prefix the file's `detector.*` names sit under, or None when it is no SAM 3 file."""
    for prefix in MODEL_PREFIXES:
        if is_sam3({n[len(prefix):] for n in names if n.startswith(prefix + DETECTOR)}):
            return prefix
    return None


def is_sam3_file(names: Any) -> bool:
    return model_prefix(names) is not None


def _dtype(file: Any, prefix: str, policy: Any, weight_dtype: torch.dtype | None) -> torch.dtype:
    from comfy_core.checkpoint.dtype import UNET, DtypePolicy

    allowed = [torch.float16, torch.bfloat16, torch.float32]
    if weight_dtype in allowed:
        return weight_dtype
    policy = policy or DtypePolicy()
    from comfy_core.checkpoint.reader import TORCH_DTYPES

    name = prefix + "detector.backbone.vision_backbone.trunk.blocks.0.attn.qkv.weight"
    stored = TORCH_DTYPES.get(str(file.tensors[name].dtype), torch.float32)
    dtype = policy.dtype_for(UNET, allowed, stored)
    return dtype if dtype in allowed else torch.float32


def load_sam3_network(file: Any, policy: Any = None, weight_dtype: torch.dtype | None = None) -> Any:
    """An open SAM 3 / 3.1 `CheckpointFile` (`is_sam3_file`) -> `Sam3Wrapper` over the network in
    its dtype (float16 / bfloat16 / float32: `weight_dtype` when it is one of them, else the dtype
    policy's pick for the stored dtype). Every tensor the built network has must be in the file
    with its shape (`load_exact`); video tensors the built network has no place for (SAM 3's own
tracker, or a partial set) are left unread (logged)."""
    from comfy_core.checkpoint.errors import ShapeMismatchError
    from comfy_core.models.resident import load_exact
    from comfy_core.models.sam3.model import Sam3Model, Sam3Wrapper

    def error(message: str) -> Exception:
        return ShapeMismatchError(file.path, message)

    prefix = model_prefix(file.keys())
    if prefix is None:
        raise ShapeMismatchError(file.path, "not a SAM 3 file")
    try:
        config = Sam3Config.detect_from_weights(file.tensors, prefix)
    except Sam3ConfigError as exc:
        raise ShapeMismatchError(file.path, str(exc)) from None
    dtype = _dtype(file, prefix, policy, weight_dtype)
    with torch.device("meta"):
        network = Sam3Model(config)
    network = network.to_empty(device="cpu")
    wanted = set(network.state_dict())
    tensors = {}
    for name in file.keys():
        if name.startswith(prefix) and name[len(prefix):].startswith((DETECTOR, TRACKER)):
            short = name[len(prefix):]
            if short in wanted:
                tensors[short] = file.read(name)
    skipped = sum(1 for n in file.keys() if n.startswith(prefix + TRACKER)) - sum(1 for n in tensors if n.startswith(TRACKER))
    network = load_exact(network, tensors, what=f"{file.path.name}: SAM 3", error=error, dtype=dtype)
    _rebuild_buffers(network, config)
    if skipped:
        log.info("%s: %d tracker tensors (video memory / propagation) not read: no video tracker built for them",
                 file.path.name, skipped)
    return Sam3Wrapper(network, dtype)


def _rebuild_buffers(network: Any, config: Sam3Config) -> None:
    """Non-persistent buffers (RoPE angles) lost by the meta build, computed again."""
    from comfy_core.models.sam3.backbone import axial_rope

    trunk = network.detector.backbone["vision_backbone"].trunk
    grid = config.image_size // config.patch
    head_dim = config.vit_dim // config.vit_heads
    trunk.rope_global = axial_rope(grid, grid, head_dim, scale=config.pretrain_grid / grid)
    trunk.rope_window = axial_rope(config.window, config.window, head_dim)
    encoder = getattr(getattr(network.tracker, "transformer", None), "encoder", None)
    if encoder is not None:
        from comfy_core.models.sam3.tracker import MEMORY_HEADS

        encoder.rope = axial_rope(grid, grid, config.d_model // MEMORY_HEADS)
