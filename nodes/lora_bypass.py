"""LoraLoaderBypass and LoraLoaderBypassModelOnly: a LoRA applied in bypass mode.

Names, sockets and semantics of today's ComfyUI's comfy_extras/nodes_lora_debug.py (read at
comfyanonymous/ComfyUI@828798fffde97eefa1711b3c224ef983d41ab3be; V1 classes, EXPERIMENTAL,
category "model/loaders" (an older copy, @b64548223d9f, has "loaders"), display names "Load LoRA (Bypass) (For debugging)" and "Load LoRA (Bypass,
Model Only) (for debugging)"): the LoRA is not merged into the weights; each patched layer computes
`base(x) + strength * lora_path(x)` during the forward pass (comfy/sd.py
`load_bypass_lora_for_models`). Both strengths 0 returns the inputs, as ComfyUI.

Written here over our patching system: the file is read and matched by LoraLoader's own path
(nodes/patching.py `_apply_lora`, `comfy_core.lora.load_lora_for_models`: misfits dropped and
logged alike), and the records go to the clone as a bypass injection (comfy_core/patching/bypass.py
`add_bypass`) instead of weight patches, so the base weights are never touched.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from graph.native import Output, node
from graph.object_info import render_inputs
from nodes.patching import LORA_INPUTS, LORA_MODEL_ONLY_INPUTS, _apply_lora

MODULE = "comfy_extras.nodes_lora_debug"
DESCRIPTION = ("Apply LoRA in bypass mode. Unlike regular LoRA, this doesn't modify model weights - instead it "
               "injects the LoRA computation during forward pass. Useful for training scenarios.")
OUTPUT_TOOLTIPS = ["The modified diffusion model.", "The modified CLIP model."]


def _bypass(clone: Any, patches: dict, strength: float) -> int:
    """LoraLoaderBypass's way of putting the matched records on a clone (a MODEL, or a CLIP's
    patcher): a forward-time bypass; how many layers it reaches."""
    from comfy_core.patching.bypass import add_bypass

    return add_bypass(getattr(clone, "patcher", clone), patches, strength)[0]


def _apply_bypass(model: Any, clip: Any, lora_name: str, strength_model: float, strength_clip: float) -> tuple:
    return _apply_lora(model, clip, lora_name, strength_model, strength_clip, apply=_bypass, done="bypasses")


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
      inputs=list(LORA_INPUTS),
      outputs=[Output("MODEL", tooltip=OUTPUT_TOOLTIPS[0]), Output("CLIP", tooltip=OUTPUT_TOOLTIPS[1])])
def lora_loader_bypass(model: Any, clip: Any, lora_name: str, strength_model: float, strength_clip: float) -> tuple:
    return _apply_bypass(model, clip, lora_name, strength_model, strength_clip)


@node("LoraLoaderBypassModelOnly", category="model/loaders", display_name="Load LoRA (Bypass, Model Only) (for debugging)",
      description=DESCRIPTION, experimental=True, python_module=MODULE,
      inputs=list(LORA_MODEL_ONLY_INPUTS),
      outputs=[Output("MODEL")])
def lora_loader_bypass_model_only(model: Any, lora_name: str, strength_model: float) -> tuple:
    return (_apply_bypass(model, None, lora_name, strength_model, 0.0)[0],)


_with_output_tooltips(lora_loader_bypass_model_only)
