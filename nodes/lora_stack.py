"""LoadLoraModel and LoadLoraTextEncoder (today's ComfyUI, comfy_extras/nodes_lora_stack.py
@0e5d418af303606f1e9f76089b5c21aba275fdc5), declared as its V3 schema renders them: a stack of
LoRA rows (`loras`, a `COMFY_DYNAMICGROUP_V3` group of 1 to 20 rows, graph/v3_schema.py),
each a file of the loras folders and its strength, applied in row order to the MODEL (or the
CLIP) as LoraLoader applies one (nodes/patching.py: the same file reading, key matching and
weight patches on clones, the file's metadata attached to the MODEL). A row with no file or
strength 0 is skipped, as in ComfyUI; the input MODEL / CLIP is not changed.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import DynamicGroup, Float, Output, Socket, v3_node
from nodes.errors import NodeInputError
from nodes.patching import _apply_lora, _lora_names

MODULE = "comfy_extras.nodes_lora_stack"


def _rows(tooltip: str) -> DynamicGroup:
    fields = (InputSpec("lora_name", _lora_names, REQUIRED,
                        {"tooltip": "The name of the LoRA file to apply.", "multiselect": False}),
              Float("strength", default=1.0, min=-100.0, max=100.0, step=0.01,
                    tooltip="How strongly to apply this LoRA. 0 = off, negative inverts the effect."))
    return DynamicGroup("loras", fields, min=1, max=20, tooltip=tooltip, group_name="LoRA")


def _apply_rows(target: Any, loras: Any, on_model: bool) -> Any:
    """`target` with each row's LoRA applied in order (rows without a file or at strength 0 skipped)."""
    if not isinstance(loras, list):
        raise NodeInputError("loras", "a list of LoRA rows", repr(loras))
    for index, row in enumerate(loras):
        name, strength = row.get("lora_name"), row.get("strength")
        if not name or strength == 0:
            continue
        strength = float(checks.number(strength, f"loras.{index}.strength", -100.0, 100.0))
        try:
            if on_model:
                target = _apply_lora(target, None, name, strength, 0.0)[0]
            else:
                target = _apply_lora(None, target, name, 0.0, strength)[1]
        except NodeInputError as exc:
            if exc.input_name != "lora_name":
                raise
            raise NodeInputError(f"loras.{index}.lora_name", exc.expected, exc.received) from exc
    return target


@v3_node("LoadLoraModel", display_name="Load LoRA (Model)", category="model/loaders", python_module=MODULE,
         search_aliases=["lora", "load lora", "apply lora", "lora model", "lora stack"],
         description="Apply a stack of LoRAs to a diffusion model. Add one row per LoRA; each row picks a LoRA file "
                     "and its strength.",
         inputs=[Socket("model", "MODEL", tooltip="The diffusion model the LoRAs will be applied to."),
                 _rows("Each row applies one LoRA to the model.")],
         outputs=[Output("MODEL", tooltip="The modified diffusion model.")])
def load_lora_model(model: Any, loras: list) -> tuple[Any]:
    """`model` with the rows' LoRAs applied in order."""
    return (_apply_rows(checks.model(model), loras, on_model=True),)


@v3_node("LoadLoraTextEncoder", display_name="Load LoRA (Text Encoder)", category="model/loaders",
         python_module=MODULE, search_aliases=["lora", "load lora", "apply lora", "clip lora", "lora stack"],
         description="Apply a stack of LoRAs to a CLIP text encoder. Add one row per LoRA; each row picks a LoRA "
                     "file and its strength.",
         inputs=[Socket("clip", "CLIP", tooltip="The CLIP text encoder the LoRAs will be applied to."),
                 _rows("Each row applies one LoRA to the text encoder.")],
         outputs=[Output("CLIP", tooltip="The modified CLIP text encoder.")])
def load_lora_text_encoder(clip: Any, loras: list) -> tuple[Any]:
    """`clip` with the rows' LoRAs applied in order."""
    return (_apply_rows(checks.clip(clip), loras, on_model=False),)
