"""SAM's prompt encoder and mask decoder (Kirillov et al. 2023, "Segment Anything"; Ravi et al.
2024, "SAM 2"), as SAM 3 / 3.1's tracker carries them for interactive segmentation: points, boxes
and mask logits in, mask logits at 4x the feature resolution out, refined with the neck's two
finer levels.

Behaviour and parameter names as ComfyUI's `comfy/ldm/sam3/sam.py` (`SAMAttention`,
`TwoWayAttentionBlock`, `TwoWayTransformer`, `PositionEmbeddingRandom`) and
`comfy/ldm/sam3/tracker.py` (`SAMMaskDecoder`, `SAMPromptEncoder`, `forward_sam_heads`), read
there and written here. 8 heads, attention downsampling 2, 3 multimask outputs + 1, as ComfyUI's;
its LayerNorm2d keeps nn.LayerNorm's eps (1e-5).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.backbone import attention
from comfy_core.models.sam3.detector import MLP

HEADS = 8
NO_OBJ_SCORE = -1024.0


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of `[B, C, H, W]`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class SAMAttention(nn.Module):
    def __init__(self, dim: int, downsample: int = 1) -> None:
        super().__init__()
        inner = dim // downsample
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.out_proj = nn.Linear(inner, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.out_proj(attention(self.q_proj(q), self.k_proj(k), self.v_proj(v), HEADS))


class TwoWayBlock(nn.Module):
    def __init__(self, dim: int, ffn: int, skip_first_pe: bool) -> None:
        super().__init__()
        self.skip_first_pe = skip_first_pe
        self.self_attn = SAMAttention(dim)
        self.cross_attn_token_to_image = SAMAttention(dim, 2)
        self.cross_attn_image_to_token = SAMAttention(dim, 2)
        self.mlp = nn.Sequential(nn.Linear(dim, ffn), nn.ReLU(), nn.Linear(ffn, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.norm3, self.norm4 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, query_pe: torch.Tensor,
                key_pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.skip_first_pe:
            queries = self.norm1(self.self_attn(queries, queries, queries))
        else:
            q = queries + query_pe
            queries = self.norm1(queries + self.self_attn(q, q, queries))
        queries = self.norm2(queries + self.cross_attn_token_to_image(queries + query_pe, keys + key_pe, keys))
        queries = self.norm3(queries + self.mlp(queries))
        keys = self.norm4(keys + self.cross_attn_image_to_token(keys + key_pe, queries + query_pe, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    def __init__(self, dim: int, ffn: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TwoWayBlock(dim, ffn, i == 0) for i in range(depth))
        self.final_attn_token_to_image = SAMAttention(dim, 2)
        self.norm_final = nn.LayerNorm(dim)

    def forward(self, image: torch.Tensor, image_pe: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        queries, keys = tokens, image
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, image_pe)
        queries = self.norm_final(queries + self.final_attn_token_to_image(queries + tokens, keys + image_pe, keys))
        return queries, keys


class PositionEmbeddingRandom(nn.Module):
    """Random Fourier features of coordinates in 0..1: [sin, cos](2 pi (2x - 1) G), G stored."""

    def __init__(self, feats: int) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", torch.randn(2, feats))

    def encode(self, coords: torch.Tensor) -> torch.Tensor:
        proj = 2 * math.pi * (2 * coords.float() - 1) @ self.positional_encoding_gaussian_matrix.float()
        return torch.cat([proj.sin(), proj.cos()], dim=-1).to(coords.dtype)

    def dense(self, h: int, w: int, device: torch.device) -> torch.Tensor:
        """`[1, C, h, w]` at the pixel centres."""
        ys = (torch.arange(h, dtype=torch.float32, device=device) + 0.5) / h
        xs = (torch.arange(w, dtype=torch.float32, device=device) + 0.5) / w
        grid = torch.stack([xs.view(1, w).expand(h, w), ys.view(h, 1).expand(h, w)], dim=-1)
        return self.encode(grid).permute(2, 0, 1).unsqueeze(0)

    def pixels(self, coords: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """Pixel coordinates `[B, N, 2]` (x, y) in an image of `size` (h, w)."""
        scale = torch.tensor([size[1], size[0]], dtype=coords.dtype, device=coords.device)
        return self.encode(coords / scale)


class SAMPromptEncoder(nn.Module):
    def __init__(self, dim: int, embedding_size: tuple[int, int], image_size: int) -> None:
        super().__init__()
        self.dim = dim
        self.embedding_size = embedding_size
        self.image_size = (image_size, image_size)
        self.pe_layer = PositionEmbeddingRandom(dim // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, dim) for _ in range(4))
        self.not_a_point_embed = nn.Embedding(1, dim)
        self.mask_downscaling = nn.Sequential(
            nn.Conv2d(1, 4, 2, stride=2), LayerNorm2d(4), nn.GELU(),
            nn.Conv2d(4, 16, 2, stride=2), LayerNorm2d(16), nn.GELU(), nn.Conv2d(16, dim, 1))
        self.no_mask_embed = nn.Embedding(1, dim)

    def dense_pe(self, device: torch.device) -> torch.Tensor:
        return self.pe_layer.dense(*self.embedding_size, device)

    def forward(self, points: tuple[torch.Tensor, torch.Tensor] | None, boxes: torch.Tensor | None,
                masks: torch.Tensor | None, batch: int, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse tokens `[B, N, C]` (labels: 1 positive, 0 negative, 2 / 3 box corners, -1 padding)
        and the dense embedding `[B, C, h, w]`."""
        sparse = [torch.empty(batch, 0, self.dim, device=device, dtype=dtype)]
        if points is not None:
            coords, labels = points
            if boxes is None:  # a padding point closes the prompt when no box follows
                coords = torch.cat([coords, coords.new_zeros(coords.shape[0], 1, 2)], 1)
                labels = torch.cat([labels, -labels.new_ones(labels.shape[0], 1)], 1)
            pe = self.pe_layer.pixels(coords.to(dtype) + 0.5, self.image_size)
            for i in range(4):
                pe = pe + (labels == i).unsqueeze(-1).to(dtype) * self.point_embeddings[i].weight.to(dtype)
            pad = (labels == -1).unsqueeze(-1)
            pe = torch.where(pad, self.not_a_point_embed.weight.to(dtype).expand_as(pe), pe)
            sparse.append(pe)
        if boxes is not None:
            corners = self.pe_layer.pixels(boxes.to(dtype).reshape(-1, 2, 2) + 0.5, self.image_size)
            corners = corners + torch.stack([self.point_embeddings[2].weight[0], self.point_embeddings[3].weight[0]]).to(dtype)
            sparse.append(corners)
        if masks is not None:
            dense = self.mask_downscaling(masks.to(dtype))
        else:
            dense = self.no_mask_embed.weight.to(dtype).reshape(1, -1, 1, 1).expand(batch, -1, *self.embedding_size)
        b = max(s.shape[0] for s in sparse)
        return torch.cat([s.expand(b, -1, -1) for s in sparse], 1), dense


