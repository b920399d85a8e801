"""SAM 3's DETR-style concept detector: the text / geometry prompt, a transformer encoder over the
image tokens, a decoder of learned queries with box refinement, a presence token and a box
relative-position bias, dot-product scoring against the prompt, and the mask head.

Behaviour and parameter names as ComfyUI's `comfy/ldm/sam3/detector.py` (`SplitMHA`,
`EncoderLayer`, `DecoderLayer`, `TransformerDecoder`, `GeometryEncoder`, `PixelDecoder`,
`SegmentationHead`, `DotProductScoring`, `SAM3Detector`), read there and written here. Head
count 8 as ComfyUI's.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.backbone import PositionEmbeddingSine, VisionBackbone, attention
from comfy_core.models.sam3.config import Sam3Config

HEADS = 8


def cxcywh_to_xyxy(x: torch.Tensor) -> torch.Tensor:
    cx, cy, w, h = x.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def sine_embed(pos: torch.Tensor, num_feats: int) -> torch.Tensor:
    """`[..., K]` coordinates in 0..1 -> `[..., K * num_feats / 2]`, each coordinate's
    interleaved sin / cos of 2 pi x / 10000^(2 floor(i / 2) / (num_feats / 2))."""
    half = num_feats // 2
    i = torch.arange(half, dtype=torch.float32, device=pos.device)
    freqs = 10000.0 ** (2 * torch.div(i, 2, rounding_mode="floor") / half)
    out = []
    for c in range(pos.shape[-1]):
        raw = (pos[..., c].float() * 2 * math.pi).unsqueeze(-1) / freqs
        out.append(torch.stack([raw[..., 0::2].sin(), raw[..., 1::2].cos()], dim=-1).flatten(-2))
    return torch.cat(out, dim=-1).to(pos.dtype)


class MLP(nn.Module):
    """Linear layers with ReLU between them (`layers.N`)."""

    def __init__(self, dims: list[int], sigmoid: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x.sigmoid() if self.sigmoid else x


class MLPWithNorm(nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out_norm = nn.LayerNorm(dims[-1])
        self.residual = dims[0] == dims[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for i, layer in enumerate(self.layers):
            y = layer(y)
            if i < len(self.layers) - 1:
                y = F.relu(y)
        return self.out_norm(y + x if self.residual else y)


class SplitMHA(nn.Module):
    def __init__(self, dim: int, heads: int = HEADS) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.out_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.out_proj(attention(self.q_proj(q), self.k_proj(k), self.v_proj(v), self.heads, mask))


class EncoderLayer(nn.Module):
    """Pre-norm: self-attention (positions on q, k), cross-attention to the prompt, ReLU MLP."""

    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.self_attn, self.cross_attn_image = SplitMHA(dim), SplitMHA(dim)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, prompt: torch.Tensor | None = None,
                prompt_mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.self_attn(y + pos, y + pos, y)
        if prompt is not None:
            x = x + self.cross_attn_image(self.norm2(x), prompt, prompt, prompt_mask)
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))

    def geometry_step(self, x: torch.Tensor, memory: torch.Tensor, memory_pos: torch.Tensor) -> torch.Tensor:
        """The geometry class token's pass: self-attention without positions, cross-attention
        to the image tokens (positions on the keys)."""
        y = self.norm1(x)
        x = x + self.self_attn(y, y, y)
        x = x + self.cross_attn_image(self.norm2(x), memory + memory_pos, memory)
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, dim: int, ffn: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, ffn) for _ in range(depth))

    def forward(self, x: torch.Tensor, pos: torch.Tensor, prompt: torch.Tensor | None,
                prompt_mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, pos, prompt, prompt_mask)
        return x


class DecoderLayer(nn.Module):
    """Post-norm: self-attention, cross-attention to the prompt, to the image (box bias), MLP."""

    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.self_attn, self.cross_attn, self.ca_text = SplitMHA(dim), SplitMHA(dim), SplitMHA(dim)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.catext_norm = nn.LayerNorm(dim)
        self.linear1, self.linear2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, x_pos: torch.Tensor, memory_pos: torch.Tensor,
                prompt: torch.Tensor | None, prompt_mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
        x = self.norm2(x + self.self_attn(x + x_pos, x + x_pos, x))
        if prompt is not None:
            x = self.catext_norm(x + self.ca_text(x + x_pos, prompt, prompt, prompt_mask))
        x = self.norm1(x + self.cross_attn(x + x_pos, memory + memory_pos, memory, bias))
        return self.norm3(x + self.linear2(F.relu(self.linear1(x))))


class TransformerDecoder(nn.Module):
    def __init__(self, dim: int, ffn: int, depth: int, queries: int) -> None:
        super().__init__()
        self.dim = dim
        self.layers = nn.ModuleList(DecoderLayer(dim, ffn) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.query_embed = nn.Embedding(queries, dim)
        self.reference_points = nn.Embedding(queries, 4)
        self.ref_point_head = MLP([dim * 2, dim, dim])
        self.bbox_embed = MLP([dim, dim, dim, 4])
        self.boxRPB_embed_x = MLP([2, dim, HEADS])  # noqa: N815 -- ComfyUI's parameter name
        self.boxRPB_embed_y = MLP([2, dim, HEADS])  # noqa: N815
        self.presence_token = nn.Embedding(1, dim)
        self.presence_token_head = MLP([dim, dim, dim, 1])
        self.presence_token_out_norm = nn.LayerNorm(dim)

    @staticmethod
    def inverse_sigmoid(x: torch.Tensor) -> torch.Tensor:
        return torch.log(x / (1 - x + 1e-6) + 1e-6)

    def box_bias(self, ref: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Box relative-position bias `[B, heads, 1 + Q, h * w]` (zero row for the presence token):
        per axis an MLP of the log-scaled distances of each pixel to the box's two edges."""
        boxes = cxcywh_to_xyxy(ref)
        b, q, _ = boxes.shape
        ys = torch.arange(h, device=ref.device, dtype=torch.float32) / h
        xs = torch.arange(w, device=ref.device, dtype=torch.float32) / w
        dx = xs.view(1, 1, -1, 1) - boxes[:, :, None, 0::2]  # [B, Q, w, 2]
        dy = ys.view(1, 1, -1, 1) - boxes[:, :, None, 1::2]

        def log_scale(d: torch.Tensor) -> torch.Tensor:
            return torch.sign(d * 8) * torch.log2(torch.abs(d * 8) + 1.0) / 3.0  # log2(8) = 3

        bx = self.boxRPB_embed_x(log_scale(dx).to(ref.dtype))  # [B, Q, w, heads]
        by = self.boxRPB_embed_y(log_scale(dy).to(ref.dtype))  # [B, Q, h, heads]
        bias = (by.unsqueeze(3) + bx.unsqueeze(2)).flatten(2, 3).permute(0, 3, 1, 2)  # [B, heads, Q, h*w]
        return torch.cat([bias.new_zeros(b, bias.shape[1], 1, bias.shape[3]), bias], dim=2)

    def forward(self, memory: torch.Tensor, memory_pos: torch.Tensor, prompt: torch.Tensor | None,
                prompt_mask: torch.Tensor | None, h: int, w: int) -> dict[str, torch.Tensor]:
        b = memory.shape[0]
        tgt = self.query_embed.weight.to(memory.dtype).unsqueeze(0).expand(b, -1, -1)
        presence = self.presence_token.weight.to(memory.dtype)[None].expand(b, -1, -1)
        ref = self.reference_points.weight.to(memory.dtype).unsqueeze(0).expand(b, -1, -1).sigmoid()
        for i, layer in enumerate(self.layers):
            query_pos = self.ref_point_head(sine_embed(ref, self.dim))
            x = layer(torch.cat([presence, tgt], 1), memory, torch.cat([torch.zeros_like(presence), query_pos], 1),
                      memory_pos, prompt, prompt_mask, self.box_bias(ref, h, w))
            presence, tgt = x[:, :1], x[:, 1:]
            if i < len(self.layers) - 1:
                ref = (self.inverse_sigmoid(ref) + self.bbox_embed(self.norm(tgt))).sigmoid().detach()
        out = self.norm(tgt)
        boxes = (self.inverse_sigmoid(ref) + self.bbox_embed(out)).sigmoid()
        presence_logit = self.presence_token_head(self.presence_token_out_norm(presence)).squeeze(-1)
        return {"decoder_output": out, "pred_boxes": boxes, "presence": presence_logit}


