"""Wan Dancer's detection (comfy_core/families/wan/dancer.py has the network): its marker, ComfyUI's
fixed constants, and the `WanConfig` entries read from the names and shapes of a Dancer file. Apart
from the network so that `WanConfig.detect_from_weights` (dit.py, which the network imports) can read it."""
from __future__ import annotations

from typing import Any, Mapping

MODEL_TYPE = "wandancer"
MARKER = "patch_embedding_global.weight"   # ComfyUI's model_detection key
MUSIC_INJECT_LAYERS = (0, 4, 8, 12, 16, 20, 24, 27)
MUSIC_HEADS = 4                              # ComfyUI's constructor default
DANCER_FIELDS = ("music_feature_dim", "music_dim", "music_ffn_dim", "music_layers", "music_fused_qkv")


def dancer_fields(tensors: Mapping[str, Any], prefix: str, shape: Any, dim: int,
                  error: type[Exception]) -> dict[str, Any]:
    """The Dancer entries of `WanConfig` from names and shapes: the music widths (projection,
    FFN, depth) and whether the music q/k/v are fused; the injector count must be ComfyUI's 8."""
    from comfy_core.models.weight_shapes import count_numbered

    projection = shape("music_projection.weight")                               # [music_dim, features]
    layers = count_numbered(tensors, prefix, "music_encoder", error, "Wan Dancer")
    if layers == 0:
        raise error(f"Wan Dancer: no {prefix}music_encoder.N weights")
    injectors = sum(1 for k in tensors if k.startswith(prefix + "music_injector.injector.") and k.endswith(".q.weight"))
    if injectors != len(MUSIC_INJECT_LAYERS):
        raise error(f"Wan Dancer: {injectors} music injectors under {prefix}music_injector.injector, expected "
                    f"{len(MUSIC_INJECT_LAYERS)}")
    if projection[0] % MUSIC_HEADS or (projection[0] // MUSIC_HEADS) % 2:
        raise error(f"Wan Dancer: a music width of {projection[0]} does not make {MUSIC_HEADS} RoPE heads")
    global_patch = shape(MARKER)
    if tuple(global_patch) != tuple(shape("patch_embedding.weight")):
        raise error(f"Wan Dancer: {prefix}{MARKER} has shape {tuple(global_patch)}, the patch embedding "
                    f"{tuple(shape('patch_embedding.weight'))}")
    return {"model_type": MODEL_TYPE, "music_feature_dim": projection[1], "music_dim": projection[0],
            "music_ffn_dim": shape("music_encoder.0.linear1.weight")[0], "music_layers": layers,
            "music_fused_qkv": prefix + "music_encoder.0.self_attn.in_proj_weight" in tensors}
