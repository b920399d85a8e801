"""VOID video inpainting (Netflix's VOID on CogVideoX-Fun V1.5) and optical flow nodes, V3 schemas as
today's ComfyUI declares them (`comfy_extras/nodes_void.py`); written here. The network is the
CogVideoX family's (comfy_core/families/cogvideox), RAFT is torchvision's
(comfy_core/models/optical_flow.py), the noise warp comfy_core/models/optical_flow_noise.py, the
sampler comfy_core/families/cogvideox/void_ddim.py.

- OpticalFlowLoader: a torchvision RAFT state dict from the `optical_flow` folder -> OPTICAL_FLOW
  (never downloaded).
- VOIDQuadmaskPreprocess: a mask (0..1 or 0..255) -> four levels: optionally the "remove" region
  (values under 128 of 255) dilated by `dilate_width` pixels, values quantised to 0 / 63 / 127 / 255
  (edges 31, 95, 191), then `(255 - m) / 255` (1 remove, ~0.75, ~0.5, 0 keep).
- VOIDInpaintConditioning: `length` rounded down so the latent length `(length - 1) // 4 + 1` is even
  (VOID's 2-frame patches; at least 2 latent frames); video and quadmask resized (bilinear, centre
  crop) to width x height; the VAE encodes `1 - mask` (as RGB) and the video times `1 - mask`; both
  latents cut or padded (last frame repeated) to the latent length and concatenated (32 channels) as
  `concat_latent_image` of both conditionings (the model scales each 16-channel half); the latent
  is zeros `[batch, 16, T, height / 8, width / 8]`.
- VOIDWarpedNoise: the pass-1 video resized to width x height, as uint8, -> optical-flow-warped noise
  (frames at half size, the state at 8x that, pooled by 32) resampled to the latent length (frames
  at `linspace(0, T - 1, latent_t)`, truncated) and size (bilinear), `[batch, 16, T, h, w]`.
- VOIDWarpedNoiseSource: a LATENT -> NOISE giving a copy of it (seed 0).
- VOIDSampler: the SAMPLER running VOID's DDIM loop (variance-preserving, no noise scaling).
"""
from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from graph.native import MAX_RESOLUTION
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices, model_file, model_files, report_progress
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_void"
KIND = "optical_flow"
OPTICAL_FLOW = "OPTICAL_FLOW"
TEMPORAL_COMPRESSION = 4
PATCH_SIZE_T = 2
LATENT_CHANNELS = 16
DOWNSCALE = 8
FRAME_SCALE = 0.5  # frames into RAFT at half size
FLOW_SCALE = 8  # the noise state at 8x the flow's size
LOG = logging.getLogger(__name__)

_model_files = model_files(KIND)