class Transformer(nn.Module):
    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        self.encoder = TransformerEncoder(config.d_model, config.ffn, config.enc_layers)
        self.decoder = TransformerDecoder(config.d_model, config.ffn, config.dec_layers, config.queries)


class GeometryEncoder(nn.Module):
    """Point and box prompts as tokens: direct projection + pooled image feature + sine position
    + label embedding, then encoder layers against the image; and the geometry class token."""

    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        d, r = config.d_model, config.roi_size
        self.roi_size = r
        self.pos_enc = PositionEmbeddingSine(d)
        self.points_direct_project = nn.Linear(2, d)
        self.points_pool_project = nn.Linear(d, d)
        self.points_pos_enc_project = nn.Linear(d, d)
        self.boxes_direct_project = nn.Linear(4, d)
        self.boxes_pool_project = nn.Conv2d(d, d, kernel_size=r)
        self.boxes_pos_enc_project = nn.Linear(d + 2, d)
        self.label_embed = nn.Embedding(2, d)
        self.cls_embed = nn.Embedding(1, d)
        self.norm = nn.LayerNorm(d)
        self.img_pre_norm = nn.LayerNorm(d)
        self.encode = nn.ModuleList(EncoderLayer(d, config.geo_ffn) for _ in range(config.geo_layers))
        self.encode_norm = nn.LayerNorm(d)
        self.final_proj = nn.Linear(d, d)

    def encode_boxes(self, boxes: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        """boxes `[B, N, 4]` normalised cxcywh; feat `[B, C, h, w]` -> `[B, N, C]`."""
        from torchvision.ops import roi_align  # noqa: PLC0415 -- torchvision only on this path

        b, n, _ = boxes.shape
        h, w = feat.shape[-2:]
        xyxy = cxcywh_to_xyxy(boxes) * torch.tensor([w, h, w, h], dtype=boxes.dtype, device=boxes.device)
        pooled = roi_align(feat, list(xyxy.reshape(-1, 4).split(n)), self.roi_size)
        embed = self.boxes_direct_project(boxes) + self.boxes_pool_project(pooled).view(b, n, -1)
        cx, cy, bw, bh = (t.flatten() for t in boxes.unbind(-1))
        enc = self.pos_enc.encode_boxes(cx, cy, bw, bh).view(b, n, -1).to(embed.dtype)
        labels = torch.ones(b, n, dtype=torch.long, device=boxes.device)
        return embed + self.boxes_pos_enc_project(enc) + self.label_embed(labels).to(embed.dtype)

    def encode_points(self, coords: torch.Tensor, labels: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        """coords `[B, N, 2]` normalised (x, y); labels `[B, N]` (1 positive, 0 negative)."""
        b, n, _ = coords.shape
        embed = self.points_direct_project(coords)
        sampled = F.grid_sample(feat, (coords * 2 - 1).unsqueeze(2), align_corners=False)  # [B, C, N, 1]
        embed = embed + self.points_pool_project(sampled.squeeze(-1).permute(0, 2, 1))
        enc = torch.cat([self.pos_enc.sincos(coords[..., 0].flatten()), self.pos_enc.sincos(coords[..., 1].flatten())],
                        dim=-1).view(b, n, -1).to(embed.dtype)
        return embed + self.points_pos_enc_project(enc) + self.label_embed(labels.long()).to(embed.dtype)

    def forward(self, image: torch.Tensor, points: tuple[torch.Tensor, torch.Tensor] | None = None,
                boxes: torch.Tensor | None = None) -> torch.Tensor | None:
        """image `[B, HW, C]` tokens -> prompt tokens `[B, N, C]` or None without points / boxes."""
        b, hw, c = image.shape
        side = int(math.isqrt(hw))
        feat = self.img_pre_norm(image).permute(0, 2, 1).reshape(b, c, side, side)
        parts = []
        if points is not None:
            parts.append(self.encode_points(points[0], points[1], feat))
        if boxes is not None:
            parts.append(self.encode_boxes(boxes, feat))
        if not parts:
            return None
        geo = self.norm(torch.cat(parts, 1))
        for layer in self.encode:
            geo = layer(geo, torch.zeros_like(geo), image)
        return self.final_proj(self.encode_norm(geo))


class PixelDecoder(nn.Module):
    """Top-down FPN: from the coarsest level, upsample (nearest), add, 3x3 conv, GroupNorm(8), ReLU."""

    def __init__(self, d: int, stages: int = 3) -> None:
        super().__init__()
        self.conv_layers = nn.ModuleList(nn.Conv2d(d, d, 3, padding=1) for _ in range(stages))
        self.norms = nn.ModuleList(nn.GroupNorm(8, d) for _ in range(stages))

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        prev = features[-1]
        for i, feat in enumerate(features[:-1][::-1]):
            up = F.interpolate(prev, size=feat.shape[-2:], mode="nearest")
            prev = F.relu(self.norms[i](self.conv_layers[i](feat + up)))
        return prev


class MaskPredictor(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.mask_embed = MLP([d, d, d, d])

    def forward(self, queries: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bqc,bchw->bqhw", self.mask_embed(queries), pixels)


class SegmentationHead(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.pixel_decoder = PixelDecoder(d)
        self.mask_predictor = MaskPredictor(d)
        self.cross_attend_prompt = SplitMHA(d)
        self.cross_attn_norm = nn.LayerNorm(d)
        self.instance_seg_head = nn.Conv2d(d, d, 1)
        self.semantic_seg_head = nn.Conv2d(d, 1, 1)

    def forward(self, queries: torch.Tensor, features: list[torch.Tensor], memory: torch.Tensor,
                prompt: torch.Tensor | None, prompt_mask: torch.Tensor | None) -> torch.Tensor:
        if prompt is not None:
            memory = memory + self.cross_attend_prompt(self.cross_attn_norm(memory), prompt, prompt, prompt_mask)
        b = memory.shape[0]
        h, w = features[-1].shape[-2:]
        features = [*features[:-1], memory[:, :h * w].permute(0, 2, 1).reshape(b, self.d, h, w)]
        pixels = self.instance_seg_head(self.pixel_decoder(features))
        return self.mask_predictor(queries, pixels)


class DotProductScoring(nn.Module):
    """Query logits: projected queries . projected mean prompt (over valid tokens) / sqrt(d), clamped to +-12."""

    def __init__(self, d: int, ffn: int) -> None:
        super().__init__()
        self.hs_proj = nn.Linear(d, d)
        self.prompt_proj = nn.Linear(d, d)
        self.prompt_mlp = MLPWithNorm([d, ffn, d])
        self.scale = 1.0 / math.sqrt(d)

    def forward(self, queries: torch.Tensor, prompt: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        p = self.prompt_mlp(prompt)
        if mask is not None:
            weight = mask.unsqueeze(-1).to(p.dtype)
            pooled = (p * weight).sum(1) / weight.sum(1).clamp(min=1)
        else:
            pooled = p.mean(1)
        scores = torch.matmul(self.hs_proj(queries), self.prompt_proj(pooled).unsqueeze(-1))
        return (scores * self.scale).clamp(-12.0, 12.0).squeeze(-1)


class Sam3Detector(nn.Module):
    def __init__(self, config: Sam3Config) -> None:
        super().__init__()
        self.scalp = 0 if config.multiplex else 1  # SAM 3 drops its 0.5x level for the encoder
        self.backbone = nn.ModuleDict({
            "vision_backbone": VisionBackbone(config),
            "language_backbone": nn.ModuleDict({"resizer": nn.Linear(config.vit_dim, config.d_model)}),
        })
        self.transformer = Transformer(config)
        self.segmentation_head = SegmentationHead(config.d_model)
        self.geometry_encoder = GeometryEncoder(config)
        self.dot_prod_scoring = DotProductScoring(config.d_model, config.scoring_ffn)

    def detect(self, features: list[torch.Tensor], positions: list[torch.Tensor], prompt: torch.Tensor | None,
               prompt_mask: torch.Tensor | None, points: tuple[torch.Tensor, torch.Tensor] | None = None,
               boxes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Neck levels -> (boxes xyxy 0..1 `[B, Q, 4]`, logits `[B, Q]`, mask logits `[B, Q, h, w]`, decoder out)."""
        b = features[0].shape[0]
        seg_features = features
        if self.scalp:
            features, positions = features[:-self.scalp], positions[:-self.scalp]
        _, _, h, w = features[-1].shape
        image = features[-1].flatten(2).permute(0, 2, 1)
        pos = positions[-1].flatten(2).permute(0, 2, 1)
        if prompt is not None or points is not None or boxes is not None:
            geo = self.geometry_encoder
            geo_prompt = geo(image, points, boxes)
            cls = geo.norm(geo.final_proj(geo.cls_embed.weight.to(image.dtype).view(1, 1, -1).expand(b, -1, -1)))
            for layer in geo.encode:
                cls = layer.geometry_step(cls, image, pos)
            cls = geo.encode_norm(cls)
            if prompt is not None and prompt.shape[0] != b:
                prompt = prompt.expand(b, -1, -1)
            if prompt_mask is not None and prompt_mask.shape[0] != b:
                prompt_mask = prompt_mask.expand(b, -1)
            parts = [t for t in (prompt, geo_prompt, cls) if t is not None]
            joined = torch.cat(parts, 1)
            extra = joined.shape[1] - (prompt_mask.shape[1] if prompt_mask is not None else 0)
            ones = torch.ones(b, extra, dtype=torch.bool, device=joined.device)
            prompt_mask = torch.cat([prompt_mask, ones], 1) if prompt_mask is not None else ones
            prompt = joined
        memory = self.transformer.encoder(image, pos, prompt, prompt_mask)
        out = self.transformer.decoder(memory, pos, prompt, prompt_mask, h, w)
        queries = out["decoder_output"]
        if prompt is not None:
            scores = self.dot_prod_scoring(queries, prompt, prompt_mask)
        else:
            scores = queries.new_zeros(b, queries.shape[1])
        masks = self.segmentation_head(queries, seg_features, memory, prompt, prompt_mask)
        return cxcywh_to_xyxy(out["pred_boxes"]), scores, masks, out
