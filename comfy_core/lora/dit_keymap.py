"""LoRA key maps of the flow-matching DiTs: Flux.1 (BFL layout), SD3 / SD3.5 (SAI's MMDiT) and
the Wan 2.1 / 2.2 video DiT.

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
  from `comfy_core.models.wan_keys`); no fused weights, every target a whole parameter.

Where diffusers splits a fused BFL/SAI weight, the target is a slice of it,
`(param, (dim, offset, size))` (q/k/v thirds of `qkv`; q/k/v/mlp rows of Flux's `linear1`); the
final adaLN, whose halves diffusers orders the other way, is `(param, None, swap_scale_shift)`.
The diffusers names come from the model key maps (`comfy_core.models.flux_keys.flux_to_diffusers`,
`comfy_core.models.mmdit_keys.mmdit_to_diffusers`), the native ones from the module's own
state-dict names: nothing is listed here by heart. Entries whose target the module does not have
(schnell's guidance embedder, attn2 outside SD3.5 medium's MMDiT-X blocks) are left out.
"""
from __future__ import annotations

from typing import Any, Iterable, Union

from torch import nn

UNET_PREFIX = "diffusion_model."
CHECKPOINT_PREFIX = "model."  # a single-file checkpoint's prefix of the diffusion model

# A LoRA layer's target: a parameter name, `(name, (dim, offset, size))`, or `(name, None, fn)`.
Target = Union[str, tuple]

FLUX = "flux"
MMDIT = "mmdit"
WAN = "wan"


def dit_kind(model: nn.Module) -> str | None:
    """`FLUX` or `MMDIT` when `model` (a MODEL's `.model`: the network under `.diffusion_model`)
    holds one of those transformers, else None (a UNet, or not a diffusion model)."""
    network = getattr(model, "diffusion_model", None)
    if network is None:
        return None
    # Imported here: the LoRA package is imported by the patchers, the models are heavier.
    from comfy_core.models.flux import Flux
    from comfy_core.models.mmdit import MMDiT
    from comfy_core.models.wan import WanModel

    if isinstance(network, Flux):
        return FLUX
    if isinstance(network, MMDiT):
        return MMDIT
    if isinstance(network, WanModel):
        return WAN
    return None


def target_name(target: Target) -> str:
    """The parameter a target patches (the whole tensor's name for a slice)."""
    return target if isinstance(target, str) else target[0]


def _state_names(model: nn.Module) -> list[str]:
    """The state-dict names under `diffusion_model.` (parameters and persistent buffers, as
    ComfyUI reads `model.state_dict()`), in module order."""
    return [k for k in model.state_dict(keep_vars=True) if k.startswith(UNET_PREFIX)]


def native_key_map(names: Iterable[str]) -> dict[str, Target]:
    """ComfyUI's generic names for every tensor under `diffusion_model.`: a weight by its module
    path (`diffusion_model.x.y`, `model.diffusion_model.x.y`) and kohya's `lora_unet_x_y`; any
    other tensor (bias, norm scale, buffer) by its full name."""
    key_map: dict[str, Target] = {}
    for name in names:
        if name.endswith(".weight"):
            module = name[: -len(".weight")]
            key_map["lora_unet_" + module[len(UNET_PREFIX):].replace(".", "_")] = name
            key_map[module] = name
            key_map[CHECKPOINT_PREFIX + module] = name
        else:
            key_map[name] = name
            key_map[CHECKPOINT_PREFIX + name] = name
    return key_map


def _diffusers_names(key_map: dict[str, Target], diffusers: dict[str, Target], present: set[str],
                     dotted_prefixes: tuple[str, ...], underscored_prefixes: tuple[str, ...]) -> None:
    """Add the LoRA names of every diffusers `.weight` whose target the module has."""
    for diffusers_key, target in diffusers.items():
        if not diffusers_key.endswith(".weight") or target_name(target) not in present:
            continue
        layer = diffusers_key[: -len(".weight")]
        for prefix in dotted_prefixes:
            key_map[prefix + layer] = target
        for prefix in underscored_prefixes:
            key_map[prefix + layer.replace(".", "_")] = target


