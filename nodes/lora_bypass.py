"""LoraLoaderBypass and LoraLoaderBypassModelOnly: a LoRA applied in bypass mode.

Names, sockets and semantics of today's ComfyUI's comfy_extras/nodes_lora_debug.py (read at
comfyanonymous/ComfyUI@828798fffde97eefa1711b3c224ef983d41ab3be; V1 classes, EXPERIMENTAL,
category "model/loaders" (an older copy, @b64548223d9f, has "loaders"), display names "Load LoRA (Bypass) (For debugging)" and "Load LoRA (Bypass,
Model Only) (for debugging)"): the LoRA is not merged into the weights; each patched layer computes
`base(x) + strength * lora_path(x)` during the forward pass (comfy/sd.py
`load_bypass_lora_for_models`). Both strengths 0 returns the inputs, as ComfyUI.

Written here over our patching system: the file is parsed against the model's and CLIP's key maps
exactly as LoraLoader parses it (`comfy_core.lora.loader.parse_lora`, misfits dropped and logged
alike), and the records go to the clone as a bypass injection (comfy_core/patching/bypass.py)
instead of weight patches, so the base weights are never touched.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from graph.native import Combo, Float, Input, Output, node
from graph.object_info import render_inputs
from nodes.environment import model_file
from nodes.patching import _lora_metadata, _lora_names, _patchable, load_lora_file

log = logging.getLogger(__name__)

MODULE = "comfy_extras.nodes_lora_debug"
DESCRIPTION = ("Apply LoRA in bypass mode. Unlike regular LoRA, this doesn't modify model weights - instead it "
               "injects the LoRA computation during forward pass. Useful for training scenarios.")
OUTPUT_TOOLTIPS = ["The modified diffusion model.", "The modified CLIP model."]


def load_bypass_lora(model: Any, clip: Any, tensors: dict, strength_model: float, strength_clip: float,
                     name: str = "", source: Any = None) -> tuple[Any, Any, dict[str, int]]:
    """Clones of `model` / `clip` (either may be None) with the LoRA `tensors` as a bypass at the
    strengths; and how many layers each side bypasses. Keys that match nothing are logged as
    LoraLoader logs them ("lora key not loaded"). `source` names the file's state, as LoraLoader's
    (`parse_lora`): re-reading an unchanged file gives clones with the same cache signature."""
    from comfy_core.lora.dit_convert import convert_dit_lora
    from comfy_core.lora.dit_keymap import dit_kind
    from comfy_core.lora.fit import drop_misfits
    from comfy_core.lora.keymap import text_encoder_key_map, unet_key_map
    from comfy_core.lora.loader import _log_misfit, parse_lora
    from comfy_core.models.quant_linear import true_weight_shapes
    from comfy_core.patching.bypass import add_bypass

    label = name or "(unnamed)"
    if model is not None and dit_kind(model.model) is not None:
        tensors = convert_dit_lora(tensors)
    clip_patcher = getattr(clip, "patcher", clip) if clip is not None else None
    counts = {"model": 0, "clip": 0}
    unmatched: list[set[str]] = []
    new_model, new_clip = model, clip
    for side, owner, key_map, strength in (
            ("model", model, lambda: unet_key_map(model.model), strength_model),
            ("clip", clip_patcher, lambda: text_encoder_key_map(clip_patcher.model), strength_clip)):
        if owner is None:
            continue
        parse = parse_lora(tensors, key_map(), name, source)
        unmatched.append(set(parse.unmatched))
        shapes = {k: tuple(v.shape) for k, v in owner.model.state_dict(keep_vars=True).items()}
        shapes.update(true_weight_shapes(owner.model))
        patches, dropped = drop_misfits(parse.patches, shapes)
        for item in dropped:
            _log_misfit(label, item)
        if side == "model":
            new_model = model.clone()
            counts["model"], _ = add_bypass(new_model, patches, strength)
        else:
            new_clip = clip.clone()
            counts["clip"], _ = add_bypass(getattr(new_clip, "patcher", new_clip), patches, strength)
    for key in (k for k in tensors if unmatched and all(k in u for u in unmatched)):
        log.warning("lora key not loaded: %s", key)
    return new_model, new_clip, counts


def _apply_bypass(model: Any, clip: Any, lora_name: str, strength_model: float, strength_clip: float) -> tuple:
    _patchable(model, "model")
    _patchable(clip, "clip")
    if strength_model == 0 and strength_clip == 0:
        return model, clip
    path = Path(model_file("loras", lora_name, "lora_name"))
    stat = path.stat()  # taken before reading, as LoraLoader's
    source = ("lora-file", str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    tensors = load_lora_file(path)
    new_model, new_clip, counts = load_bypass_lora(model, clip, tensors, strength_model, strength_clip, lora_name,
                                                   source)
    log.info("LoRA %s bypasses %d model and %d clip layers", lora_name, counts["model"], counts["clip"])
    metadata = _lora_metadata(path)
    if metadata and new_model is not None and new_model is not model:
        new_model.attachments["lora_metadata"] = metadata
    return new_model, new_clip


def _with_output_tooltips(fn: Any) -> Any:
    """ComfyUI renders the class's OUTPUT_TOOLTIPS as they are; LoraLoaderBypassModelOnly inherits
    both of LoraLoaderBypass's (one output, two tooltips), so its entry lists both."""
    spec = fn.__node_spec__

    def rendered(env: Any) -> dict:
        return {**render_inputs(spec.inputs, env), "output_tooltips": list(OUTPUT_TOOLTIPS)}

    fn.__node_spec__ = dataclasses.replace(spec, render_info=rendered)
    return fn


@node("LoraLoaderBypass", category="model/loaders", display_name="Load LoRA (Bypass) (For debugging)",
      description=DESCRIPTION, experimental=True, python_module=MODULE,
      inputs=[Input("model", "MODEL", tooltip="The diffusion model the LoRA will be applied to."),
              Input("clip", "CLIP", tooltip="The CLIP model the LoRA will be applied to."),
              Combo("lora_name", _lora_names, tooltip="The name of the LoRA."),
              Float("strength_model", default=1.0, min=-100.0, max=100.0, step=0.01,
                    tooltip="How strongly to modify the diffusion model. This value can be negative."),
              Float("strength_clip", default=1.0, min=-100.0, max=100.0, step=0.01,
                    tooltip="How strongly to modify the CLIP model. This value can be negative.")],
      outputs=[Output("MODEL", tooltip=OUTPUT_TOOLTIPS[0]), Output("CLIP", tooltip=OUTPUT_TOOLTIPS[1])])
def lora_loader_bypass(model: Any, clip: Any, lora_name: str, strength_model: float, strength_clip: float) -> tuple:
    return _apply_bypass(model, clip, lora_name, strength_model, strength_clip)


@node("LoraLoaderBypassModelOnly", category="model/loaders", display_name="Load LoRA (Bypass, Model Only) (for debugging)",
      description=DESCRIPTION, experimental=True, python_module=MODULE,
      inputs=[Input("model", "MODEL"), Combo("lora_name", _lora_names),
              Float("strength_model", default=1.0, min=-100.0, max=100.0, step=0.01)],
      outputs=[Output("MODEL")])
def lora_loader_bypass_model_only(model: Any, lora_name: str, strength_model: float) -> tuple:
    return (_apply_bypass(model, None, lora_name, strength_model, 0.0)[0],)


_with_output_tooltips(lora_loader_bypass_model_only)
