"""ControlNet nodes with ComfyUI 0.3.64's names, sockets and semantics (`nodes.py`,
`comfy_extras/nodes_controlnet.py`): ControlNetLoader, DiffControlNetLoader, ControlNetApply
(deprecated), ControlNetApplyAdvanced, ControlNetApplySD3 (deprecated: Apply ControlNet with a
required VAE, for ControlNets whose hint is a latent), SetUnionControlNetType,
ControlNetInpaintingAliMamaApply.

Files come from the `controlnet` model folders (models/controlnet and models/t2i_adapter, as
ComfyUI's). The work is in `comfy_core.controlnet`; CONTROL_NET is a `ControlBase` (ControlNet,
ControlLora, T2IAdapter). Applying one copies it per conditioning chain: every entry of the
result carries `control` (a copy whose previous ControlNet is the entry's former `control`, one
copy per distinct former value, shared by the positive and the negative so they batch together)
and `control_apply_to_uncond`; inputs are never mutated. Strength 0 returns the conditioning
unchanged, as ComfyUI.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.native import Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes.environment import current_env, model_file, model_files
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

EXTRAS = "comfy_extras.nodes_controlnet"
SD3_MODULE = "comfy_extras.nodes_sd3"
CATEGORY = "conditioning/controlnet"
# comfy_core.controlnet.types.UNION_CONTROLNET_TYPES, in its order (kept here torch-free).
UNION_TYPES = ["openpose", "depth", "hed/pidi/scribble/ted", "canny/lineart/anime_lineart/mlsd", "normal",
               "segment", "tile", "repaint"]


_files = model_files("controlnet")  # the loader combos' live options


def _path(name: Any) -> Any:
    return model_file("controlnet", name, "control_net_name")


def _load(name: Any, model: Any = None) -> Any:
    from comfy_core.checkpoint.dtype import UNET
    from comfy_core.controlnet.load import load_controlnet
    from nodes.loaders import _options

    options = _options()  # the environment's dtype policy: a ControlNet runs in the model's dtype
    control = load_controlnet(_path(name), model, options.dtype_policy.dtype_for(UNET),
                              load_device=options.device, mmap=options.mmap)
    env = current_env()
    if env.memory is not None:
        for patcher in control.get_models():
            env.memory.track(patcher)
    return control


def _control_net(value: Any, input_name: str = "control_net") -> Any:
    if not (callable(getattr(value, "copy", None)) and callable(getattr(value, "set_cond_hint", None))):
        raise NodeInputError(input_name, "a CONTROL_NET (from ControlNetLoader)", describe(value))
    return value


def _strength(value: Any) -> float:
    return float(checks.number(value, "strength", 0.0))


def _percent(value: Any, input_name: str) -> float:
    return float(checks.number(value, input_name, 0.0, 1.0))


@node("ControlNetLoader", category="loaders", display_name="Load ControlNet Model",
      inputs=[Combo("control_net_name", _files)], outputs=[Output("CONTROL_NET")])
def load_controlnet(control_net_name: str) -> tuple[Any]:
    """A ControlNet, control-LoRA or T2I-Adapter file -> CONTROL_NET."""
    return (_load(control_net_name),)


@node("DiffControlNetLoader", category="loaders", display_name="Load ControlNet Model (diff)",
      inputs=[Input("model", "MODEL"), Combo("control_net_name", _files)], outputs=[Output("CONTROL_NET")])
def load_diff_controlnet(model: Any, control_net_name: str) -> tuple[Any]:
    """As ControlNetLoader; a diff ControlNet's weights are offsets added to `model`'s UNet."""
    return (_load(control_net_name, checks.model(model)),)


@node("ControlNetApply", category=CATEGORY, display_name="Apply ControlNet (OLD)", deprecated=True,
      inputs=[Input("conditioning", "CONDITIONING"), Input("control_net", "CONTROL_NET"), Input("image", "IMAGE"),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def apply_controlnet_old(conditioning: list, control_net: Any, image: torch.Tensor, strength: float) -> tuple[list]:
    """One ControlNet copy per entry, over the whole run, lent to the negative by the sampler
    (`control_apply_to_uncond`)."""
    conditioning = checks.conditioning(conditioning)
    control_net = _control_net(control_net)
    hint = checks.image_batch(image, "image").movedim(-1, 1)
    strength = _strength(strength)
    if strength == 0:
        return (conditioning,)
    out = []
    for tensor, options in conditioning:
        c_net = control_net.copy().set_cond_hint(hint, strength)
        if "control" in options:
            c_net.set_previous_controlnet(options["control"])
        out.append([tensor, {**options, "control": c_net, "control_apply_to_uncond": True}])
    return (out,)


def apply_to_pair(positive: list, negative: list, control_net: Any, hint: torch.Tensor, strength: float,
                  start_percent: float, end_percent: float, vae: Any = None,
                  extra_concat: list | None = None) -> tuple[list, list]:
    """ComfyUI's ControlNetApplyAdvanced.apply_controlnet on checked inputs (hint [B, C, H, W])."""
    if strength == 0:
        return positive, negative
    copies: dict[int, Any] = {}  # id(previous control) -> its copy, shared by both lists
    keep: list[Any] = []  # the previous values, alive while `copies` is keyed by their ids
    lists = []
    for conditioning in (positive, negative):
        out = []
        for tensor, options in conditioning:
            previous = options.get("control")
            c_net = copies.get(id(previous))
            if c_net is None:
                c_net = control_net.copy().set_cond_hint(hint, strength, (start_percent, end_percent), vae=vae,
                                                         extra_concat=list(extra_concat or []))
                c_net.set_previous_controlnet(previous)
                copies[id(previous)] = c_net
                keep.append(previous)
            out.append([tensor, {**options, "control": c_net, "control_apply_to_uncond": False}])
        lists.append(out)
    return lists[0], lists[1]


