"""The SAM 3 / 3.1 network as ComfyUI's `comfy.ldm.sam3.detector.SAM3Model` exposes it to its nodes:
`forward(images, text_embeddings=, text_mask=, boxes=, orig_size=)` (concept detection) and
`forward_segment(images, point_inputs=, box_inputs=, mask_inputs=)` (SAM's interactive
segmentation, used for points, boxes and refinement), with the checkpoint's names
(`detector.*`, `tracker.*`).

Built here: the detector (detector.py over backbone.py), the tracker's interactive SAM heads
(sam_heads.py) and, when the file carries them, SAM 3.1's video tracker (memory.py, multiplex.py,
tracker.py: `forward_video`). SAM 3's own (non-multiplex) video tracker is not built: its tensors
are left unread by the loader (load.py).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.config import Sam3Config
from comfy_core.models.sam3.detector import Sam3Detector
from comfy_core.models.sam3.sam_heads import SAMMaskDecoder, SAMPromptEncoder, segment


class Sam3Tracker(nn.Module):
    """The tracker's parameters the image path uses. SAM 3.1 names them `interactive_*` /
    `interactivity_no_mem_embed`, SAM 3 `sam_*` / `no_mem_embed` (ComfyUI's `SAM31Tracker` /
    `SAM3Tracker`)."""

    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        d = config.d_model
        grid = config.image_size // config.patch
        encoder = SAMPromptEncoder(d, (grid, grid), config.image_size)
        decoder = SAMMaskDecoder(d, config.sam_ffn, config.sam_depth)
        no_mem = nn.Parameter(torch.zeros(1, 1, d))
        self.interactive = config.multiplex
        if config.multiplex:
            self.interactive_sam_prompt_encoder, self.interactive_sam_mask_decoder = encoder, decoder
            self.interactivity_no_mem_embed = no_mem
        else:
            self.sam_prompt_encoder, self.sam_mask_decoder = encoder, decoder
            self.no_mem_embed = no_mem
        if config.video and config.multiplex:
            from comfy_core.models.sam3.tracker import add_multiplex_video

            add_multiplex_video(self, config)

    def heads(self) -> tuple[SAMPromptEncoder, SAMMaskDecoder, nn.Parameter]:
        if self.interactive:
            return self.interactive_sam_prompt_encoder, self.interactive_sam_mask_decoder, self.interactivity_no_mem_embed
        return self.sam_prompt_encoder, self.sam_mask_decoder, self.no_mem_embed


class Sam3Model(nn.Module):
    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        self.config = config
        self.detector = Sam3Detector(config)
        self.tracker = Sam3Tracker(config)

    @property
    def image_size(self) -> int:
        return self.config.image_size

    def _backbone(self) -> Any:
        return self.detector.backbone["vision_backbone"]

    def forward(self, images: torch.Tensor, text_embeddings: torch.Tensor | None = None,
                text_mask: torch.Tensor | None = None, points: tuple[torch.Tensor, torch.Tensor] | None = None,
                boxes: torch.Tensor | None = None, threshold: float = 0.3,
                orig_size: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
        """images `[B, 3, S, S]` in 0..1; text_embeddings `[B, T, W]` (the text encoder's states),
        text_mask `[B, T]`; boxes `[B, N, 4]` normalised cxcywh. -> boxes xyxy (pixels of
        `orig_size` when given, else 0..1) `[B, Q, 4]`, scores (logits) `[B, Q]`, masks (logits,
        resized to `orig_size` when given) `[B, Q, h, w]`, presence `[B, 1]`."""
        bb = self._backbone()
        features, positions = bb.levels(bb.trunk(images), bb.convs)
        if text_embeddings is not None:
            text_embeddings = self.detector.backbone["language_backbone"]["resizer"](text_embeddings.to(images.dtype))
            text_mask = text_mask.bool() if text_mask is not None else None
        boxes_xyxy, scores, masks, out = self.detector.detect(features, positions, text_embeddings, text_mask,
                                                              points, boxes)
        if orig_size is not None:
            oh, ow = orig_size
            boxes_xyxy = boxes_xyxy * torch.tensor([ow, oh, ow, oh], device=boxes_xyxy.device, dtype=boxes_xyxy.dtype)
            masks = F.interpolate(masks, size=orig_size, mode="bilinear", align_corners=False)
        return {"boxes": boxes_xyxy, "scores": scores, "masks": masks, "presence": out["presence"]}

    def forward_segment(self, images: torch.Tensor, point_inputs: dict[str, torch.Tensor] | None = None,
                        box_inputs: torch.Tensor | None = None,
                        mask_inputs: torch.Tensor | None = None) -> torch.Tensor:
        """SAM's interactive segmentation of `images [B, 3, S, S]`: points `{"point_coords" [B, N, 2],
        "point_labels" [B, N]}` and boxes `[B, 2, 2]` (corners) in S x S pixels, mask logits
        `[B, 1, h, w]` -> mask logits `[B, 1, S, S]`. One point picks the best of three masks."""
        bb = self._backbone()
        features, _ = bb.levels(bb.trunk(images), bb.tracker_neck(interactive=True))
        if not bb.multiplex:
            features = features[:-self.detector.scalp]
        feat = features[-1]
        prompt_encoder, mask_decoder, no_mem = self.tracker.heads()
        feat = feat + no_mem.to(feat.dtype).view(1, -1, 1, 1)  # the first-frame ("no memory") path
        points = None
        if point_inputs is not None:
            points = (point_inputs["point_coords"], point_inputs["point_labels"])
        n_points = 0 if points is None else points[1].shape[1]
        return segment(prompt_encoder, mask_decoder, self.image_size, feat, list(features[:-1]), points, box_inputs,
                       mask_inputs, multimask=0 < n_points <= 1)


    @property
    def can_track(self) -> bool:
        """Whether the file carried SAM 3.1's video tracker (`forward_video`)."""
        return bool(self.config.video and self.config.multiplex)

    def forward_video(self, images: torch.Tensor, initial_masks: torch.Tensor | None, pack: Any,
                      text_prompts: list | None = None, new_det_thresh: float = 0.5, max_objects: int = 0,
                      detect_interval: int = 1, progress: Any = None) -> dict[str, Any]:
        """Video tracking (tracker.py `track_video`): images `[T, 3, S, S]` in 0..1, initial masks
        `[N, 1, h, w]` for frame 0, text prompts (states, mask) detected every `detect_interval`
        frames -> SAM3_TRACK_DATA without `orig_size`."""
        from comfy_core.models.sam3.tracker import track_video

        return track_video(self, images, initial_masks, text_prompts, pack, new_det_thresh, max_objects,
                           detect_interval, progress)


class Sam3Wrapper(nn.Module):
    """What a MODEL patcher holds: `diffusion_model` is the network, as ComfyUI's
    `model.model.diffusion_model`, so code written for ComfyUI finds it."""

    def __init__(self, network: Sam3Model, dtype: torch.dtype) -> None:
        super().__init__()
        self.diffusion_model = network
        self.manual_cast_dtype = None
        self._dtype = dtype

    def get_dtype(self) -> torch.dtype:
        return self._dtype
