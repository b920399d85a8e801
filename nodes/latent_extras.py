"""Latent and mask nodes of today's ComfyUI (2026), declared as its V3 schema renders them
(graph/v3_schema.py); behaviour read from ComfyUI's files, written here.

* LatentOperationBlend (comfy_extras/nodes_latent.py, experimental): a LATENT_OPERATION that
  moves the latent it is applied to toward a reference latent, `lerp(latent, reference,
  strength)`; the reference is resized (nearest) to the latent's size when it differs and cut or
  tiled to its batch. Strength 0 hands the latent back untouched.
* BatchMasksNode / BatchLatentsNode (comfy_extras/nodes_post_processing.py): growing inputs
  (`masks.mask0`, `masks.mask1`, ... / `latents.latent0`, ...) joined into one batch in socket
  order, each later one resized (bilinear, centre crop) to the first one's size. The latent
  batch keeps the first latent's other keys and lists every item's `batch_index` (an item without
  one counts 0..b-1), so each keeps its noise seed.

Not here, because no readable ComfyUI file defines it: ConditioningMultiply (no such built-in
node in today's ComfyUI; node packs such as RES4LYF define one).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.v3_schema import Autogrow, Float, Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

LATENT_MODULE = "comfy_extras.nodes_latent"
POST_PROCESSING_MODULE = "comfy_extras.nodes_post_processing"


def _latent(value: Any, name: str) -> dict:
    import torch

    if not isinstance(value, dict) or not isinstance(value.get("samples"), torch.Tensor):
        raise NodeInputError(name, 'a LATENT {"samples": tensor}', describe(value))
    return value


# -- LatentOperationBlend --------------------------------------------------------------------------

class BlendTowardReference:
    """A LATENT_OPERATION (`operation(latent=samples) -> samples`, ComfyUI's convention) that
    lerps the latent toward `reference` by `strength`."""

    def __init__(self, reference: "torch.Tensor", strength: float) -> None:
        self.reference = reference
        self.strength = float(strength)

    def __call__(self, latent: "torch.Tensor", **_: Any) -> "torch.Tensor":
        import torch

        from comfy_core.latent.arithmetic import repeat_to_batch

        if self.strength == 0:
            return latent
        target = self.reference.to(latent)
        if target.shape[2:] != latent.shape[2:]:
            target = torch.nn.functional.interpolate(target, size=tuple(latent.shape[2:]), mode="nearest")
        return torch.lerp(latent, repeat_to_batch(target, latent.shape[0]), self.strength)

    def __repr__(self) -> str:
        return f"BlendTowardReference(shape={tuple(self.reference.shape)}, strength={self.strength})"


@v3_node("LatentOperationBlend", display_name="Latent Operation Blend", category="model/latent/advanced/operations",
         python_module=LATENT_MODULE, experimental=True,
         description="Blend the entire latent toward the reference latent, resizing the reference with "
                     "nearest-neighbor interpolation when needed.",
         inputs=[Socket("reference", "LATENT"),
                 Float("strength", default=1.0, min=0.0, max=1.0, step=0.0001,
                       tooltip="0 leaves the latent unchanged; 1 matches the resized reference latent.")],
         outputs=[Output("LATENT_OPERATION")])
def latent_operation_blend(reference: Any, strength: float) -> tuple[BlendTowardReference]:
    """The blend operation toward `reference["samples"]`."""
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0.0 <= strength <= 1.0:
        raise NodeInputError("strength", "a FLOAT in 0..1", repr(strength))
    return (BlendTowardReference(_latent(reference, "reference")["samples"], strength),)


# -- BatchMasksNode / BatchLatentsNode -------------------------------------------------------------

def batch_masks(masks: list["torch.Tensor"]) -> "torch.Tensor | None":
    """`[b_i, H, W]` masks -> one `[sum b_i, H, W]` batch at the first mask's size."""
    import torch

    from comfy_core.image.resize import upscale_samples

    if not masks:
        return None
    height, width = masks[0].shape[1], masks[0].shape[2]
    same = [m if m.shape[1:] == masks[0].shape[1:]
            else upscale_samples(m.unsqueeze(1), width, height, "bilinear", "center").squeeze(1) for m in masks]
    return torch.cat(same, dim=0)


def batch_latents(latents: list[dict]) -> dict | None:
    """LATENTs -> one: the first's keys, samples joined along the batch (each resized to the
    first's size) and every item's batch_index."""
    import torch

    from comfy_core.latent.arithmetic import fit_to

    if not latents:
        return None
    first = latents[0]["samples"]
    out = dict(latents[0])
    out["batch_index"] = [i for latent in latents
                          for i in latent.get("batch_index", range(latent["samples"].shape[0]))]
    out["samples"] = torch.cat([fit_to(latent["samples"], first.shape, repeat_batch=False) for latent in latents],
                               dim=0)
    return out


@v3_node("BatchMasksNode", display_name="Batch Masks", category="image/mask", python_module=POST_PROCESSING_MODULE,
         search_aliases=["combine masks", "stack masks", "merge masks"],
         inputs=[Autogrow("masks", Socket("mask", "MASK"), prefix="mask", min=1, max=50)],
         outputs=[Output("MASK")])
def batch_masks_node(masks: dict[str, Any]) -> tuple[Any]:
    """The linked masks as one batch, in socket order."""
    import torch

    for name, mask in masks.items():
        if not isinstance(mask, torch.Tensor) or mask.ndim != 3:
            raise NodeInputError(f"masks.{name}", "a MASK [B,H,W]", describe(mask))
    return (batch_masks(list(masks.values())),)


@v3_node("BatchLatentsNode", display_name="Batch Latents", category="model/latent/batch",
         python_module=POST_PROCESSING_MODULE, search_aliases=["combine latents", "stack latents", "merge latents"],
         inputs=[Autogrow("latents", Socket("latent", "LATENT"), prefix="latent", min=1, max=50)],
         outputs=[Output("LATENT")])
def batch_latents_node(latents: dict[str, Any]) -> tuple[Any]:
    """The linked latents as one batch, in socket order."""
    for name, latent in latents.items():
        _latent(latent, f"latents.{name}")
    return (batch_latents(list(latents.values())),)