class SAMMaskDecoder(nn.Module):
    """Tokens [object score, IoU, 4 masks] + prompt tokens against the image; masks from hypernetwork
    MLPs over the upscaled image (with the neck's 2x and 4x levels added)."""

    def __init__(self, dim: int, ffn: int, depth: int, outputs: int = 3) -> None:
        super().__init__()
        self.num_mask_tokens = outputs + 1
        self.transformer = TwoWayTransformer(dim, ffn, depth)
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        self.obj_score_token = nn.Embedding(1, dim)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 4, 2, stride=2), LayerNorm2d(dim // 4), nn.GELU(),
            nn.ConvTranspose2d(dim // 4, dim // 8, 2, stride=2), nn.GELU())
        self.conv_s0 = nn.Conv2d(dim, dim // 8, 1)
        self.conv_s1 = nn.Conv2d(dim, dim // 4, 1)
        self.output_hypernetworks_mlps = nn.ModuleList(MLP([dim, dim, dim, dim // 8]) for _ in range(self.num_mask_tokens))
        self.iou_prediction_head = MLP([dim, dim, dim, self.num_mask_tokens])
        self.pred_obj_score_head = MLP([dim, dim, dim, 1])

    def forward(self, image: torch.Tensor, image_pe: torch.Tensor, sparse: torch.Tensor, dense: torch.Tensor,
                high_res: list[torch.Tensor], multimask: bool) -> tuple[torch.Tensor, ...]:
        """-> (mask logits `[B, M, 4h, 4w]`, IoU `[B, M]`, mask tokens `[B, M, C]`, object logit `[B, 1]`)."""
        b = sparse.shape[0]
        dt = sparse.dtype
        tokens = torch.cat([self.obj_score_token.weight, self.iou_token.weight, self.mask_tokens.weight]).to(dt)
        tokens = torch.cat([tokens.unsqueeze(0).expand(b, -1, -1), sparse], 1)
        src = image.expand(b, -1, -1, -1) + dense
        _, c, h, w = src.shape
        hs, src_out = self.transformer(src.flatten(2).permute(0, 2, 1),
                                       image_pe.expand(b, -1, -1, -1).flatten(2).permute(0, 2, 1), tokens)
        mask_out = hs[:, 2:2 + self.num_mask_tokens]
        src_out = src_out.permute(0, 2, 1).reshape(b, c, h, w)
        dc1, ln1, act1, dc2, act2 = self.output_upscaling
        up = act1(ln1(dc1(src_out) + self.conv_s1(high_res[1])))
        up = act2(dc2(up) + self.conv_s0(high_res[0]))
        hyper = torch.stack([mlp(mask_out[:, i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], 1)
        masks = (hyper @ up.flatten(2)).view(b, self.num_mask_tokens, up.shape[2], up.shape[3])
        iou = self.iou_prediction_head(hs[:, 1])
        obj = self.pred_obj_score_head(hs[:, 0])
        pick = slice(1, None) if multimask else slice(0, 1)
        return masks[:, pick], iou[:, pick], mask_out[:, pick], obj


def segment(prompt_encoder: SAMPromptEncoder, mask_decoder: SAMMaskDecoder, image_size: int, image: torch.Tensor,
            high_res: list[torch.Tensor], points: tuple[torch.Tensor, torch.Tensor] | None = None,
            boxes: torch.Tensor | None = None, masks: torch.Tensor | None = None,
            multimask: bool = False) -> torch.Tensor:
    """image `[1, C, h, w]` -> mask logits `[B, 1, S, S]` (S the input size); with `multimask`
    the best of the three by predicted IoU; objects scored absent get -1024 everywhere
    (ComfyUI's `forward_sam_heads`)."""
    dt, device = image.dtype, image.device
    b = next((t.shape[0] for t in (masks, boxes, points[0] if points else None) if t is not None), image.shape[0])
    if points is None:
        points = (torch.zeros(b, 1, 2, device=device, dtype=dt), -torch.ones(b, 1, dtype=torch.int32, device=device))
    prompt_size = (prompt_encoder.embedding_size[0] * 4, prompt_encoder.embedding_size[1] * 4)
    if masks is not None and tuple(masks.shape[-2:]) != prompt_size:
        masks = F.interpolate(masks.to(dt), size=prompt_size, mode="bilinear", align_corners=False, antialias=True)
    sparse, dense = prompt_encoder(points, boxes, masks, b, dt, device)
    low, iou, _, obj = mask_decoder(image, prompt_encoder.dense_pe(device).to(dt), sparse, dense, high_res, multimask)
    low = torch.where((obj > 0)[:, :, None, None], low, torch.tensor(NO_OBJ_SCORE, dtype=low.dtype, device=device))
    high = F.interpolate(low, size=(image_size, image_size), mode="bilinear", align_corners=False)
    if multimask:
        best = iou.argmax(-1)
        high = high[torch.arange(high.shape[0], device=device), best].unsqueeze(1)
    return high