def valid_void_length(length: int) -> int:
    """`length` rounded down so that its latent length is a multiple of 2 (at least 2)."""
    latent = (length - 1) // TEMPORAL_COMPRESSION + 1
    if latent % PATCH_SIZE_T == 0:
        return length
    latent = max(PATCH_SIZE_T, (latent // PATCH_SIZE_T) * PATCH_SIZE_T)
    return (latent - 1) * TEMPORAL_COMPRESSION + 1


def _void_length(length: Any, node: str) -> int:
    length = checks.integer(length, "length", 1, MAX_RESOLUTION)
    adjusted = valid_void_length(length)
    if adjusted != length:
        LOG.warning("%s: rounding length %d down to %d so that the latent length is even (VOID's 2-frame "
                    "patches)", node, length, adjusted)
    return adjusted


def _size_inputs() -> list:
    return [Int("width", default=672, min=16, max=MAX_RESOLUTION, step=8),
            Int("height", default=384, min=16, max=MAX_RESOLUTION, step=8)]


def _resize_frames(frames: "torch.Tensor", width: int, height: int) -> "torch.Tensor":
    """`[T, H, W, C]` -> `[T, height, width, C]` (bilinear, centre crop: ComfyUI's common_upscale)."""
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(frames.movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)


@v3_node("OpticalFlowLoader", display_name="Load Optical Flow Model", category="loaders", python_module=MODULE,
         inputs=[InputSpec("model_name", _model_files, REQUIRED, {
             "tooltip": "Optical flow model to load.  Files must be placed in the 'optical_flow' folder.  "
                        "Today only torchvision's raft_large.pth is supported.", "multiselect": False})],
         outputs=[Output(OPTICAL_FLOW)])
def optical_flow_loader(model_name: str) -> tuple[Any]:
    """See the module docstring."""
    from comfy_core.models.optical_flow import OpticalFlowWeightsError, load_optical_flow

    path = model_file(KIND, model_name, "model_name")
    device, offload = model_devices()
    try:
        return (load_optical_flow(path, load_device=device, offload_device=offload),)
    except OpticalFlowWeightsError as exc:
        raise NodeInputError("model_name", "a torchvision RAFT optical flow model", str(exc)) from None


@v3_node("VOIDQuadmaskPreprocess", display_name="VOID Quadmask Preprocessor", category="image/mask",
         python_module=MODULE,
         inputs=[Socket("mask", "MASK"),
                 Int("dilate_width", default=0, min=0, max=50, step=1,
                     tooltip="Dilation radius for the primary mask region (0 = no dilation)")],
         outputs=[Output("MASK", "quadmask")])
def void_quadmask_preprocess(mask: "torch.Tensor", dilate_width: int = 0) -> tuple:
    """See the module docstring."""
    import torch
    import torch.nn.functional as F

    dilate = checks.integer(dilate_width, "dilate_width", 0, 50)
    if not isinstance(mask, torch.Tensor):
        raise NodeInputError("mask", "a MASK tensor", describe(mask))
    m = mask.clone().float()
    if m.max() <= 1.0:
        m = m * 255.0
    if dilate > 0 and m.ndim >= 3:
        remove = (m < 128).float()
        remove = remove.unsqueeze(1) if remove.ndim == 3 else remove
        grown = F.max_pool2d(remove, kernel_size=2 * dilate + 1, stride=1, padding=dilate)
        grown = grown.squeeze(1) if grown.ndim == 4 and m.ndim == 3 else grown
        m = torch.where(grown > 0.5, torch.zeros_like(m), m)
    levels = torch.full_like(m, 255.0)
    levels = torch.where(m <= 191, torch.full_like(m, 127.0), levels)
    levels = torch.where(m <= 95, torch.full_like(m, 63.0), levels)
    levels = torch.where(m <= 31, torch.zeros_like(m), levels)
    return ((255.0 - levels) / 255.0,)


@v3_node("VOIDInpaintConditioning", category="conditioning/video_models", python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Socket("video", "IMAGE", tooltip="Source video frames [T, H, W, 3]"),
                 Socket("quadmask", "MASK", tooltip="Preprocessed quadmask from VOIDQuadmaskPreprocess [T, H, W]"),
                 *_size_inputs(),
                 Int("length", default=45, min=1, max=MAX_RESOLUTION, step=1,
                     tooltip="Number of pixel frames to process. For CogVideoX-Fun-V1.5 (patch_size_t=2), "
                             "latent_t must be even — lengths that produce odd latent_t are rounded down "
                             "(e.g. 49 → 45)."),
                 Int("batch_size", default=1, min=1, max=64)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def void_inpaint_conditioning(positive: Any, negative: Any, vae: Any, video: "torch.Tensor", quadmask: "torch.Tensor",
                              width: int, height: int, length: int, batch_size: int) -> tuple:
    """See the module docstring."""
    import torch

    vae = checks.vae(vae)
    frames = checks.image_batch(video, "video")
    if not isinstance(quadmask, torch.Tensor) or quadmask.ndim not in (3, 4):
        raise NodeInputError("quadmask", "a MASK [T, H, W]", describe(quadmask))
    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 64)
    length = _void_length(length, "VOIDInpaintConditioning")
    latent_t = (length - 1) // TEMPORAL_COMPRESSION + 1
    clip = _resize_frames(frames[:length], width, height)
    mask = quadmask[:length].float()
    mask = _resize_frames(mask.unsqueeze(-1) if mask.ndim == 3 else mask, width, height)
    mask = mask.expand(-1, -1, -1, 3) if mask.shape[-1] == 1 else mask
    mask_latent = vae.encode(1.0 - mask)
    video_latent = vae.encode(clip[..., :3] * (1.0 - mask))
    for name, latent in (("mask", mask_latent), ("video", video_latent)):
        if getattr(latent, "ndim", None) != 5 or latent.shape[1] != LATENT_CHANNELS:
            raise NodeInputError("vae", f"a video VAE (CogVideoX's) encoding to [B, {LATENT_CHANNELS}, T, h, w]",
                                 f"one giving {describe(latent)} for the {name}")

    def fit(latent: "torch.Tensor") -> "torch.Tensor":
        if latent.shape[2] >= latent_t:
            return latent[:, :, :latent_t]
        return torch.cat([latent, latent[:, :, -1:].repeat(1, 1, latent_t - latent.shape[2], 1, 1)], dim=2)

    inpaint = torch.cat([fit(mask_latent), fit(video_latent)], dim=1)
    positive = set_values(checks.conditioning(positive, "positive"), {"concat_latent_image": inpaint})
    negative = set_values(checks.conditioning(negative, "negative"), {"concat_latent_image": inpaint})
    empty = torch.zeros([batch_size, LATENT_CHANNELS, latent_t, height // DOWNSCALE, width // DOWNSCALE])
    return (positive, negative, {"samples": empty})


@v3_node("VOIDWarpedNoise", category="latent/video", python_module=MODULE,
         inputs=[Socket("optical_flow", OPTICAL_FLOW,
                        tooltip="Optical flow model from OpticalFlowLoader (RAFT-large)."),
                 Socket("video", "IMAGE", tooltip="Pass 1 output video frames [T, H, W, 3]"),
                 *_size_inputs(),
                 Int("length", default=45, min=1, max=MAX_RESOLUTION, step=1,
                     tooltip="Number of pixel frames. Rounded down to make latent_t even (patch_size_t=2 "
                             "requirement), e.g. 49 → 45."),
                 Int("batch_size", default=1, min=1, max=64)],
         outputs=[Output("LATENT", "warped_noise")])
def void_warped_noise(optical_flow: Any, video: "torch.Tensor", width: int, height: int, length: int,
                      batch_size: int) -> tuple:
    """See the module docstring."""
    import torch
    import torch.nn.functional as F

    from comfy_core.models.optical_flow import OpticalFlowModel
    from comfy_core.models.optical_flow_noise import warped_noise

    if not isinstance(optical_flow, OpticalFlowModel):
        raise NodeInputError("optical_flow", "an OPTICAL_FLOW (from OpticalFlowLoader)", describe(optical_flow))
    frames = checks.image_batch(video, "video")
    width = checks.integer(width, "width", 16, MAX_RESOLUTION)
    height = checks.integer(height, "height", 16, MAX_RESOLUTION)
    batch_size = checks.integer(batch_size, "batch_size", 1, 64)
    length = _void_length(length, "VOIDWarpedNoise")
    latent_t, latent_h, latent_w = (length - 1) // TEMPORAL_COMPRESSION + 1, height // DOWNSCALE, width // DOWNSCALE
    with optical_flow.loaded():
        device = optical_flow.load_device
        clip = _resize_frames(frames[:length, :, :, :3].to(device), width, height)
        as_bytes = (clip.clamp(0, 1) * 255).to(torch.uint8)
        try:
            noise = warped_noise(as_bytes, optical_flow.flow, noise_channels=LATENT_CHANNELS,
                                 resize_frames=FRAME_SCALE, resize_flow=FLOW_SCALE,
                                 downscale_factor=round(FRAME_SCALE * FLOW_SCALE) * DOWNSCALE, device=device,
                                 on_frame=report_progress)
        except ValueError as exc:
            raise NodeInputError("video", "frames RAFT can compare (width and height at least 256: 128 after "
                                          "halving)", str(exc)) from None
    if noise.shape[0] != latent_t:
        noise = noise[torch.linspace(0, noise.shape[0] - 1, latent_t, device=noise.device).long()]
    if noise.shape[1:3] != (latent_h, latent_w):
        noise = F.interpolate(noise.permute(0, 3, 1, 2), size=(latent_h, latent_w), mode="bilinear",
                              align_corners=False).permute(0, 2, 3, 1)
    samples = noise.permute(3, 0, 1, 2).unsqueeze(0).repeat(batch_size, 1, 1, 1, 1)
    return ({"samples": samples.cpu()},)


class LatentNoise:
    """A NOISE that gives a copy of a LATENT's samples (ComfyUI's `Noise_FromLatent`, seed 0)."""

    def __init__(self, latent: dict) -> None:
        self.seed = 0
        self.samples = latent["samples"]

    def generate_noise(self, input_latent: dict) -> "torch.Tensor":
        return self.samples.clone().cpu()


@v3_node("VOIDWarpedNoiseSource", category="sampling/noise", python_module=MODULE,
         inputs=[Socket("warped_noise", "LATENT", tooltip="Warped noise latent from VOIDWarpedNoise")],
         outputs=[Output("NOISE")])
def void_warped_noise_source(warped_noise: dict) -> tuple:
    """See the module docstring."""
    checks.latent(warped_noise, "warped_noise")
    return (LatentNoise(warped_noise),)


@functools.cache
def void_ddim_sampler_class() -> type:
    """The SAMPLER class VOIDSampler gives (ComfyUI's `VOID_DDIM`, a `comfy.samplers.Sampler`), built on
    first use so this module imports no torch: `sample(...)` runs
    comfy_core/families/cogvideox/void_ddim.py's loop; the latent image and denoise mask are unused."""
    from comfy_core.families.cogvideox.void_ddim import void_ddim
    from comfy_core.sampling.guider import Sampler

    class VoidDDIM(Sampler):
        def sample(self, model_wrap: Any, sigmas: Any, extra_args: dict, callback: Any, noise: Any,
                   latent_image: Any = None, denoise_mask: Any = None, disable_pbar: bool = True) -> Any:
            return void_ddim(model_wrap, sigmas, extra_args, callback, noise)

    return VoidDDIM


@v3_node("VOIDSampler", category="sampling/samplers", python_module=MODULE, outputs=[Output("SAMPLER")])
def void_sampler() -> tuple:
    """See the module docstring."""
    return (void_ddim_sampler_class()(),)