ADVANCED_INPUTS = [Float("strength", default=1.0, min=0.0, max=10.0, step=0.01),
                   Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001),
                   Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001)]


@node("ControlNetApplyAdvanced", category=CATEGORY, display_name="Apply ControlNet",
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Input("control_net", "CONTROL_NET"), Input("image", "IMAGE"), *ADVANCED_INPUTS,
              Input("vae", "VAE", optional=True)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def apply_controlnet(positive: list, negative: list, control_net: Any, image: torch.Tensor, strength: float,
                     start_percent: float, end_percent: float, vae: Any = None) -> tuple[list, list]:
    """The ControlNet on both conditionings between start and end percent of the run."""
    return apply_to_pair(checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"),
                         _control_net(control_net), checks.image_batch(image, "image").movedim(-1, 1),
                         _strength(strength), _percent(start_percent, "start_percent"),
                         _percent(end_percent, "end_percent"), vae=vae)


@node("ControlNetApplySD3", category=CATEGORY, display_name="Apply Controlnet with VAE", deprecated=True,
      python_module=SD3_MODULE,
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Input("control_net", "CONTROL_NET"), Input("vae", "VAE"), Input("image", "IMAGE"), *ADVANCED_INPUTS],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def apply_controlnet_sd3(positive: list, negative: list, control_net: Any, vae: Any, image: torch.Tensor,
                         strength: float, start_percent: float, end_percent: float) -> tuple[list, list]:
    """Apply ControlNet with the VAE that encodes the hint (SD3 / SD3.5 ControlNets take the
    hint's latent); ComfyUI's (deprecated) ControlNetApplySD3, i.e. ControlNetApplyAdvanced with
    a required vae."""
    return apply_to_pair(checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"),
                         _control_net(control_net), checks.image_batch(image, "image").movedim(-1, 1),
                         _strength(strength), _percent(start_percent, "start_percent"),
                         _percent(end_percent, "end_percent"), vae=checks.vae(vae))


@node("CLIPTextEncodeControlnet", display_name=None, category="_for_testing/conditioning",
      python_module="comfy_extras.nodes_cond", experimental=True,
      inputs=[Input("clip", "CLIP"), Input("conditioning", "CONDITIONING"),
              Input("text", "STRING", multiline=True, dynamicPrompts=True)],
      outputs=[Output("CONDITIONING")])
def clip_text_encode_controlnet(clip: Any, conditioning: list, text: str) -> tuple[list]:
    """Each entry with the text the ControlNets applied to it read instead of the prompt's:
    `cross_attn_controlnet` and `pooled_output_controlnet` (the model keeps its own text)."""
    clip = checks.clip(clip)
    conditioning = checks.conditioning(conditioning, "conditioning")
    cond, pooled = clip.encode_from_tokens(clip.tokenize(checks.text(text)), return_pooled=True)
    return ([[entry[0], {**entry[1], "cross_attn_controlnet": cond, "pooled_output_controlnet": pooled}]
             for entry in conditioning],)


@node("SetUnionControlNetType", category=CATEGORY, display_name="SetUnionControlNetType", python_module=EXTRAS,
      inputs=[Input("control_net", "CONTROL_NET"), Combo("type", ["auto"] + UNION_TYPES)],
      outputs=[Output("CONTROL_NET")])
def set_union_controlnet_type(control_net: Any, type: str) -> tuple[Any]:
    """A copy with the union ControlNet's control type (`control_type` [index], or [] for auto)."""
    control_net = _control_net(control_net).copy()
    kind = checks.choice(type, ["auto"] + UNION_TYPES, "type")
    control_net.set_extra_arg("control_type", [UNION_TYPES.index(kind)] if kind in UNION_TYPES else [])
    return (control_net,)


def inpaint_hint(image: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(image with the masked pixels zeroed, inverted mask [B, 1, h, w]) for ControlNets that take a
    mask channel (ComfyUI's ControlNetInpaintingAliMamaApply): the mask is resized bilinearly to
    the image and rounded before it blanks the image; the unresized inverted mask is the extra channel."""
    from comfy_core.image.resize import upscale_samples

    keep = 1.0 - mask.reshape((-1, 1, mask.shape[-2], mask.shape[-1]))
    applied = upscale_samples(keep, image.shape[2], image.shape[1], "bilinear", "center").round()
    return image * applied.movedim(1, -1).repeat(1, 1, 1, image.shape[3]), keep


@node("ControlNetInpaintingAliMamaApply", category=CATEGORY, display_name="ControlNetInpaintingAliMamaApply",
      python_module=EXTRAS,
      inputs=[Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"),
              Input("control_net", "CONTROL_NET"), Input("vae", "VAE"), Input("image", "IMAGE"),
              Input("mask", "MASK"), *ADVANCED_INPUTS],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def apply_inpaint_controlnet(positive: list, negative: list, control_net: Any, vae: Any, image: torch.Tensor,
                             mask: torch.Tensor, strength: float, start_percent: float,
                             end_percent: float) -> tuple[list, list]:
    """As Apply ControlNet; for a ControlNet with a mask channel the masked pixels are blanked
    and the inverted mask is concatenated to the hint."""
    control_net = _control_net(control_net)
    image = checks.image_batch(image, "image")
    mask = checks.mask_batch(mask, "mask")
    extra = []
    if getattr(control_net, "concat_mask", False):
        image, keep = inpaint_hint(image, mask)
        extra = [keep]
    return apply_to_pair(checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative"),
                         control_net, image.movedim(-1, 1), _strength(strength),
                         _percent(start_percent, "start_percent"), _percent(end_percent, "end_percent"),
                         vae=checks.vae(vae), extra_concat=extra)
