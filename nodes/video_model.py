"""Stable Video Diffusion nodes with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_video_model.py): ImageOnlyCheckpointLoader, ImageOnlyCheckpointSave,
SVD_img2vid_Conditioning, VideoLinearCFGGuidance, VideoTriangleCFGGuidance.

- ImageOnlyCheckpointLoader: a checkpoint without its text encoder (SVD has none) plus the
  image encoder it carries where its family keeps one (`Family.clip_vision_prefix`; SVD's
  `conditioner.embedders.0.open_clip.model.visual.*`), None otherwise, as in ComfyUI.
- SVD_img2vid_Conditioning: the positive is the init image's CLIP vision embedding as a
  `[1, images, P]` context with `motion_bucket_id`, `fps`, `augmentation_level` and the init
  image's VAE latent (`concat_latent_image`; the image first resized bilinearly, centre-cropped,
  to width x height, plus Gaussian noise times `augmentation_level` when it is above 0, from
  torch's global generator as ComfyUI does); the negative is the same with zeros; the LATENT is
  `video_frames` zero frames of 4 x height/8 x width/8. The model reads these options when
  sampling (comfy_core/families/svd/video_diffusion.py).
- VideoLinearCFGGuidance / VideoTriangleCFGGuidance: a clone of the MODEL with a per-frame CFG
  scale (`sampler_cfg_function`, comfy_core/sampling/video_cfg.py).
- ImageOnlyCheckpointSave: MODEL + CLIP_VISION + VAE written as one checkpoint
  (comfy_core/checkpoint/svd_save.py).
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from graph.native import MAX_RESOLUTION, Combo, Float, Hidden, Input, Int, Output, String, node
import nodes.checks as checks
from nodes.environment import current_env, model_file
from nodes.errors import NodeInputError, describe, image_input_errors
from nodes.loaders import _default_attention, _files, _options, _track

# torch and comfy_core's models are imported inside the functions that run: registering these
# nodes and rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_video_model"


@node("ImageOnlyCheckpointLoader", category="loaders/video_models", python_module=MODULE,
      display_name="Image Only Checkpoint Loader (img2vid model)",
      inputs=[Combo("ckpt_name", _files("checkpoints"))],
      outputs=[Output("MODEL"), Output("CLIP_VISION"), Output("VAE")])
def image_only_checkpoint_loader(ckpt_name: str) -> tuple[Any, Any, Any]:
    """MODEL, the checkpoint's CLIP vision encoder (None when its family keeps none) and VAE."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.clip_vision.load import clip_vision_from_checkpoint, detect_clip_vision
    from comfy_core.loading import load_checkpoint
    from nodes.clip_vision import _text_dtype

    path = model_file("checkpoints", ckpt_name, "ckpt_name")
    options = _options()
    model, _, vae = load_checkpoint(path, options, output_clip=False)
    _default_attention(model, vae)
    prefix = getattr(model.model.family, "clip_vision_prefix", None)
    clip_vision = None
    if prefix is not None:
        with CheckpointFile(path) as checkpoint:
            config = detect_clip_vision(checkpoint, (prefix,))
            if config is not None:
                clip_vision = clip_vision_from_checkpoint(checkpoint, config, _text_dtype(), mmap=options.mmap)
    _track(model, vae, clip_vision)
    return model, clip_vision, vae


def _clip_vision(value: Any) -> Any:
    if not callable(getattr(value, "encode_image", None)):
        raise NodeInputError("clip_vision", "a CLIP_VISION model (from ImageOnlyCheckpointLoader or "
                                            "CLIPVisionLoader)", describe(value))
    return value


