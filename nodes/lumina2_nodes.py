"""Lumina 2's nodes with ComfyUI's names, schemas and semantics (comfy_extras/nodes_lumina2.py):

- CLIPTextEncodeLumina2: the user prompt behind one of Lumina 2's two system prompts,
  `"{system prompt} <Prompt Start> {user prompt}"`, tokenized and encoded as CLIPTextEncode does
  (prompt weights parsed, hooks scheduled). The schema matches ComfyUI 0.3.64's record
  (tests/data/comfyui_0.3.64_object_info.json), which today's ComfyUI keeps.
- RenormCFG: a clone of the MODEL whose CFG is Lumina 2's truncated, renormalised guidance
  (comfy_core/model_patches/renorm_cfg.py) as its `sampler_cfg_function`, for the network's
  latent channels (ComfyUI reads `model.model.diffusion_model.in_channels`).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, Float, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_lumina2"
SYSTEM_PROMPTS = {
    "superior": "You are an assistant designed to generate superior images with the superior degree of image-text "
                "alignment based on textual prompts or user prompts.",
    "alignment": "You are an assistant designed to generate high-quality images with the highest degree of "
                 "image-text alignment based on textual prompts.",
}
PROMPT_START = "<Prompt Start>"
SYSTEM_PROMPT_TOOLTIP = ("Lumina2 provide two types of system prompts:Superior: " + SYSTEM_PROMPTS["superior"]
                         + " Alignment: " + SYSTEM_PROMPTS["alignment"])


def lumina2_prompt(system_prompt: str, user_prompt: str) -> str:
    """The text Lumina 2 encodes: the named system prompt, the marker, the user prompt."""
    if system_prompt not in SYSTEM_PROMPTS:
        raise NodeInputError("system_prompt", f"one of {sorted(SYSTEM_PROMPTS)}", repr(system_prompt))
    return f"{SYSTEM_PROMPTS[system_prompt]} {PROMPT_START} {user_prompt}"


@v3_node("CLIPTextEncodeLumina2", category="conditioning", python_module=MODULE,
         display_name="CLIP Text Encode for Lumina2",
         description="Encodes a system prompt and a user prompt using a CLIP model into an embedding that can be "
                     "used to guide the diffusion model towards generating specific images.",
         inputs=[Combo("system_prompt", list(SYSTEM_PROMPTS), tooltip=SYSTEM_PROMPT_TOOLTIP),
                 String("user_prompt", multiline=True, dynamicPrompts=True, tooltip="The text to be encoded."),
                 Socket("clip", "CLIP", tooltip="The CLIP model used for encoding the text.")],
         outputs=[Output("CONDITIONING", tooltip="A conditioning containing the embedded text used to guide the "
                                                 "diffusion model.")])
def clip_text_encode_lumina2(system_prompt: str, user_prompt: str, clip: Any) -> tuple[list]:
    clip = checks.clip(clip)
    prompt = lumina2_prompt(system_prompt, checks.text(user_prompt, "user_prompt"))
    return (clip.encode_from_tokens_scheduled(clip.tokenize(prompt)),)


@v3_node("RenormCFG", category="advanced/model", python_module=MODULE,
         inputs=[Socket("model", "MODEL"), Float("cfg_trunc", default=100, min=0.0, max=100.0, step=0.01),
                 Float("renorm_cfg", default=1.0, min=0.0, max=100.0, step=0.01)],
         outputs=[Output("MODEL")])
def renorm_cfg(model: Any, cfg_trunc: float, renorm_cfg: float) -> tuple[Any]:
    from comfy_core.model_patches.renorm_cfg import RenormCFG

    model = checks.model(model)
    trunc = float(checks.number(cfg_trunc, "cfg_trunc", 0.0, 100.0))
    renorm = float(checks.number(renorm_cfg, "renorm_cfg", 0.0, 100.0))
    network = model.model.diffusion_model
    in_channels = getattr(network, "in_channels", None)
    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 1:
        raise NodeInputError("model", "a diffusion model with its latent channel count (ComfyUI reads "
                             "model.model.diffusion_model.in_channels)", f"{type(network).__name__} without one")
    patched = model.clone()
    patched.set_option("sampler_cfg_function", RenormCFG(trunc, renorm, in_channels))
    return (patched,)
