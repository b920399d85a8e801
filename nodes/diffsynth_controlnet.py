"""QwenImageDiffsynthControlnet and ZImageFunControlnet (today's ComfyUI,
comfy_extras/nodes_model_patch.py, V1 nodes, EXPERIMENTAL).

QwenImageDiffsynthControlnet (a V1 node,
EXPERIMENTAL): DiffSynth's block-wise ControlNet (a MODEL_PATCH from ModelPatchLoader) applied to
a Qwen-Image MODEL as a `double_block` patch (comfy_core/model_patches/diffsynth.py): the control
image, VAE-encoded at the latent's size, steers every transformer block's image tokens by
`strength`. The Inpaint release also reads `mask` (ComfyUI's MASK, 1 = repaint; inverted before
use, as ComfyUI's node does).

ZImageFunControlnet: Alibaba PAI's Z-Image Fun ControlNet (comfy_core/model_patches/zimage_fun.py)
as `noise_refiner` and `double_block` patches of a Z-Image MODEL: a control image and, for the
inpaint-capable releases, an inpaint image and mask (inverted, 1 = keep).

QwenImageDiffsynthControlnet given a Z-Image Fun MODEL_PATCH applies it as ZImageFunControlnet does
(ComfyUI's node tests the patch's network; the Z-Image Fun union template wires it so).

Differences from ComfyUI, by house rule (bad input is an error): a MODEL_PATCH of another kind,
a model of another family or width, one with more blocks than the DiffSynth patch, or no image
at all are node errors (ComfyUI fails inside sampling).
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run (registration must not import torch).

MODULE = "comfy_extras.nodes_model_patch"


def _diffsynth_network(model_patch: Any) -> Any:
    from comfy_core.model_patches.diffsynth import QwenImageBlockWiseControlNet

    module = getattr(model_patch, "model", None)
    if not isinstance(module, QwenImageBlockWiseControlNet) or not hasattr(model_patch, "applied"):
        raise NodeInputError("model_patch", "a Qwen-Image DiffSynth ControlNet MODEL_PATCH (ModelPatchLoader)",
                             describe(module if module is not None else model_patch))
    return module


@node("QwenImageDiffsynthControlnet", display_name="Apply Qwen Image DiffSynth ControlNet",
      category="model/patch/qwen", python_module=MODULE, experimental=True,
      inputs=[Input("model", "MODEL"), Input("model_patch", "MODEL_PATCH"), Input("vae", "VAE"),
              Input("image", "IMAGE"), Float("strength", default=1.0, min=-10.0, max=10.0, step=0.01),
              Input("mask", "MASK", optional=True)],
      outputs=[Output("MODEL")])
def qwen_image_diffsynth_controlnet(model: Any, model_patch: Any, vae: Any, image: Any, strength: float,
                                    mask: Any = None) -> tuple[Any]:
    """A clone of the Qwen-Image MODEL with the block-wise ControlNet after each block; given a
    Z-Image Fun ControlNet patch, what ZImageFunControlnet does (ComfyUI's node dispatches on the
    patch's network, and the Z-Image Fun templates use this node)."""
    from comfy_core.model_patches.diffsynth import DiffSynthControlNetPatch
    from comfy_core.model_patches.zimage_fun import ZImageFunControlNet

    if isinstance(getattr(model_patch, "model", None), ZImageFunControlNet):
        return z_image_fun_controlnet(model, model_patch, vae, strength, image=image, mask=mask)
    model = checks.model(model)
    network = _diffsynth_network(model_patch)
    vae = checks.vae(vae)
    image = checks.image_batch(image, "image")[..., :3]
    strength = checks.number(strength, "strength", -10.0, 10.0)
    family = getattr(getattr(model.model, "family", None), "name", None)
    blocks = getattr(getattr(model.model, "diffusion_model", None), "transformer_blocks", None)
    config = network.config
    if family != "qwen_image" or blocks is None:
        raise NodeInputError("model", "a Qwen-Image model (the DiffSynth ControlNet's)", f"a {family} model")
    width = getattr(model.model.diffusion_model, "inner_dim", None)
    if len(blocks) > config.num_layers or width != config.dim:
        raise NodeInputError("model", f"a Qwen-Image model of at most {config.num_layers} blocks of width "
                             f"{config.dim} (the ControlNet's)", f"{len(blocks)} blocks of width {width}")
    if mask is not None:
        mask = 1.0 - checks.mask_batch(mask, "mask")  # the Inpaint ControlNet reads 1 = keep
    patched = model.clone()
    patched.add_block_patch("double_block", DiffSynthControlNetPatch(model_patch, vae, image, strength, mask))
    return (patched,)


@node("ZImageFunControlnet", display_name="Apply Z-Image Fun ControlNet", category="model/patch/z-image",
      python_module=MODULE, experimental=True,
      inputs=[Input("model", "MODEL"), Input("model_patch", "MODEL_PATCH"), Input("vae", "VAE"),
              Float("strength", default=1.0, min=-10.0, max=10.0, step=0.01),
              Input("image", "IMAGE", optional=True), Input("inpaint_image", "IMAGE", optional=True),
              Input("mask", "MASK", optional=True)],
      outputs=[Output("MODEL")])
def z_image_fun_controlnet(model: Any, model_patch: Any, vae: Any, strength: float, image: Any = None,
                           inpaint_image: Any = None, mask: Any = None) -> tuple[Any]:
    """A clone of the Z-Image MODEL with the Fun ControlNet after its noise refiner and main blocks."""
    from comfy_core.model_patches.zimage_fun import ZImageFunControlNet, ZImageFunControlPatch

    model = checks.model(model)
    module = getattr(model_patch, "model", None)
    if not isinstance(module, ZImageFunControlNet) or not hasattr(model_patch, "applied"):
        raise NodeInputError("model_patch", "a Z-Image Fun ControlNet MODEL_PATCH (ModelPatchLoader)",
                             describe(module if module is not None else model_patch))
    vae = checks.vae(vae)
    strength = checks.number(strength, "strength", -10.0, 10.0)
    image = None if image is None else checks.image_batch(image, "image")[..., :3]
    inpaint_image = None if inpaint_image is None else checks.image_batch(inpaint_image, "inpaint_image")[..., :3]
    if image is None and (inpaint_image is None or module.additional_in_dim == 0):
        raise NodeInputError("image", "a control image (or, for an inpaint ControlNet, an inpaint_image)", "None")
    family = getattr(getattr(model.model, "family", None), "name", None)
    width = getattr(getattr(getattr(model.model, "diffusion_model", None), "config", None), "dim", None)
    if family != "zimage" or width != module.config.blocks.dim:
        raise NodeInputError("model", f"a Z-Image model of width {module.config.blocks.dim} (the ControlNet's)",
                             f"a {family} model of width {width}")
    if mask is not None:
        mask = 1.0 - checks.mask_batch(mask, "mask")  # the ControlNet reads 1 = keep
    patch = ZImageFunControlPatch(model_patch, vae, image, strength, inpaint_image=inpaint_image, mask=mask)
    patched = model.clone()
    patched.add_block_patch("noise_refiner", patch)
    patched.add_block_patch("double_block", patch)
    return (patched,)
