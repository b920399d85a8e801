"""SeedVR2's nodes, with today's ComfyUI schemas (comfy_extras/nodes_seedvr.py, V3):
SeedVR2Preprocess, SeedVR2PostProcessing, SeedVR2Conditioning, SeedVR2TemporalChunk and
SeedVR2TemporalMerge. The work is comfy_core's (comfy_core/families/seedvr2/processing.py); the
model, its VAE and the sampling are the family's (comfy_core/families/seedvr2).

One difference of shape: where ComfyUI's pre-processing gives a 5-D IMAGE `[1, T, H, W, C]` for one
video, ours gives its frames `[T, H, W, C]`, the IMAGE every other node takes and what our video
VAE encodes as one clip (several videos stay 5-D).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.v3_schema import Combo, ComboOption, DynamicCombo, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_seedvr"


def _processing_error(input_name: str, expected: str, exc: Exception) -> NodeInputError:
    return NodeInputError(input_name, expected, str(exc))


def _image(value: Any, input_name: str) -> "torch.Tensor":
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim not in (4, 5) or 0 in value.shape:
        raise NodeInputError(input_name, "a 4-D or 5-D IMAGE tensor", describe(value))
    return value


@v3_node("SeedVR2Preprocess", display_name="Pre-Process SeedVR2 Input", category="image/pre-processors",
         python_module=MODULE,
         description="Pad a resized image for SeedVR2 model. Alpha channel is dropped. The node Post-Process SeedVR2 "
                     "Output re-applies it from the original resized image.",
         search_aliases=["seedvr2", "upscale", "video upscale", "pad", "preprocess"],
         inputs=[Socket("resized_images", "IMAGE", tooltip="The resized image to process.")],
         outputs=[Output("IMAGE", "images", tooltip="The padded image for VAE encoding.")])
def seedvr2_preprocess(resized_images: Any) -> tuple["torch.Tensor"]:
    from comfy_core.families.seedvr2.processing import SeedVR2ProcessingError, preprocess

    images = _image(resized_images, "resized_images")
    try:
        videos = preprocess(images)
    except SeedVR2ProcessingError as exc:
        raise _processing_error("resized_images", "frames at least 2 pixels on the shorter side", exc) from None
    return (videos[0] if videos.shape[0] == 1 else videos,)


@v3_node("SeedVR2PostProcessing", display_name="Post-Process SeedVR2 Output", category="image/post-processors",
         python_module=MODULE,
         description="Align the generated image with the original resized image and apply color correction.",
         search_aliases=["seedvr2", "upscale", "color correction", "color match", "postprocess"],
         inputs=[Socket("images", "IMAGE", tooltip="The generated image to process."),
                 Socket("original_resized_images", "IMAGE",
                        tooltip="The original resized image before pre-processing, used as reference."),
                 Combo("color_correction_method", ["lab", "wavelet", "adain", "none"], default="lab",
                       tooltip="Method to match the generated image colors to the original image. lab: transfer "
                               "color in CIELAB space, preserving detail (most faithful). wavelet: transfer "
                               "low-frequency color, keeping upscaled high-frequency detail. adain: match per-channel "
                               "mean/std (fastest, global tint). none: skip color transfer (geometry alignment "
                               "only).")],
         outputs=[Output("IMAGE", "images", tooltip="The aligned, color-corrected image.")])
def seedvr2_post_processing(images: Any, original_resized_images: Any,
                            color_correction_method: str = "lab") -> tuple["torch.Tensor"]:
    from comfy_core.families.seedvr2.processing import COLOR_METHODS, SeedVR2ProcessingError, postprocess

    decoded = _image(images, "images")
    reference = _image(original_resized_images, "original_resized_images")
    method = checks.choice(color_correction_method, COLOR_METHODS, "color_correction_method")
    device, _ = model_devices()
    try:
        return (postprocess(decoded, reference, method, device),)
    except SeedVR2ProcessingError as exc:
        raise _processing_error("images", "decoded frames matching the reference", exc) from None


def _network(model: Any) -> Any:
    network = getattr(getattr(model, "model", None), "diffusion_model", None)
    if network is None or not hasattr(network, "positive_conditioning"):
        raise NodeInputError("model", "a SeedVR2 model (UNETLoader of a seedvr2_* file)", describe(model))
    return network


@v3_node("SeedVR2Conditioning", display_name="Apply SeedVR2 Conditioning", category="model/conditioning",
         python_module=MODULE, description="Build SeedVR2 positive/negative conditioning from a VAE latent.",
         search_aliases=["seedvr2", "upscale", "conditioning"],
         inputs=[Socket("model", "MODEL", tooltip="The SeedVR2 model."),
                 Socket("vae_conditioning", "LATENT", display_name="latent")],
         outputs=[Output("CONDITIONING", "positive", tooltip="The positive conditioning for sampling."),
                  Output("CONDITIONING", "negative", tooltip="The negative conditioning for sampling.")])
def seedvr2_conditioning(model: Any, vae_conditioning: Any) -> tuple[list, list]:
    """ComfyUI's: the condition is the latent plus a ones channel `[B, 17, T, h, w]`; the texts are
    the model file's positive / negative embeddings."""
    import torch

    from comfy_core.families.seedvr2.processing import LATENT_CHANNELS

    network = _network(checks.model(model))
    samples = vae_conditioning.get("samples") if isinstance(vae_conditioning, dict) else None
    if not isinstance(samples, torch.Tensor) or samples.ndim != 5 or samples.shape[1] != LATENT_CHANNELS:
        raise NodeInputError("vae_conditioning", f"a SeedVR2 VAE latent [B, {LATENT_CHANNELS}, T, h, w]",
                             describe(samples if samples is not None else vae_conditioning))
    condition = torch.cat((samples, torch.ones_like(samples[:, :1])), dim=1)
    positive = network.positive_conditioning.detach().to("cpu", copy=True).unsqueeze(0)
    negative = network.negative_conditioning.detach().to("cpu", copy=True).unsqueeze(0)
    return ([[positive, {"condition": condition}]], [[negative, {"condition": condition}]])


