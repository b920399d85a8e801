"""`Architecture`: the kind of network a family's diffusion model is (UNet, MMDiT, Flux DiT, ...).

A family names its architecture; the registry and the loaders read it instead of assuming a UNet:
where the network sits in a file (`markers`, key names after the family's prefix), how its
config is read from names and shapes (`detect`), the facts a `Signature` may test (`facts`), and
how the module is built (`build(config, operations=None)`: ComfyUI's layer namespace, or our
torch layers). `finalize` completes a detected config with what only the family knows (the UNet's
attention-head layout); `context_width` tells the wrapper what text-conditioning width the network
takes, so a wrong CLIP is refused before the first layer fails.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class Architecture:
    name: str
    markers: tuple[str, ...]  # any of these (after the family's prefix) present: the network is in the file
    detect: Callable[[Mapping[str, Any], str], Any]  # (tensors, prefix) -> config; raises one of `errors`
    facts: Callable[[Any], dict[str, Any]]
    build: Callable[..., "nn.Module"]  # build(config, operations=None)
    errors: tuple[type[Exception], ...]
    finalize: Callable[[Any, Any], Any] | None = None
    context_width: Callable[[Any], int | None] = lambda config: None
    # Whether families of this architecture state an attention-head layout (UNets: the weights
    # cannot show it); DiT configs read their heads from the weights.
    head_layout: bool = False
    # diffusers-layout files of this network (split diffusion-model files): `is_diffusers(names)`
    # tells them, `from_diffusers(state)` gives the tensors in the family's names (no prefix),
    # converting fused weights where the layouts differ (DiT q/k/v). None: not supported here
    # (the UNet's diffusers names are a plain renaming: comfy_core/checkpoint/diffusers_keys.py).
    is_diffusers: Callable[[Any], bool] | None = None
    from_diffusers: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    # ComfyUI's `model_config.unet_config` dict of a config (what packs read).
    comfy_config: Callable[[Any], dict[str, Any]] | None = None
    # (tensors, prefix, metadata) -> config, for networks whose files state in their metadata
    # what names and shapes cannot show (LTX-2's `config` entry: RoPE layout and precision, ...),
    # as ComfyUI's `detect_unet_config` merges it; None: `detect` alone.
    detect_with_metadata: Callable[[Mapping[str, Any], str, Mapping[str, str]], Any] | None = None
    # The `transformer_options["patches"]` slot the network calls on each self-attention output,
    # which names its calling convention: "attn1_output_patch" (`(out, extra_options) -> out`:
    # ComfyUI's UNet after the output projection, its Flux-line blocks on the joint attention
    # before it, `extra_options["img_slice"]` marking the image tokens) or "attn1_patch" (ComfyUI's Wan:
    # `{"x", "q", "k", "transformer_options"} -> x` before it); None: neither is called.
    self_attention_hook: str | None = None

    def present(self, names: Any, prefix: str) -> bool:
        return any(prefix + marker in names for marker in self.markers)

    def config(self, tensors: Mapping[str, Any], prefix: str, family: Any,
               metadata: Mapping[str, str] | None = None) -> Any:
        if self.detect_with_metadata is not None:
            config = self.detect_with_metadata(tensors, prefix, metadata or {})
        else:
            config = self.detect(tensors, prefix)
        return self.finalize(config, family) if self.finalize is not None else config


# --- the UNet (SD1.x, SD2.x, SDXL and their variants, SVD) ---

def _unet_detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.models.unet import UNetConfig

    return UNetConfig.detect_from_weights(tensors, prefix)


def unet_facts(config: Any) -> dict[str, Any]:
    """The facts a `Signature.unet` may test of a `UNetConfig`."""
    facts = dataclasses.asdict(config)
    facts["has_adm"] = config.adm_in_channels is not None
    facts["channel_mult"] = tuple(config.channel_mult)
    facts["levels"] = len(config.channel_mult)
    # SD1/SD2 attend at full latent resolution, SDXL and its refiner start attending one level down.
    facts["attention_at_first_level"] = bool(config.transformer_depth and config.transformer_depth[0] > 0)
    return facts


def _unet_build(config: Any, operations: Any = None) -> "nn.Module":
    from comfy_core.models.unet import UNetModel

    return UNetModel(config) if operations is None else UNetModel(config, operations=operations)


def _unet_finalize(config: Any, family: Any) -> Any:
    return dataclasses.replace(config, num_heads=family.num_heads, num_head_channels=family.num_head_channels)


def _unet_errors() -> tuple[type[Exception], ...]:
    from comfy_core.models.unet import UNetConfigError

    return (UNetConfigError,)


def unet_architecture() -> Architecture:
    return Architecture(name="unet", markers=("input_blocks.0.0.weight",), detect=_unet_detect, facts=unet_facts,
                        build=_unet_build, errors=_unet_errors(), finalize=_unet_finalize,
                        context_width=lambda config: config.context_dim, head_layout=True,
                        self_attention_hook="attn1_output_patch")
