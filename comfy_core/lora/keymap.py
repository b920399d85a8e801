"""LoRA key maps built from a module's parameter names, for every naming LoRA files use.

A LoRA file names the layer it patches by a module path, in one of several conventions:
- kohya/sd-scripts: `lora_unet_<path with _>` (LDM or diffusers UNet paths), `lora_te_<...>` for
  a single text encoder, `lora_te1_`/`lora_te2_` for SDXL's two (CLIP-L, then bigG);
- diffusers / PEFT: `unet.<diffusers path>`, `text_encoder.<hf path>`, `text_encoder_2.<...>`;
- ComfyUI's own saves: the parameter path without `.weight` (`diffusion_model.input_blocks...`;
  `text_encoders.clip_l.transformer...` for the text encoders, as its LoraSave writes them).
Flux and SD3 transformers have their own spellings and fused-weight slices (`dit_keymap.py`).

Nothing here knows a layout by heart: the maps are derived by walking the module's parameters.
The UNet's diffusers names come from its LDM structure (`input_blocks.i.0` res blocks, `.0.op`
downsamplers, ...) the way diffusers' single-file converter relates the two layouts.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from torch import nn

from comfy_core.lora.dit_keymap import dit_key_map

UNET_PREFIX = "diffusion_model."

# LDM ResBlock sub-layers and their diffusers names.
_RESNET_RENAMES = (
    ("in_layers.0.", "norm1."), ("in_layers.2.", "conv1."), ("emb_layers.1.", "time_emb_proj."),
    ("out_layers.0.", "norm2."), ("out_layers.3.", "conv2."), ("skip_connection.", "conv_shortcut."),
)
_FIXED_UNET = {
    "time_embed.0.": "time_embedding.linear_1.", "time_embed.2.": "time_embedding.linear_2.",
    "label_emb.0.0.": "add_embedding.linear_1.", "label_emb.0.2.": "add_embedding.linear_2.",
    "input_blocks.0.0.": "conv_in.", "out.0.": "conv_norm_out.", "out.2.": "conv_out.",
}


def _weight_modules(names: Iterable[str]) -> list[str]:
    """Module paths that own a `.weight` (LoRA targets are weights), in parameter order."""
    return [n[: -len(".weight")] for n in names if n.endswith(".weight")]


def unet_diffusers_names(unet_param_names: Iterable[str]) -> dict[str, str]:
    """LDM UNet module path -> diffusers module path, derived from the LDM parameter names.

    Paths are relative to the UNet (no `diffusion_model.`). Assumes every level has the same
    number of res blocks, true of SD1.x, SD2.x and SDXL.
    """
    names = list(unet_param_names)
    blocks = _block_prefixes(names)
    mapping: dict[str, str] = {}
    for ldm_module in _weight_modules(names):
        path = ldm_module + "."
        for ldm_prefix, diff_prefix, is_resnet in blocks:
            if path.startswith(ldm_prefix):
                rest = path[len(ldm_prefix):]
                if is_resnet:
                    for old, new in _RESNET_RENAMES:
                        if rest.startswith(old):
                            rest = new + rest[len(old):]
                            break
                mapping[ldm_module] = (diff_prefix + rest)[:-1]
                break
    return mapping


def _block_prefixes(names: list[str]) -> list[tuple[str, str, bool]]:
    """(LDM prefix, diffusers prefix, is a res block) for every block of the UNet."""
    present = set(names)
    indices = lambda kind: sorted({int(m.group(1)) for n in names  # noqa: E731
                                   if (m := re.match(rf"{kind}\.(\d+)\.", n))})
    prefixes = [(k, v, False) for k, v in _FIXED_UNET.items()]
    level, j, res_per_level = 0, 0, None
    for i in indices("input_blocks"):
        if i == 0:
            continue
        if f"input_blocks.{i}.0.op.weight" in present:
            prefixes.append((f"input_blocks.{i}.0.op.", f"down_blocks.{level}.downsamplers.0.conv.", False))
            res_per_level = j if res_per_level is None else res_per_level
            level, j = level + 1, 0
            continue
        prefixes.append((f"input_blocks.{i}.0.", f"down_blocks.{level}.resnets.{j}.", True))
        prefixes.append((f"input_blocks.{i}.1.", f"down_blocks.{level}.attentions.{j}.", False))
        j += 1
    if res_per_level is None:
        res_per_level = j
    prefixes += [("middle_block.0.", "mid_block.resnets.0.", True),
                 ("middle_block.1.", "mid_block.attentions.0.", False),
                 ("middle_block.2.", "mid_block.resnets.1.", True)]
    per_up_level = res_per_level + 1
    for i in indices("output_blocks"):
        up_level, j = divmod(i, per_up_level)
        prefixes.append((f"output_blocks.{i}.0.", f"up_blocks.{up_level}.resnets.{j}.", True))
        second = f"output_blocks.{i}.1."
        is_upsampler = (second + "conv.weight") in present and not any(
            n.startswith(second) and not n.startswith(second + "conv.") for n in names)
        if is_upsampler:
            prefixes.append((second, f"up_blocks.{up_level}.upsamplers.0.", False))
        else:
            prefixes.append((second, f"up_blocks.{up_level}.attentions.{j}.", False))
        prefixes.append((f"output_blocks.{i}.2.", f"up_blocks.{up_level}.upsamplers.0.", False))
    return prefixes


def unet_key_map(model: nn.Module) -> dict[str, Any]:
    """LoRA layer name -> parameter name, for the UNet under `diffusion_model.` of `model`.

    For a Flux or MMDiT network the DiT map (`comfy_core.lora.dit_keymap`), whose targets may
    also be slices `(name, (dim, offset, size))` or transformed tensors `(name, None, fn)`."""
    dit = dit_key_map(model)
    if dit is not None:
        return dit
    names = [n for n, _ in model.named_parameters() if n.startswith(UNET_PREFIX)]
    key_map: dict[str, str] = {}
    for module in _weight_modules(names):
        key = module + ".weight"
        ldm = module[len(UNET_PREFIX):]
        key_map[module] = key  # ComfyUI-saved LoRAs
        key_map["lora_unet_" + ldm.replace(".", "_")] = key
    relative = [n[len(UNET_PREFIX):] for n in names]
    for ldm, diff in unet_diffusers_names(relative).items():
        key = UNET_PREFIX + ldm + ".weight"
        key_map["lora_unet_" + diff.replace(".", "_")] = key
        key_map["unet." + diff] = key
        key_map[diff] = key
    return key_map


def text_encoder_key_map(encoders: nn.Module) -> dict[str, str]:
    """LoRA layer name -> parameter name, for an encoder set with children `clip_l`/`clip_h`/`clip_g`.

    One encoder gets `lora_te_` and `text_encoder.`; several get `lora_te1_`, `lora_te2_`, ... and
    `text_encoder.`, `text_encoder_2.`, ... in child order (SDXL: CLIP-L first, then bigG). A
    `t5xxl` child also gets ComfyUI's T5 numbers (`_t5_kohya_indices`).
    """
    slots = [name for name, _ in encoders.named_children()]
    single = len(slots) == 1
    key_map: dict[str, str] = {}
    names = [n for n, _ in encoders.named_parameters()]
    for index, slot in enumerate(slots, start=1):
        kohya = ["lora_te_" if single else f"lora_te{index}_"]
        if slot == "t5xxl":
            kohya += [f"lora_te{i}_" for i in _t5_kohya_indices(slots) if f"lora_te{i}_" not in kohya]
        diffusers = "text_encoder." if index == 1 else f"text_encoder_{index}."
        for module in _weight_modules(n for n in names if n.startswith(slot + ".")):
            key = module + ".weight"
            key_map[module] = key
            key_map["text_encoders." + module] = key  # ComfyUI's generic form (what LoraSave writes)
            relative = module[len(slot) + 1:]
            if relative.startswith("transformer."):
                relative = relative[len("transformer."):]
            for prefix in kohya:
                key_map[prefix + relative.replace(".", "_")] = key
            key_map[diffusers + relative] = key
    return key_map


def _t5_kohya_indices(slots: list[str]) -> list[int]:
    """The `lora_te<N>_` numbers ComfyUI gives T5-XXL (OneTrainer's SD3 / Flux LoRAs): after the
    CLIPs present, so 3 beside CLIP-L and bigG (SD3); beside CLIP-L alone (Flux) both 2 and 3."""
    index = 1 + ("clip_g" in slots) + ("clip_l" in slots)
    if "clip_l" in slots and index == 2:
        return [2, 3]
    return [index]
