"""LoRA key maps of the flow-matching DiTs, generic part: a network that names its own LoRA layers
defines `lora_key_map(state_names) -> {LoRA layer name: target}` (Flux.1, SD3 / SD3.5's MMDiT and
the Wan DiT do, in their family packages' `keys.py`); this module asks the network for it and
re-exports the spellings those maps share (`comfy_core.families.lora_keys`).

A LoRA file for these models names its layers in one of these spellings (ComfyUI 0.3.64 reads
them all, comfy/lora.py `model_lora_keys_unet`, its Flux and SD3 branches):

- ComfyUI / BFL / SAI native: the parameter path without `.weight`,
  `diffusion_model.double_blocks.0.img_attn.qkv` (also under `model.diffusion_model.`, as a
  checkpoint names it); non-weight tensors (biases, norm scales) by their full name, for `.diff`
  and `.set_weight` records;
- kohya / sd-scripts: `lora_unet_<native path with _>` (`lora_unet_single_blocks_0_linear1`,
  `lora_unet_joint_blocks_0_x_block_attn_qkv`);
- diffusers / PEFT / ai-toolkit / SimpleTuner: `transformer.<diffusers path>`
  (`transformer.transformer_blocks.0.attn.to_q`), SD3 also `base_model.model.<diffusers path>`;
- OneTrainer: `lora_transformer_<diffusers path with _>`; SimpleTuner's LyCORIS: `lycoris_<...>`;
- Flux only: `diffusion_model.single_blocks.N.linear1_qkv`, the q/k/v rows of `linear1`.
- Wan: the native names (ComfyUI's, lightx2v's `diffusion_model.blocks.N.self_attn.q`, with
  `.diff` / `.diff_b` records), musubi-tuner's kohya-style `lora_unet_blocks_0_self_attn_q`,
  diffusion-pipe's / VideoX-Fun's `lora_unet__blocks_0_...` (ComfyUI converts that double
  underscore), SimpleTuner's `lycoris_blocks_0_...`, `transformer.blocks.0.self_attn.q`, and the
  diffusers names (`transformer.blocks.0.attn1.to_q`, `lora_transformer_blocks_0_attn1_to_q`,
  from `comfy_core.families.wan.keys`); no fused weights, every target a whole parameter.

Where diffusers splits a fused BFL/SAI weight, the target is a slice of it,
`(param, (dim, offset, size))` (q/k/v thirds of `qkv`; q/k/v/mlp rows of Flux's `linear1`); the
final adaLN, whose halves diffusers orders the other way, is `(param, None, swap_scale_shift)`.
The diffusers names come from each family's model key map, the native ones from the module's own
state-dict names: nothing is listed here by heart. Entries whose target the module does not have
(schnell's guidance embedder, attn2 outside SD3.5 medium's MMDiT-X blocks) are left out.
"""
from __future__ import annotations

from typing import Any

from torch import nn

# The spellings the DiT maps share live below the families (their `keys.py` use them); re-exported.
from comfy_core.families.lora_keys import (CHECKPOINT_PREFIX, UNET_PREFIX, Target, add_diffusers_names,  # noqa: F401
                                           native_key_map, target_name)


def dit_key_map(model: nn.Module) -> dict[str, Target] | None:
    """The LoRA key map of `model` (a MODEL's `.model`) when its network under `.diffusion_model`
    names its own LoRA layers (a DiT: `network.lora_key_map(state_names)`), None for other models
    (a UNet's map is `comfy_core.lora.keymap`'s)."""
    network = getattr(model, "diffusion_model", None)
    key_map = getattr(network, "lora_key_map", None)
    return key_map(state_names(model)) if callable(key_map) else None


def dit_kind(model: nn.Module) -> str | None:
    """The name of the network under `model.diffusion_model` (its class name) when it names its own
    LoRA layers (see `dit_key_map`), else None: a UNet, or not a diffusion model."""
    network = getattr(model, "diffusion_model", None)
    return type(network).__name__ if callable(getattr(network, "lora_key_map", None)) else None


def state_names(model: nn.Module) -> list[str]:
    """The state-dict names under `diffusion_model.` (parameters and persistent buffers, as
    ComfyUI reads `model.state_dict()`), in module order."""
    return [k for k in model.state_dict(keep_vars=True) if k.startswith(UNET_PREFIX)]


def row_permutations() -> tuple[Any, ...]:
    """The target functions of the DiT key maps that only reorder the first axis (the adaLN halves'
    swap): for a LoRA, `fn(up @ down) == fn(up) @ down` exactly."""
    from comfy_core.checkpoint.keys import swap_scale_shift

    return (swap_scale_shift,)


__all__ = ["Target", "add_diffusers_names", "dit_key_map", "dit_kind", "native_key_map", "row_permutations",
           "state_names", "target_name"]
