"""Building the VAE module (`AutoencoderKL`) from a VAE file or an in-memory state dict.

`comfy_core.loading.load_vae` (VAELoader) and `VaePatcher(sd=...)` (ComfyUI's `comfy.sd.VAE(sd=...)`,
which packs call with a state dict they loaded themselves) share it, so both read the same key
layouts: a standalone VAE (`encoder.*`/`decoder.*`), a checkpoint's `first_stage_model.*`, a
`vae.*` prefix, or diffusers' `AutoencoderKL` names (converted, as ComfyUI's VAE loader does).
With or without the quantisation convolutions (SD3 / Flux.1 16-channel VAEs have none; the
config reads which from the weights). A temporal decoder (SVD's, `decoder.mid.block_1.mix_factor`)
builds the video autoencoder, as ComfyUI's `comfy/sd.py: VAE` does. A Wan VAE (2.1 or 2.2:
`decoder.middle.0.residual.0.gamma`, ComfyUI's marker, or diffusers' `AutoencoderKLWan` names,
converted) builds `comfy_core.models.wan_vae.WanVAE` with the architecture read from the weights; an
LTX-Video VAE (ComfyUI's marker `decoder.up_blocks.0.res_blocks.0.conv1.conv.weight`) builds
`comfy_core.models.ltxv_vae.LTXVVAE`, its block layout read from the weights. HunyuanVideo 1.0's
causal VAE (its released names with `decoder.mid_block.attentions.0.to_q`, or ComfyUI's LDM names)
builds `comfy_core.models.hunyuan_video_vae.HunyuanVideoVAE`; Mage-Flow's codec (`dconv_encoder.*`, or the
release's `student.dconv_encoder.*` / `pipeline.*`) `comfy_core.models.mage_vae.MageVAE`; SeedVR2's (ComfyUI's marker
`decoder.up_blocks.2.upsamplers.0.upscale_conv.weight`) `comfy_core.models.seedvr2_vae.SeedVR2VAE`.
The module is built on the meta device and given its tensors by assignment (no second copy).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch

from comfy_core.checkpoint.bulk import DEFAULT_WORKERS
from comfy_core.checkpoint.diffusers_keys import DiffusersLayoutError, is_diffusers_vae
from comfy_core.checkpoint.diffusers_keys import vae_names as diffusers_vae_names
from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.checkpoint.materialize import build_on_meta, materialize
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.checkpoint.renamed import RenamedCheckpoint
from comfy_core.models.flux2_vae import MARKER as FLUX2_MARKER, Flux2AutoencoderKL
from comfy_core.models.hunyuan_video15_vae import (HunyuanVideo15VAE, HunyuanVideo15VAEConfig,
                                                 is_hunyuan_video15_vae)
from comfy_core.models import hunyuan_video_vae
from comfy_core.models.ltx_diffusion_vae import MARKER as LTX_DIFFUSION_MARKER, LTXDiffusionVAE
from comfy_core.models.ltx_diffusion_vae import encoder_config as ltx_encoder_config
from comfy_core.models.ltxv_vae import MARKER as LTXV_MARKER, LTXVVAE, LTXVVAEConfig
from comfy_core.models import mage_vae
from comfy_core.models import cogvideox_vae
from comfy_core.models.pixel_space_vae import MARKER as PIXEL_SPACE_MARKER, PixelSpaceVAE
from comfy_core.models.seedvr2_vae import SeedVR2VAE, SeedVR2VAEConfig, is_seedvr2_vae
from comfy_core.models.vae import AutoencoderKL, VAEConfig, VAEConfigError
from comfy_core.models.video_vae import VideoAutoencoder, video_vae_config
from comfy_core.models.wan_image_vae import WanImageVAE, is_image_config
from comfy_core.models.wan_vae import WanVAE
from comfy_core.models.wan_vae_config import WAN_MARKER, WanVAEConfig
from comfy_core.models.wan_vae_keys import WanKeyError, is_diffusers_wan_vae, wan_vae_names

VAE_PREFIXES = ("first_stage_model.", "vae.", "")


def vae_view(checkpoint: CheckpointFile) -> CheckpointFile | RenamedCheckpoint:
    """The VAE file as our modules name it: a diffusers `AutoencoderKL` file (`decoder.up_blocks.*`,
    ComfyUI's VAE loader converts those too) under the LDM names, any other file as it is."""
    if not is_diffusers_vae(checkpoint.tensors):
        return checkpoint
    try:
        return RenamedCheckpoint(checkpoint, diffusers_vae_names(checkpoint.tensors))
    except DiffusersLayoutError as exc:
        raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None


def wan_vae_view(checkpoint: CheckpointFile) -> tuple[CheckpointFile | RenamedCheckpoint, str] | None:
    """(the file under the original Wan names, prefix) when it holds a Wan VAE, else None.

    The original layout is found under any of `VAE_PREFIXES`; a diffusers `AutoencoderKLWan`
    layout is renamed (its prefix is folded into the names, so the prefix is then "")."""
    names = checkpoint.tensors
    for prefix in VAE_PREFIXES:
        if f"{prefix}{WAN_MARKER}" in names:
            return checkpoint, prefix
    for prefix in VAE_PREFIXES:
        if is_diffusers_wan_vae(names, prefix):
            try:
                return RenamedCheckpoint(checkpoint, wan_vae_names(names, prefix)), ""
            except WanKeyError as exc:
                raise ShapeMismatchError(checkpoint.path, f"Wan VAE: {exc}") from None
    return None


def _file_vae_config(metadata: Mapping[str, str]) -> Mapping[str, Any] | None:
    """The `vae` section of a file's `config` metadata (LTX-2's checkpoints and VAE files), as
    ComfyUI reads it; None when there is none. Unreadable JSON is a malformed file."""
    text = metadata.get("config")
    if not text:
        return None
    try:
        section = json.loads(text).get("vae")
    except (ValueError, AttributeError) as exc:
        raise VAEConfigError(f"the file's 'config' metadata is not a JSON object ({exc})") from None
    return section if isinstance(section, dict) else None


def vae_module_from(source: str | Path | Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32, *,
                    mmap: bool = True, workers: int = DEFAULT_WORKERS,
                    metadata: Mapping[str, str] | None = None) -> AutoencoderKL | WanVAE:
    """An `AutoencoderKL` (or a Wan video VAE, eval mode) from a VAE file or a state dict,
    weights in `dtype`.

    Raises `CheckpointError` subclasses naming the file (`<state dict>` for a mapping):
    `MissingComponentError` when it holds no VAE, `ShapeMismatchError` when it is malformed."""
    if isinstance(source, Mapping) and set(source) == {PIXEL_SPACE_MARKER}:
        return PixelSpaceVAE().eval()  # ComfyUI's marker-only state dict: no network
    with CheckpointFile(source, metadata=metadata) as file:
        wan = wan_vae_view(file)
        if wan is not None:
            checkpoint, prefix = wan
            try:
                config = WanVAEConfig.detect_from_weights(checkpoint.tensors, prefix)
            except VAEConfigError as exc:
                raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
            # One-frame kernels: the image VAE in the Wan 2.2 layout (Qwen-Image 2.1's), 4-D latents.
            build = WanImageVAE if is_image_config(config) else WanVAE
            vae = materialize(build_on_meta(lambda: build(config)), checkpoint, prefix, dtype, "VAE",
                              zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        cogvideox = [p for p in VAE_PREFIXES if cogvideox_vae.is_cogvideox_vae(file.tensors, p)]
        if cogvideox:  # CogVideoX's causal video VAE (its spatial-norm decoder; before HunyuanVideo's names)
            try:
                config = cogvideox_vae.CogVideoXVAEConfig.detect_from_weights(file.tensors, cogvideox[0])
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: cogvideox_vae.CogVideoXVAE(config)), file, cogvideox[0], dtype,
                              "VAE", zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        seedvr2 = [p for p in VAE_PREFIXES if is_seedvr2_vae(file.tensors, p)]
        if seedvr2:  # SeedVR2's causal video VAE (ComfyUI's marker; before HunyuanVideo's, which shares names)
            try:
                config = SeedVR2VAEConfig.detect_from_weights(file.tensors, seedvr2[0])
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: SeedVR2VAE(config)), file, seedvr2[0], dtype, "VAE",
                              zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        hv15 = [p for p in VAE_PREFIXES if is_hunyuan_video15_vae(file.tensors, p)]
        if hv15:  # HunyuanVideo 1.5's causal video VAE (16x, 4x, 32 channels)
            try:
                config = HunyuanVideo15VAEConfig.detect_from_weights(file.tensors, hv15[0])
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: HunyuanVideo15VAE(config)), file, hv15[0], dtype, "VAE",
                              zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        hunyuan = hunyuan_video_vae.vae_view(file)
        if hunyuan is not None:  # HunyuanVideo 1.0's causal video VAE (Kandinsky 5's)
            checkpoint, prefix = hunyuan
            try:
                config = hunyuan_video_vae.HunyuanVideoVAEConfig.detect_from_weights(checkpoint.tensors, prefix)
            except VAEConfigError as exc:
                raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: hunyuan_video_vae.HunyuanVideoVAE(config)), checkpoint, prefix,
                              dtype, "VAE", (hunyuan_video_vae.ATTENTION_CONV_TO_LINEAR,), zero_copy=mmap,
                              workers=workers)
            vae.eval()
            return vae
        mage = mage_vae.is_mage_vae(file.tensors)
        if mage is not None:  # Mage-Flow's one-step codec (ComfyUI's names, or the release's renamed)
            checkpoint = file if mage == "comfy" else RenamedCheckpoint(file, mage_vae.release_names(file.tensors))
            try:
                config = mage_vae.MageVAEConfig.detect_from_weights(checkpoint.tensors)
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: mage_vae.MageVAE(config)), checkpoint, "", dtype, "VAE",
                              zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        diffusion = [p for p in VAE_PREFIXES if f"{p}{LTX_DIFFUSION_MARKER}" in file.tensors]
        if diffusion:  # LTX-2.4 / 2.5's video VAE with the diffusion decoder (ComfyUI's marker)
            try:
                described = _file_vae_config(file.metadata)
                config = ltx_encoder_config(file.tensors, diffusion[0], described)
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: LTXDiffusionVAE(config, described)), file, diffusion[0], dtype,
                              "VAE", zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        ltxv = [p for p in VAE_PREFIXES if f"{p}{LTXV_MARKER}" in file.tensors]
        if ltxv:  # LTX-Video's causal video VAE (ComfyUI's marker)
            try:
                config = LTXVVAEConfig.detect_from_weights(file.tensors, ltxv[0])
                described = _file_vae_config(file.metadata)
                if described is not None:
                    config = config.with_file_config(described)
            except VAEConfigError as exc:
                raise ShapeMismatchError(file.path, f"VAE: {exc}") from None
            vae = materialize(build_on_meta(lambda: LTXVVAE(config)), file, ltxv[0], dtype, "VAE",
                              zero_copy=mmap, workers=workers)
            vae.eval()
            return vae
        checkpoint = vae_view(file)
        prefixes = [p for p in VAE_PREFIXES if f"{p}encoder.conv_in.weight" in checkpoint.tensors]
        if not prefixes:
            raise MissingComponentError(checkpoint.path, "not a VAE: no 'encoder.conv_in.weight' nor Wan's "
                                                         f"'{WAN_MARKER}' (with or without "
                                                         "a 'first_stage_model.' prefix)")
        prefix = prefixes[0]
        # Without quantisation convolutions an image VAE and SVD's would both build: tell them apart.
        video = f"{prefix}decoder.mid.block_1.mix_factor" in checkpoint.tensors
        detect, build = ((video_vae_config, VideoAutoencoder) if video
                         else (VAEConfig.detect_from_weights, AutoencoderKL))
        if f"{prefix}{FLUX2_MARKER}" in checkpoint.tensors:  # Flux.2's latent statistics
            build = Flux2AutoencoderKL
        try:
            config = detect(checkpoint.tensors, prefix)
        except VAEConfigError as exc:
            raise ShapeMismatchError(checkpoint.path, f"VAE: {exc}") from None
        vae = materialize(build_on_meta(lambda: build(config)), checkpoint, prefix, dtype, "VAE",
                          (vae_attention_linear_to_conv(),), zero_copy=mmap, workers=workers)
    vae.eval()
    return vae