def flux_key_map(model: nn.Module) -> dict[str, Target]:
    """LoRA layer name -> target for the Flux transformer under `model.diffusion_model`."""
    from comfy_core.models.flux_keys import flux_to_diffusers

    config = model.diffusion_model.config  # FluxConfig: depth, depth_single_blocks, hidden_size, mlp_ratio
    names = _state_names(model)
    present = set(names)
    key_map = native_key_map(names)
    _diffusers_names(key_map, flux_to_diffusers(config, output_prefix=UNET_PREFIX), present,
                     ("transformer.",), ("lycoris_", "lora_transformer_"))
    for name in names:
        if name.endswith(".linear1.weight"):
            # The attention rows of a single block's fused linear1 ([3h + mlp, h]): q, k, v.
            key_map[name[: -len(".linear1.weight")] + ".linear1_qkv"] = (name, (0, 0, 3 * config.hidden_size))
    return key_map


def mmdit_key_map(model: nn.Module) -> dict[str, Target]:
    """LoRA layer name -> target for the MMDiT under `model.diffusion_model`."""
    from comfy_core.models.mmdit_keys import mmdit_to_diffusers

    network = model.diffusion_model
    config = network.config
    if config is None:  # built by its constructor rather than from a config
        config = {"depth": network.depth, "num_blocks": len(getattr(network, "joint_blocks", ()))}
    names = _state_names(model)
    key_map = native_key_map(names)
    _diffusers_names(key_map, mmdit_to_diffusers(config, output_prefix=UNET_PREFIX), set(names),
                     ("transformer.", "base_model.model."), ("lora_transformer_", "lycoris_"))
    return key_map


def wan_key_map(model: nn.Module) -> dict[str, Target]:
    """LoRA layer name -> target for the Wan DiT under `model.diffusion_model`."""
    from comfy_core.models.wan_keys import original_to_diffusers_name

    names = _state_names(model)
    key_map = native_key_map(names)
    for name in names:
        if not name.endswith(".weight"):
            continue
        layer = name[len(UNET_PREFIX):-len(".weight")]
        underscored = layer.replace(".", "_")
        key_map["lora_unet__" + underscored] = name  # diffusion-pipe / VideoX-Fun
        key_map["lycoris_" + underscored] = name  # SimpleTuner's LyCORIS
        key_map["transformer." + layer] = name
        diffusers = original_to_diffusers_name(layer + ".weight")
        if diffusers is not None:
            diffusers_layer = diffusers[: -len(".weight")]
            key_map["transformer." + diffusers_layer] = name
            key_map["diffusion_model." + diffusers_layer] = name
            key_map["lora_transformer_" + diffusers_layer.replace(".", "_")] = name
    return key_map


def row_permutations() -> tuple[Any, ...]:
    """The target functions of these maps that only reorder the first axis (the adaLN halves'
    swap of `flux_keys` and `mmdit_keys`): for a LoRA, `fn(up @ down) == fn(up) @ down` exactly."""
    from comfy_core.models import flux_keys, mmdit_keys

    return (flux_keys.swap_scale_shift, mmdit_keys.swap_scale_shift)


def dit_key_map(model: nn.Module) -> dict[str, Target] | None:
    """The LoRA key map of a Flux, MMDiT or Wan `model` (a MODEL's `.model`), None for other models."""
    kind = dit_kind(model)
    if kind == FLUX:
        return flux_key_map(model)
    if kind == MMDIT:
        return mmdit_key_map(model)
    if kind == WAN:
        return wan_key_map(model)
    return None


__all__ = ["FLUX", "MMDIT", "WAN", "Target", "dit_key_map", "dit_kind", "flux_key_map", "mmdit_key_map",
           "native_key_map", "row_permutations", "target_name", "wan_key_map"]
