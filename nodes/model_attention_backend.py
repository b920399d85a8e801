"""ModelAttentionBackend (today's ComfyUI, comfy_extras/nodes_model_advanced.py): a clone of the
MODEL whose dense attention runs on the chosen backend, for that clone's runs only (the patcher's
attention-backend option, comfy_core.patching; never a process-wide switch). The input MODEL is
not changed.

ComfyUI offers "pytorch attention" (torch's scaled_dot_product_attention, our `sdpa` backend)
and, where comfy-kitchen's INT8 attention kernel is available (NVIDIA and AMD GPUs), "comfy
kitchen attention". Its validation accepts any name and its node falls back to PyTorch attention
with a warning when the named one cannot run; this engine has no comfy-kitchen kernel and does not
correct input silently, so a name it cannot run is a validation error (and an input error when the
node is called directly) naming what is missing. Like ComfyUI's (which writes the
`optimized_attention_override` transformer option), the node replaces an attention override a pack
set on the MODEL before it; one set after it wins.
"""
from __future__ import annotations

from typing import Any

import nodes.checks as checks
from graph.v3_schema import Combo, Output, Socket, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_model_advanced"
# ComfyUI's backend names -> this engine's attention backends (comfy_core.attention_names).
BACKENDS = {"pytorch attention": "sdpa"}
OVERRIDE = "optimized_attention_override"  # a pack's per-model attention function (transformer option)
# ComfyUI's names this engine knows but cannot run, and why.
UNAVAILABLE = {
    "comfy kitchen attention": "it needs comfy-kitchen's INT8 attention kernel (NVIDIA or AMD GPU), "
                               "which this engine does not have",
}


def backend_problem(attention: Any) -> str | None:
    """None when `attention` names a backend this engine runs, else what is wrong."""
    if isinstance(attention, str) and attention in BACKENDS:
        return None
    if isinstance(attention, str) and attention in UNAVAILABLE:
        return (f"attention backend {attention!r} is not available: {UNAVAILABLE[attention]}; "
                f"available: {list(BACKENDS)}")
    return f"unknown attention backend {attention!r}; available: {list(BACKENDS)}"


def _validate(attention: Any) -> bool | str:
    problem = backend_problem(attention)
    return True if problem is None else problem


@v3_node("ModelAttentionBackend", display_name="Model Attention Backend", category="model/patch",
         python_module=MODULE, experimental=True,
         description="Selects the dense attention implementation for the model. When used with Block Sparse "
                     "Attention, this backend is used whenever sparse attention is inactive or unsupported.",
         inputs=[Socket("model", "MODEL", tooltip="The model to patch."),
                 Combo("attention", list(BACKENDS), display_name="backend", default="pytorch attention",
                       tooltip="The dense attention backend. Comfy Kitchen attention uses quantized INT8 attention "
                               "and is available only on Nvidia and AMD GPUs.")],
         outputs=[Output("MODEL", "model", tooltip="The model with the selected attention backend.")],
         validate_inputs=_validate)
def model_attention_backend(model: Any, attention: str) -> tuple[Any]:
    """A clone of `model` whose attention runs on `attention`'s backend inside its runs."""
    model = checks.model(model)
    problem = backend_problem(attention)
    if problem is not None:
        raise NodeInputError("attention", f"one of {list(BACKENDS)}", problem)
    patched = model.clone()
    patched.set_attention_backend(BACKENDS[attention])
    # ComfyUI's node writes `transformer_options["optimized_attention_override"]`, replacing an
    # override a pack set on the MODEL before it; an override set after it still wins, here as there.
    # (The clone's model_options are its own copy.)
    transformer_options = patched.model_options.get("transformer_options")
    if isinstance(transformer_options, dict):
        transformer_options.pop(OVERRIDE, None)
    return (patched,)
