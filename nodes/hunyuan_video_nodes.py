"""HunyuanVideo 1.0's image-to-video nodes with today's ComfyUI's names, V3 schemas and semantics
(`comfy_extras/nodes_hunyuan.py` HunyuanImageToVideo, TextEncodeHunyuanVideo_ImageToVideo), written
here; the model side is comfy_core/families/hunyuan_video (EmptyHunyuanLatentVideo: nodes/video_latents.py).

TextEncodeHunyuanVideo_ImageToVideo: the prompt in HunyuanVideo-I2V's template (an `<image>` opening
the system turn, then the user turn and an opened assistant turn), the `<image>` token replaced by the
LLaVA projector's output of the CLIP vision output (`mm_projected`, from CLIPVisionEncode over
`llava_llama3_vision`), every `image_interleave`-th image state kept ahead of the user turn's states
(comfy_core/families/hunyuan_video/clip.py); encoded with the CLIP's schedule.

HunyuanImageToVideo: zeros `[batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8]`; with
`start_image` (its first `length` frames, RGB, resized to the size: centre crop, bilinear) encoded by
the VAE and a mask `[1, 1, T, h, w]` of ones, zero over the latent frames the image covers:

- "v1 (concat)" (the 33-channel I2V release): `concat_latent_image` + `concat_mask` on positive;
- "v2 (replace)" (the 16-channel release): `guiding_frame_index` 0 on positive, the image latent
  written into the first latent frames and the mask as the latent's `noise_mask`;
- "custom": the image latent as `ref_latent` on positive.

Frame counts must be `4k + 1` and sizes within ComfyUI's widget ranges (nodes/wan_conditioning.py).
"""
from __future__ import annotations

from typing import Any

from graph.v3_schema import Combo, Int, Output, Socket, String, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe
from nodes.hunyuan_video15_nodes import CONDITIONING_CATEGORY, MODULE, _size_inputs

CHANNELS = 16
DOWNSCALE = 8
GUIDANCE_TYPES = ("v1 (concat)", "v2 (replace)", "custom")
# ComfyUI's PROMPT_TEMPLATE_ENCODE_VIDEO_I2V (HunyuanVideo-I2V's template, ComfyUI's spacing).
I2V_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\n<image>\nDescribe the video by detailing the following aspects "
    "according to the reference image: "
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>\n\n"
    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n")
INTERLEAVE_TIP = ("How much the image influences things vs the text prompt. Higher number means more influence from "
                  "the text prompt.")


@v3_node("TextEncodeHunyuanVideo_ImageToVideo", category=CONDITIONING_CATEGORY, python_module=MODULE,
         inputs=[Socket("clip", "CLIP"), Socket("clip_vision_output", "CLIP_VISION_OUTPUT"),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Int("image_interleave", default=2, min=1, max=512, tooltip=INTERLEAVE_TIP, advanced=True)],
         outputs=[Output("CONDITIONING")])
def text_encode_hunyuan_video_image_to_video(clip: Any, clip_vision_output: Any, prompt: str,
                                             image_interleave: int) -> tuple[list]:
    clip = checks.clip(clip)
    prompt = checks.text(prompt, "prompt")
    image_interleave = checks.integer(image_interleave, "image_interleave", 1, 512)
    projected = getattr(clip_vision_output, "mm_projected", None)
    if projected is None:
        raise NodeInputError("clip_vision_output", "a CLIP_VISION_OUTPUT with mm_projected (CLIPVisionEncode over "
                             "a LLaVA vision tower, llava_llama3_vision)", describe(clip_vision_output))
    tokens = clip.tokenize(prompt, llama_template=I2V_TEMPLATE, image_embeds=projected,
                           image_interleave=image_interleave)
    return (clip.encode_from_tokens_scheduled(tokens),)


@v3_node("HunyuanImageToVideo", category=CONDITIONING_CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("vae", "VAE"), *_size_inputs(53),
                 Combo("guidance_type", GUIDANCE_TYPES, advanced=True),
                 Socket("start_image", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("LATENT", "latent")])
def hunyuan_image_to_video(positive: list, vae: Any, width: int, height: int, length: int, batch_size: int,
                           guidance_type: str, start_image: Any = None) -> tuple:
    import torch

    from comfy_core.latent.video import empty_video_latent, fit_frames, latent_frames

    positive = checks.conditioning(positive, "positive")
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    guidance_type = checks.choice(guidance_type, GUIDANCE_TYPES, "guidance_type")
    start_image = wan.images(start_image, "start_image")
    latent = empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)
    out: dict[str, Any] = {}
    if start_image is not None:
        start = fit_frames(start_image[:length, :, :, :3], width, height)
        encoded = wan.encode_video(vae, start, CHANNELS)  # [1, 16, T', h, w]
        mask = torch.ones((1, 1, latent.shape[2], encoded.shape[-2], encoded.shape[-1]), dtype=start.dtype)
        mask[:, :, :latent_frames(start.shape[0])] = 0.0
        if guidance_type == "v1 (concat)":
            values: dict[str, Any] = {"concat_latent_image": encoded, "concat_mask": mask}
        elif guidance_type == "v2 (replace)":
            values = {"guiding_frame_index": 0}
            frames = min(encoded.shape[2], latent.shape[2])
            latent[:, :, :frames] = encoded[:, :, :frames].to(latent)
            out["noise_mask"] = mask
        else:
            values = {"ref_latent": encoded}
        positive = wan.set_values(positive, values)
    out["samples"] = latent
    return positive, out
