"""Wan 2.2 Animate's detection (comfy_core/families/wan/animate.py has the network): its marker, the
fixed widths the detection checks, and the `WanConfig` entries read from the names and shapes of an
Animate file. Apart from the network so that `WanConfig.detect_from_weights` (dit.py, which the network
imports) can read it."""
from __future__ import annotations

from typing import Any, Mapping

MODEL_TYPE = "animate"
MARKER = "face_adapter.fuser_blocks.0.k_norm.weight"  # ComfyUI's model_detection key
POSE_KEY = "pose_patch_embedding.weight"
POSE_CHANNELS = 16  # the pose video's Wan 2.1 latent
ADAPTER_EVERY = 5  # a face block after main blocks 0, 5, 10, ...
FACE_WIDTH = 1024  # the face encoder's channels per head


def animate_fields(tensors: Mapping[str, Any], prefix: str, shape: Any, dim: int, num_layers: int,
                   error: type[Exception]) -> dict[str, Any]:
    """The Animate entries of `WanConfig` from names and shapes: the model type, the motion code's
    width (`motion_encoder_dim`, the face encoder's input); the pose embedding and the face adapter
    must fit the model (num_layers // 5 fuser blocks of the model's width)."""
    for key in (POSE_KEY, "face_encoder.conv1_local.conv.weight", "face_encoder.out_proj.weight",
                "motion_encoder.dec.direction.weight"):
        if prefix + key not in tensors:
            raise error(f"Wan 2.2 Animate: {prefix}{key} is missing")
    pose = tuple(shape(POSE_KEY))
    if pose != (dim, POSE_CHANNELS, 1, 2, 2):
        raise error(f"Wan 2.2 Animate: {prefix}{POSE_KEY} has shape {pose}, expected ({dim}, {POSE_CHANNELS}, 1, 2, 2)")
    blocks = sum(1 for i in range(num_layers + 1) if f"{prefix}face_adapter.fuser_blocks.{i}.linear2.weight" in tensors)
    if blocks != num_layers // ADAPTER_EVERY:
        raise error(f"Wan 2.2 Animate: {blocks} face adapter blocks for {num_layers} main blocks, expected "
                    f"{num_layers // ADAPTER_EVERY}")
    q = tuple(shape("face_adapter.fuser_blocks.0.linear1_q.weight"))
    if q != (dim, dim):
        raise error(f"Wan 2.2 Animate: {prefix}face_adapter.fuser_blocks.0.linear1_q.weight has shape {q}, "
                    f"the model is {dim} wide")
    out = tuple(shape("face_encoder.out_proj.weight"))
    if out != (dim, FACE_WIDTH):
        raise error(f"Wan 2.2 Animate: {prefix}face_encoder.out_proj.weight has shape {out}, expected ({dim}, "
                    f"{FACE_WIDTH})")
    return {"model_type": MODEL_TYPE, "motion_encoder_dim": shape("face_encoder.conv1_local.conv.weight")[1]}