def _int(value: Any, input_name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise NodeInputError(input_name, f"an INT in {low}..{high}", repr(value))
    return int(value)


def _float(value: Any, input_name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or not low <= value <= high:
        raise NodeInputError(input_name, f"a FLOAT in {low}..{high}", repr(value))
    return float(value)


@node("SVD_img2vid_Conditioning", category="conditioning/video_models", python_module=MODULE,
      inputs=[Input("clip_vision", "CLIP_VISION"), Input("init_image", "IMAGE"), Input("vae", "VAE"),
              Int("width", default=1024, min=16, max=MAX_RESOLUTION, step=8),
              Int("height", default=576, min=16, max=MAX_RESOLUTION, step=8),
              Int("video_frames", default=14, min=1, max=4096),
              Int("motion_bucket_id", default=127, min=1, max=1023),
              Int("fps", default=6, min=1, max=1024),
              Float("augmentation_level", default=0.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")])
def svd_img2vid_conditioning(clip_vision: Any, init_image: Any, vae: Any, width: int, height: int, video_frames: int,
                             motion_bucket_id: int, fps: int, augmentation_level: float) -> tuple[list, list, dict]:
    import torch

    from comfy_core.image.resize import upscale_samples

    clip_vision = _clip_vision(clip_vision)
    image = checks.image_batch(init_image, "init_image")
    vae = checks.vae(vae)
    width = _int(width, "width", 16, MAX_RESOLUTION)
    height = _int(height, "height", 16, MAX_RESOLUTION)
    video_frames = _int(video_frames, "video_frames", 1, 4096)
    motion_bucket_id = _int(motion_bucket_id, "motion_bucket_id", 1, 1023)
    fps = _int(fps, "fps", 1, 1024)
    augmentation_level = _float(augmentation_level, "augmentation_level", 0.0, 10.0)

    pooled = clip_vision.encode_image(image).image_embeds.unsqueeze(0)  # [1, images, P]
    pixels = upscale_samples(image.movedim(-1, 1), width, height, "bilinear", "center").movedim(1, -1)
    pixels = pixels[:, :, :, :3]
    if augmentation_level > 0:
        pixels = pixels + torch.randn_like(pixels) * augmentation_level
    latent = vae.encode(pixels)  # [images, 4, height/8, width/8]
    options = {"motion_bucket_id": motion_bucket_id, "fps": fps, "augmentation_level": augmentation_level}
    positive = [[pooled, {**options, "concat_latent_image": latent}]]
    negative = [[torch.zeros_like(pooled), {**options, "concat_latent_image": torch.zeros_like(latent)}]]
    return positive, negative, {"samples": torch.zeros([video_frames, 4, height // 8, width // 8])}


def _guided(model: Any, min_cfg: Any, kind: str) -> tuple[Any]:
    from comfy_core.sampling.video_cfg import VideoLinearCFG, VideoTriangleCFG

    min_cfg = _float(min_cfg, "min_cfg", 0.0, 100.0)
    patched = checks.model(model).clone()
    patched.set_option("sampler_cfg_function", (VideoLinearCFG if kind == "linear" else VideoTriangleCFG)(min_cfg))
    return (patched,)


@node("VideoLinearCFGGuidance", category="sampling/video_models", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("min_cfg", default=1.0, min=0.0, max=100.0, step=0.5, round=0.01)],
      outputs=[Output("MODEL")])
def video_linear_cfg_guidance(model: Any, min_cfg: float) -> tuple[Any]:
    """CFG rising linearly over the frames from min_cfg to the sampler's cfg."""
    return _guided(model, min_cfg, "linear")


@node("VideoTriangleCFGGuidance", category="sampling/video_models", python_module=MODULE,
      inputs=[Input("model", "MODEL"), Float("min_cfg", default=1.0, min=0.0, max=100.0, step=0.5, round=0.01)],
      outputs=[Output("MODEL")])
def video_triangle_cfg_guidance(model: Any, min_cfg: float) -> tuple[Any]:
    """CFG from min_cfg on the first and last frames to the sampler's cfg in the middle."""
    return _guided(model, min_cfg, "triangle")


@node("ImageOnlyCheckpointSave", category="advanced/model_merging", python_module=MODULE, output_node=True,
      inputs=[Input("model", "MODEL"), Input("clip_vision", "CLIP_VISION"), Input("vae", "VAE"),
              String("filename_prefix", default="checkpoints/ComfyUI"),
              Hidden("prompt", "PROMPT"), Hidden("extra_pnginfo", "EXTRA_PNGINFO")],
      outputs=[])
def image_only_checkpoint_save(model: Any, clip_vision: Any, vae: Any, filename_prefix: str = "checkpoints/ComfyUI",
                               prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """`<output>/<prefix>_<counter:05>_.safetensors`: the patched UNet, the image encoder and the
    VAE under their checkpoint prefixes, with ComfyUI's metadata."""
    from comfy_core.checkpoint.svd_save import save_image_only_checkpoint
    from comfy_core.image.file_names import save_location

    model = checks.model(model)
    clip_vision = _clip_vision(clip_vision)
    vae = checks.vae(vae)
    env = current_env()
    with image_input_errors():
        folder, filename, counter, _ = save_location(env.output_dir, filename_prefix, 0, 0)
    save_image_only_checkpoint(folder / f"{filename}_{counter:05}_.safetensors", model, clip_vision, vae,
                               title=f"{filename} {counter}", prompt=prompt, extra_pnginfo=extra_pnginfo,
                               with_workflow=not getattr(env, "disable_metadata", False))
    return {}
