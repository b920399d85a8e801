"""SCAIL / SCAIL-2's entries of `WanConfig` from the file's names and shapes, kept apart from the
network (scail.py) so that `WanConfig.detect_from_weights` (dit.py, which the network imports) can
read them."""
from __future__ import annotations

from typing import Any, Mapping

POSE_MARKER = "patch_embedding_pose.weight"  # ComfyUI's model_detection keys
MASK_MARKER = "patch_embedding_mask.weight"
MODEL_TYPES = ("scail", "scail2")
MASK_IN_DIM = 28  # ComfyUI's SCAIL2WanModel default: 7 colour channels x 4 frames


def scail_fields(tensors: Mapping[str, Any], prefix: str, shape: Any, dim: int,
                 error: type[Exception]) -> dict[str, Any]:
    """The SCAIL entries of `WanConfig` from names and shapes: the model type, and for SCAIL-2 the
    mask embedding's input width; both extra patch embeddings must have the model's width and patch."""
    patch = tuple(shape("patch_embedding.weight"))
    pose = tuple(shape(POSE_MARKER))
    if pose != patch:
        raise error(f"Wan SCAIL: {prefix}{POSE_MARKER} has shape {pose}, the patch embedding {patch}")
    if prefix + MASK_MARKER not in tensors:
        return {"model_type": "scail"}
    mask = tuple(shape(MASK_MARKER))
    if len(mask) != 5 or mask[0] != dim or mask[2:] != patch[2:]:
        raise error(f"Wan SCAIL-2: {prefix}{MASK_MARKER} has shape {mask}, expected ({dim}, mask_in_dim, "
                    f"{', '.join(str(p) for p in patch[2:])})")
    return {"model_type": "scail2", "mask_in_dim": mask[1]}