CHUNKING_MODE = DynamicCombo("chunking_mode", (
    ComboOption("auto"),
    ComboOption("manual", (
        Int("frames_per_chunk", default=21, min=1, max=16384, step=4,
            tooltip="Pixel frames per temporal chunk (4n+1: 1, 5, 9, 13, ...)."),
    )),
), tooltip="manual = use frames_per_chunk exactly; auto = predict the largest chunk that fits free VRAM.")


def _free_bytes() -> int | None:
    from comfy_core.memory import device_free_memory

    device, _ = model_devices()
    free = device_free_memory(device)
    if free is None and device.type == "cpu":
        try:
            import psutil
        except ImportError:
            return None
        free = int(psutil.virtual_memory().available)
    return free


@v3_node("SeedVR2TemporalChunk", display_name="Split SeedVR2 Latent", category="model/latent/batch",
         python_module=MODULE,
         description="Split a SeedVR2 video latent into overlapping temporal chunks small enough to sample one at a "
                     "time within VRAM, wiring latents outputs to both Apply SeedVR2 Conditioning and the sampler "
                     "latent input before recombining with Merge SeedVR2 Latents.",
         search_aliases=["seedvr2", "split", "chunk", "temporal", "video upscale", "rebatch"],
         inputs=[Socket("latent", "LATENT", tooltip="The VAE-encoded SeedVR2 latent to split."),
                 Int("temporal_overlap", default=0, min=0, max=16384,
                     tooltip="Latent frames shared between adjacent chunks and crossfaded at merge; 0 = no overlap."),
                 CHUNKING_MODE],
         outputs=[Output("LATENT", "latents", tooltip="The temporal chunks in sequence order.", is_list=True),
                  Output("INT", "temporal_overlap",
                         tooltip="The effective latent-frame overlap between adjacent chunks, for Merge SeedVR2 "
                                 "Latents.")])
def seedvr2_temporal_chunk(latent: Any, temporal_overlap: int = 0,
                           chunking_mode: Any = None) -> tuple[list[dict], int]:
    from comfy_core.families.seedvr2.processing import (SeedVR2ProcessingError, auto_frames_per_chunk,
                                                        check_video_latent, temporal_chunks)

    if not isinstance(latent, dict):
        raise NodeInputError("latent", "a LATENT", describe(latent))
    overlap = checks.integer(temporal_overlap, "temporal_overlap", 0)
    mode = chunking_mode if isinstance(chunking_mode, dict) else {"chunking_mode": chunking_mode or "auto"}
    choice = checks.choice(mode.get("chunking_mode"), ("auto", "manual"), "chunking_mode")
    try:
        samples = check_video_latent(latent.get("samples"), "SeedVR2TemporalChunk")
        if choice == "auto":
            frames = auto_frames_per_chunk(samples, _free_bytes())
        else:
            frames = checks.integer(mode.get("frames_per_chunk", 21), "chunking_mode.frames_per_chunk", 1)
        chunks, effective = temporal_chunks(latent, overlap, frames)
    except SeedVR2ProcessingError as exc:
        raise _processing_error("latent", "a SeedVR2 video latent", exc) from None
    return (chunks, effective)


@v3_node("SeedVR2TemporalMerge", display_name="Merge SeedVR2 Latents", category="model/latent/batch",
         python_module=MODULE, input_is_list=True,
         description="Recombine sampled SeedVR2 latent temporal chunks into one latent, crossfading each overlap with "
                     "a Hann window sized by the temporal_overlap wired from Split SeedVR2 Latent.",
         search_aliases=["seedvr2", "merge", "temporal", "hann", "crossfade"],
         inputs=[Socket("latents", "LATENT", tooltip="The sampled temporal chunks in sequence order."),
                 Int("temporal_overlap", default=0, min=0, max=16384, forceInput=True,
                     tooltip="The temporal_overlap output of Split SeedVR2 Latent. 0 = plain concatenation.")],
         outputs=[Output("LATENT", "latent", tooltip="The recombined full-length latent.")])
def seedvr2_temporal_merge(latents: Any, temporal_overlap: Any) -> tuple[dict]:
    from comfy_core.families.seedvr2.processing import SeedVR2ProcessingError, merge_chunks

    items = latents if isinstance(latents, list) else [latents]
    if not items or not all(isinstance(item, dict) and "samples" in item for item in items):
        raise NodeInputError("latents", "a list of LATENT chunks", describe(latents))
    overlap = temporal_overlap[0] if isinstance(temporal_overlap, list) else temporal_overlap
    overlap = checks.integer(overlap, "temporal_overlap", 0)
    try:
        return (merge_chunks(items, overlap),)
    except SeedVR2ProcessingError as exc:
        raise _processing_error("latents", "SeedVR2 latent chunks of one video", exc) from None
