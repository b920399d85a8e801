"""LoraSave ("Extract and Save Lora") of ComfyUI's comfy_extras/nodes_lora_extract.py (0.3.64).

Turns a difference model (ModelMergeSubtract's output, and/or CLIPMergeSubtract's) into a LoRA
file in the output folder, `<prefix>_00001_.safetensors` (SaveImage's naming): every weight of the
difference, patches applied, through truncated SVD at `rank` ("standard") or as the full
difference ("full_diff"), biases as `.diff_b` with `bias_diff` (see `comfy_core.lora.extract`).
Keys are ComfyUI's generic ones (`diffusion_model.<path>.lora_up.weight`,
`text_encoders.<slot>.transformer.<path>...`), which LoraLoader here and in ComfyUI reads back.
With neither input connected nothing is written, as in ComfyUI. The file carries no metadata
(ComfyUI writes none).
"""
from __future__ import annotations

from typing import Any

from graph.native import Boolean, Combo, Hidden, Input, Int, String, node
from graph.spec import REQUIRED, InputSpec
import nodes.checks as checks
from nodes.model_save import output_file

MODULE = "comfy_extras.nodes_lora_extract"
LORA_TYPES = ["standard", "full_diff"]  # comfy_core.lora.extract.LORA_TYPES, spelled here to stay torch-free
UNET_PREFIX = "diffusion_model."
TEXT_ENCODERS_PREFIX = "text_encoders."


@node("LoraSave", display_name="Extract and Save Lora", category="_for_testing", python_module=MODULE,
      output_node=True, experimental=True,
      inputs=[InputSpec("filename_prefix", "STRING", REQUIRED,
                        {"default": "loras/ComfyUI_extracted_lora", "multiline": False}),
              Int("rank", default=8, min=1, max=4096, step=1), Combo("lora_type", LORA_TYPES),
              Boolean("bias_diff", default=True),
              Input("model_diff", "MODEL", optional=True, tooltip="The ModelSubtract output to be converted to a lora."),
              Input("text_encoder_diff", "CLIP", optional=True,
                    tooltip="The CLIPSubtract output to be converted to a lora."),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")])
def lora_save(filename_prefix: str, rank: int, lora_type: str, bias_diff: bool, model_diff: Any = None,
              text_encoder_diff: Any = None, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """Extract a LoRA from the difference model(s) and save it."""
    from comfy_core.checkpoint.save import write_safetensors
    from comfy_core.lora.extract import extract_lora

    if model_diff is None and text_encoder_diff is None:
        return {}
    checks.text(filename_prefix, "filename_prefix")
    rank = checks.integer(rank, "rank", 1, 4096)
    lora_type = checks.choice(lora_type, LORA_TYPES, "lora_type")
    bias_diff = bool(bias_diff)
    if model_diff is not None:
        model_diff = checks.model(model_diff, "model_diff")
    if text_encoder_diff is not None:
        text_encoder_diff = checks.clip(text_encoder_diff, "text_encoder_diff", encoders=True)
    path, _filename, _counter = output_file(filename_prefix)
    tensors: dict = {}
    if model_diff is not None:
        with model_diff.applied() as module:
            tensors.update(extract_lora(module.state_dict(), rank, lora_type, bias_diff,
                                        prefix_model=UNET_PREFIX, prefix_lora=UNET_PREFIX))
    if text_encoder_diff is not None:
        with text_encoder_diff.patcher.applied() as encoders:
            tensors.update(extract_lora(encoders.state_dict(), rank, lora_type, bias_diff,
                                        prefix_model="", prefix_lora=TEXT_ENCODERS_PREFIX))
    write_safetensors(path, tensors)
    return {}
