"""Stable Audio 3 (Medium, Medium base): a variant of the Stable Audio family, as today's ComfyUI has
it (`supported_models.StableAudio3(StableAudio)`, `model_base.StableAudio3`):

- detected by the DiT's shared AdaLN embedder `transformer.global_cond_embedder.0.weight` under
  `model.model.` (`sa3_dit.py`) with `conditioner.conditioners.seconds_total.` and no
  `seconds_start` (Stable Audio Open has both and no shared embedder); widths, depth, heads
  (from the q-norm width), memory tokens from the weights;
- sampling: model type FLOW, ModelSamplingDiscreteFlow with shift 2 and multiplier 1 (the
  network takes t = sigma in 0..1);
- latents `[B, 256, T]` of 4096 samples at 44.1 kHz from the SAME VAE under `pretransform.model.`
  (`models/sa3_vae.py`, its patcher `patching/sa3_vae.py`); ComfyUI's latent format
  `StableAudio3` (scale 1);
- conditioning (`StableAudio3Conditions`): `seconds_total` (default: the latent's duration,
  `int(frames / 10.7666)`) through the file's number embedder (`ExpoNumberConditioner`, 0..384
  s, exponential Fourier features) -> `global_embed`; the text states padded to 256 tokens with the
  file's learned `conditioner.conditioners.prompt.padding_embedding`, then the seconds embedding as
  one more token -> the cross-attention context; `local_add_cond` `[B, 257, T]` = (1 - inpaint
  mask, model-space inpaint latent), zeros without them;
- text: T5Gemma (`t5gemma_b_b_ul2.safetensors`, CLIPLoader type "stable_audio"; `clip.py`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.stable_audio import PREFIX, VAE_PREFIX, supported_models
from comfy_core.families.stable_audio.conditioner import START, TOTAL
from comfy_core.families.stable_audio.latent_format import StableAudio3 as StableAudio3Latent
from comfy_core.models.model_conditions import ConditioningError, ModelConditions

SA3_MARKER = "transformer.global_cond_embedder.0.weight"
PADDING = "conditioner.conditioners.prompt.padding_embedding"
SA3_SHIFT = 2.0
SECONDS_MAX = 384.0
FRAMES_PER_SECOND = 10.7666  # ComfyUI's default seconds_total divisor (44100 / 4096)
MAX_TEXT_TOKENS = 256


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.stable_audio.sa3_dit import StableAudio3DiTConfig

    return StableAudio3DiTConfig.detect_from_weights(tensors, prefix)


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.stable_audio.sa3_dit import StableAudio3DiT

    return StableAudio3DiT.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.stable_audio.sa3_dit import StableAudio3ConfigError

    return (StableAudio3ConfigError,)


def _facts(config: Any) -> dict[str, Any]:
    return {"audio_model": "dit1.0", "global_cond_shared_embed": True, "embed_dim": config.embed_dim}


def sa3_architecture() -> Architecture:
    return Architecture(name="stable_audio3", markers=(SA3_MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.cond_token_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


class ExpoNumberConditioner(nn.Module):
    """stable-audio-tools' `NumberConditioner` with exponential Fourier features (ComfyUI's
    `NumberConditioner(768, min_val=0, max_val=384, fourier_features_type="expo")`): a number
    clamped and normalised to 0..1, `[cos(2 pi x f), sin(2 pi x f)]` with `f` log-spaced 0.5 ..
    10000, then `embedder.embedding.1` (linear) -> `[N, 1, width]`."""

    def __init__(self, features: int, width: int, min_val: float = 0.0, max_val: float = SECONDS_MAX) -> None:
        super().__init__()
        self.min_val, self.max_val, self.features = float(min_val), float(max_val), features
        self.embedder = nn.Module()
        self.embedder.embedding = nn.ModuleList([nn.Identity(), nn.Linear(features, width)])

    @classmethod
    def from_state_dict(cls, state: Mapping[str, torch.Tensor]) -> "ExpoNumberConditioner":
        try:
            width, features = state["embedder.embedding.1.weight"].shape
        except (KeyError, ValueError):
            raise ConditioningError(f"Stable Audio 3 seconds conditioner: expected 'embedder.embedding.1.weight', "
                                    f"got {sorted(state)}") from None
        if features % 2:
            raise ConditioningError(f"Stable Audio 3 seconds conditioner: {features} Fourier features (must be even)")
        module = cls(features, width)
        module.load_state_dict(state, strict=True, assign=True)
        return module.eval()

    def forward(self, values: Sequence[float] | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        from comfy_core.families.stable_audio.sa3_dit import expo_fourier

        linear = self.embedder.embedding[1]
        x = torch.as_tensor([float(v) for v in values], dtype=torch.float32)
        x = (x.clamp(self.min_val, self.max_val) - self.min_val) / (self.max_val - self.min_val)
        features = expo_fourier(x.to(linear.weight.device), self.features).to(linear.weight.dtype)
        out = linear(features).unsqueeze(1)  # [N, 1, width]
        return out if device is None else out.to(device)


class StableAudio3Conditions(ModelConditions):
    """See the module docstring. The embedder and the padding embedding live on the model
    (`model.seconds_total_embedder`, `model.padding_embedding`, ComfyUI's attribute names)."""

    name = "stable_audio3"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        embedder = getattr(model, "seconds_total_embedder", None)
        if embedder is None:
            raise ConditioningError("Stable Audio 3: the model has no seconds_total embedder (the checkpoint's "
                                    "conditioner.conditioners.seconds_total weights)")
        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        out: dict[str, Any] = {"local_add_cond": self._local(model, noise, kwargs).to(device)}
        total = kwargs.get("seconds_total", int(noise.shape[-1] / FRAMES_PER_SECOND))
        total_embed = embedder([total], device)[0]  # [1, width]
        out["global_embed"] = total_embed.reshape(1, -1)
        cross = kwargs.get("cross_attn")
        if cross is not None:
            if cross.shape[-1] != total_embed.shape[-1]:
                raise ConditioningError(f"Stable Audio 3: the text conditioning is {cross.shape[-1]} wide, the "
                                        f"seconds embedding {total_embed.shape[-1]} (wrong text encoder for this "
                                        f"model?)")
            cross = cross.to(device)
            pad = getattr(model, "padding_embedding", None)
            if pad is not None and cross.shape[1] < MAX_TEXT_TOKENS:
                fill = pad.to(device=device, dtype=cross.dtype).view(1, 1, -1)
                cross = torch.cat((cross, fill.expand(cross.shape[0], MAX_TEXT_TOKENS - cross.shape[1], -1)), dim=1)
            out["c_crossattn"] = torch.cat((cross, total_embed.to(cross.dtype).repeat(cross.shape[0], 1, 1)), dim=1)
        return out

    @staticmethod
    def _local(model: Any, noise: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        """ComfyUI's `StableAudio3.concat_cond`: `[mask, latent]` along the channels, `[B, 1 + C, T]`."""
        from comfy_core.models.concat_inputs import resize_to_batch_size

        image = kwargs.get("concat_latent_image")
        if image is None:
            image = torch.zeros_like(noise)
        else:
            if image.shape[1:] != noise.shape[1:]:
                raise ConditioningError(f"Stable Audio 3: concat_latent_image is {tuple(image.shape)}, the latent "
                                        f"{tuple(noise.shape)}")
            image = resize_to_batch_size(model.process_latent_in(image.to(noise.device)), noise.shape[0])
        mask = kwargs.get("concat_mask", kwargs.get("denoise_mask"))
        if mask is None:
            mask = torch.zeros_like(noise)[:, :1]
        else:
            mask = mask.to(noise.device, noise.dtype)
            if mask.shape[1] != 1:
                mask = mask.mean(dim=1, keepdim=True)
            mask = resize_to_batch_size(1.0 - mask, noise.shape[0])
        return torch.cat((mask.to(noise.dtype), image.to(noise.dtype)), dim=1)


class StableAudio3Components:
    """What the single-file loader builds for Stable Audio 3: the DiT, the SAME VAE and its audio
    patcher, the flow model sampling, and (`attach`) the seconds_total embedder and the text padding
    embedding read from the file."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.sa3_vae import SA3VAEConfig, SA3VAEConfigError
        from comfy_core.models.vae import VAEConfigError

        try:
            return SA3VAEConfig.detect_from_weights(tensors, prefix)
        except SA3VAEConfigError as exc:
            raise VAEConfigError(str(exc)) from None

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.sa3_vae import SA3VAE

        return SA3VAE(config)

    def vae_patcher(self, module: Any, load_device: Any, offload_device: Any) -> Any:
        from comfy_core.patching.sa3_vae import SA3VaePatcher

        return SA3VaePatcher(module, load_device, offload_device)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)

    def attach(self, model: Any, read: Any, names: Any) -> None:
        state = {name[len(TOTAL):]: read(name) for name in names if name.startswith(TOTAL)}
        model.seconds_total_embedder = ExpoNumberConditioner.from_state_dict(state)
        model.padding_embedding = read(PADDING) if PADDING in names else None


def text_encoders() -> Any:
    from comfy_core.families.stable_audio.clip import STABLE_AUDIO3_TEXT_ENCODERS

    return STABLE_AUDIO3_TEXT_ENCODERS


def definition() -> Family:
    latent = StableAudio3Latent()
    return Family(
        name="stable_audio3",
        display_name="Stable Audio 3",
        signature=Signature(required_prefixes=(PREFIX + SA3_MARKER, TOTAL), forbidden_prefixes=(START,),
                            unet=(("audio_model", "dit1.0"), ("global_cond_shared_embed", True)),
                            diffusion_model=(("global_cond_shared_embed", True),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=SA3_SHIFT, multiplier=1.0,
                                default_sampler="euler", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=4096),
        unet_prefix=PREFIX,
        vae_prefix=VAE_PREFIX,
        conditioning=StableAudio3Conditions(),
        components=StableAudio3Components(),
        architecture=sa3_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=supported_models.StableAudio3,
        comfy_model_class="StableAudio3",
    )


__all__ = ["ExpoNumberConditioner", "SA3_SHIFT", "StableAudio3Conditions", "definition", "sa3_architecture"]
