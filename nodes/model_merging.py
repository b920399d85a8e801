"""Model and CLIP merging nodes of ComfyUI's comfy_extras/nodes_model_merging.py (0.3.64):
ModelMergeSimple, ModelMergeBlocks, ModelMergeSubtract, ModelMergeAdd, CLIPMergeSimple,
CLIPMergeSubtract, CLIPMergeAdd. (The save nodes of that module are in nodes/model_save.py.)

Each returns a clone of the first input with the second's weights as patches (see
`comfy_core.merging`): nothing is computed or copied until the merged model runs, the inputs are
left as they were, and the second input's own patches (its LoRAs, an earlier merge) count, as in
ComfyUI. Merges of MODELs cover the UNet (`diffusion_model.*`); CLIP merges cover every text
encoder weight but the position ids and the logit scale.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from graph.native import Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

# comfy_core.merging imports torch: it is imported inside the functions that run, so registering
# these nodes and rendering /object_info stays torch-free (server start-up).

MODULE = "comfy_extras.nodes_model_merging"
CATEGORY = "advanced/model_merging"
BLOCK_NAMES = ("input", "middle", "out")


def ratio_input(name: str) -> Any:
    """A merge ratio widget as ComfyUI declares every one: 0..1, default 1 (all of model1)."""
    return Float(name, default=1.0, min=0.0, max=1.0, step=0.01)


def _multiplier_input() -> Any:
    return Float("multiplier", default=1.0, min=-10.0, max=10.0, step=0.01)


def _merge_models(model1: Any, model2: Any, strengths: Any) -> tuple[Any]:
    from comfy_core.merging import UNET_PREFIX, merge_into

    model1, model2 = checks.model(model1, "model1"), checks.model(model2, "model2")
    merged = model1.clone()
    merge_into(merged, model2, strengths, prefix=UNET_PREFIX)
    return (merged,)


def _merge_clips(clip1: Any, clip2: Any, strengths: Any) -> tuple[Any]:
    from comfy_core.merging import CLIP_SKIPPED_SUFFIXES, merge_into

    clip1 = checks.clip(clip1, "clip1", encoders=True)
    clip2 = checks.clip(clip2, "clip2", encoders=True)
    merged = clip1.clone()
    merge_into(merged.patcher, clip2.patcher, strengths, skip_suffixes=CLIP_SKIPPED_SUFFIXES)
    return (merged,)


def merge_blocks(model1: Any, model2: Any, names: Sequence[str], ratios: Mapping[str, Any]) -> tuple[Any]:
    """ModelMergeBlocks and the ModelMerge<architecture> nodes: `names` are the block prefixes
    (the ratio inputs, in declaration order: the first is the ratio of weights no prefix names)."""
    from comfy_core.merging import block_strengths

    values = []
    for name in names:
        if name not in ratios:
            raise NodeInputError(name, "a FLOAT in 0.0..1.0", "nothing (the input is missing)")
        values.append((name, checks.number(ratios[name], name, 0.0, 1.0)))
    unknown = sorted(set(ratios) - set(names))
    if unknown:
        raise NodeInputError(unknown[0], f"one of the block ratio inputs {list(names)}", "an unknown input")
    return _merge_models(model1, model2, block_strengths(values))


@node("ModelMergeSimple", display_name="ModelMergeSimple", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model1", "MODEL"), Input("model2", "MODEL"), ratio_input("ratio")],
      outputs=[Output("MODEL")])
def model_merge_simple(model1: Any, model2: Any, ratio: float) -> tuple[Any]:
    """`ratio · model1 + (1 - ratio) · model2`, weight by weight."""
    from comfy_core.merging import simple_strengths

    return _merge_models(model1, model2, simple_strengths(checks.number(ratio, "ratio", 0.0, 1.0)))


@node("ModelMergeBlocks", display_name="ModelMergeBlocks", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model1", "MODEL"), Input("model2", "MODEL"), *(ratio_input(n) for n in BLOCK_NAMES)],
      outputs=[Output("MODEL")])
def model_merge_blocks(model1: Any, model2: Any, **ratios: float) -> tuple[Any]:
    """A simple merge with one ratio for the input blocks, the middle block and the output
    blocks (`out` also covers the final layers; weights outside all three take `input`'s)."""
    return merge_blocks(model1, model2, BLOCK_NAMES, ratios)


@node("ModelMergeSubtract", display_name="ModelMergeSubtract", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model1", "MODEL"), Input("model2", "MODEL"), _multiplier_input()],
      outputs=[Output("MODEL")])
def model_merge_subtract(model1: Any, model2: Any, multiplier: float) -> tuple[Any]:
    """`multiplier · (model1 - model2)`: the difference a fine-tune made (LoraSave extracts it)."""
    from comfy_core.merging import subtract_strengths

    return _merge_models(model1, model2, subtract_strengths(checks.number(multiplier, "multiplier", -10.0, 10.0)))


@node("ModelMergeAdd", display_name="ModelMergeAdd", category=CATEGORY, python_module=MODULE,
      inputs=[Input("model1", "MODEL"), Input("model2", "MODEL")], outputs=[Output("MODEL")])
def model_merge_add(model1: Any, model2: Any) -> tuple[Any]:
    """`model1 + model2` (e.g. a base model plus a ModelMergeSubtract difference)."""
    from comfy_core.merging import add_strengths

    return _merge_models(model1, model2, add_strengths())


@node("CLIPMergeSimple", display_name="CLIPMergeSimple", category=CATEGORY, python_module=MODULE,
      inputs=[Input("clip1", "CLIP"), Input("clip2", "CLIP"), ratio_input("ratio")], outputs=[Output("CLIP")])
def clip_merge_simple(clip1: Any, clip2: Any, ratio: float) -> tuple[Any]:
    """`ratio · clip1 + (1 - ratio) · clip2`, weight by weight."""
    from comfy_core.merging import simple_strengths

    return _merge_clips(clip1, clip2, simple_strengths(checks.number(ratio, "ratio", 0.0, 1.0)))


@node("CLIPMergeSubtract", display_name="CLIPMergeSubtract", category=CATEGORY, python_module=MODULE,
      inputs=[Input("clip1", "CLIP"), Input("clip2", "CLIP"), _multiplier_input()], outputs=[Output("CLIP")])
def clip_merge_subtract(clip1: Any, clip2: Any, multiplier: float) -> tuple[Any]:
    """`multiplier · (clip1 - clip2)`."""
    from comfy_core.merging import subtract_strengths

    return _merge_clips(clip1, clip2, subtract_strengths(checks.number(multiplier, "multiplier", -10.0, 10.0)))


@node("CLIPMergeAdd", display_name="CLIPMergeAdd", category=CATEGORY, python_module=MODULE,
      inputs=[Input("clip1", "CLIP"), Input("clip2", "CLIP")], outputs=[Output("CLIP")])
def clip_merge_add(clip1: Any, clip2: Any) -> tuple[Any]:
    """`clip1 + clip2`."""
    from comfy_core.merging import add_strengths

    return _merge_clips(clip1, clip2, add_strengths())
