"""RT-DETRv4 object detector (HGNetv2 backbone, hybrid encoder, D-FINE decoder), in ComfyUI's key
layout, and the COCO post-processing ComfyUI's RTDETR_detect reads.

Networks: RT-DETRv4 (Liao et al. 2025, "RT-DETRv4: Painlessly Furthering Real-Time Object
Detection with Vision Foundation Models"), whose inference network is D-FINE's (Peng et al. 2024,
"D-FINE: Redefine Regression Task in DETRs as Fine-grained Distribution Refinement"): an HGNetv2
backbone (PaddleClas), a hybrid encoder (one AIFI transformer layer on the stride-32 map, then a
top-down FPN and a bottom-up PAN of CSP-ELAN blocks) and a deformable-attention decoder whose box
edges are distributions over `reg_max + 1` bins (fine-grained distribution refinement) with a
location-quality head on the class scores. Written here after ComfyUI's
`comfy/ldm/rt_detr/rtdetr_v4.py` (its module and tensor names, so its `rt_detr_v4-*-hgnet`
files load as they are): BatchNorm kept in the backbone, pre-fused convolutions (bias, no norm)
in the encoder and decoder projections.

The configuration, backbone and encoder are comfy_core/models/rtdetr_backbone.py's; the COCO
class names comfy_core/models/rtdetr_classes.py's (importable without torch).

ComfyUI hard-codes the X size (HGNetv2-B5, encoder width 384); here the sizes are read from the
file's names and shapes (`RTDETRConfig.detect_from_weights`), which gives ComfyUI's numbers for
its files and lets tests build tiny ones. The attention head count (8) and the deformable
points per level (3, 6, 3) are ComfyUI's fixed values. Every MLP head (query position, pre-box,
box distributions, location quality) uses SiLU, as ComfyUI's does; transformers' D-FINE uses ReLU
there (tests/comfy_core/test_rtdetr_dfine_parity.py compares the two with its heads switched).

ComfyUI loads the file with UNETLoader (`models/diffusion_models`) as a MODEL whose
`model.diffusion_model` is this network; calling it with a `[B, 3, 640, 640]` image in 0..1 and
the original `(width, height)` gives one dict per image: `labels`, `boxes` (x1, y1, x2, y2 in
original pixels), `scores` (sigmoid), the `num_queries` best (query, class) pairs.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from comfy_core.models.rtdetr_backbone import (INPUT_SIDE, HGNetv2, HybridEncoder, RTDETRConfig,  # noqa: F401
                                                SelfAttention, StageConfig)
from comfy_core.models.rtdetr_classes import COCO_CLASSES  # noqa: F401 (ComfyUI names it here)


# The tensor that tells an RT-DETRv4 file (ComfyUI's model_detection: `image_model` "RT_DETR_v4").
MARKER = "encoder.pan_blocks.1.cv4.conv.weight"


def is_rtdetr(names: Any, prefix: str = "") -> bool:
    """Whether a file's tensor names are an RT-DETRv4 detector's (ComfyUI's detection key)."""
    return prefix + MARKER in names


# --- D-FINE decoder --------------------------------------------------------------------------------

def deformable_attention(values: list[torch.Tensor], locations: torch.Tensor, weights: torch.Tensor,
                         points: Sequence[int]) -> torch.Tensor:
    """Multi-scale deformable attention (Zhu et al. 2021, Deformable DETR), by bilinear sampling.

    values: per level `[B*heads, C, h_l, w_l]`; locations `[B, Lq, heads, P, 2]` in 0..1 (x, y),
    P = sum(points) ordered level by level; weights `[B, Lq, heads, P]`. Each head's output is
    sum_p w_p * value(loc_p), sampled with zero padding, half-pixel centres (grid_sample,
    align_corners False). Returns `[B, Lq, heads*C]`."""
    b, lq, heads, _, _ = locations.shape
    c = values[0].shape[1]
    grids = (2 * locations - 1).permute(0, 2, 1, 3, 4).flatten(0, 1)  # [B*heads, Lq, P, 2]
    sampled = [F.grid_sample(v, g, mode="bilinear", padding_mode="zeros", align_corners=False)
               for v, g in zip(values, grids.split(list(points), dim=2))]  # each [B*heads, C, Lq, p_l]
    attn = weights.permute(0, 2, 1, 3).flatten(0, 1).unsqueeze(1)  # [B*heads, 1, Lq, P]
    out = (torch.cat(sampled, -1) * attn).sum(-1)  # [B*heads, C, Lq]
    return out.reshape(b, heads * c, lq).permute(0, 2, 1)


class MSDeformableAttention(nn.Module):
    """D-FINE's deformable cross-attention: offsets scaled by the reference box size / points."""

    def __init__(self, dim: int, heads: int, points: Sequence[int], offset_scale: float = 0.5) -> None:
        super().__init__()
        self.heads, self.points, self.offset_scale = heads, list(points), offset_scale
        total = heads * sum(points)
        self.register_buffer("num_points_scale", torch.tensor([1.0 / n for n in points for _ in range(n)],
                                                              dtype=torch.float32))
        self.sampling_offsets = nn.Linear(dim, total * 2)
        self.attention_weights = nn.Linear(dim, total)

    def forward(self, query: torch.Tensor, ref: torch.Tensor, values: list[torch.Tensor]) -> torch.Tensor:
        """query `[B, Lq, D]`; ref `[B, Lq, 1, 4]` (cx, cy, w, h in 0..1)."""
        b, lq = query.shape[:2]
        p = sum(self.points)
        offsets = self.sampling_offsets(query).reshape(b, lq, self.heads, p, 2)
        weights = F.softmax(self.attention_weights(query).reshape(b, lq, self.heads, p), -1)
        scale = self.num_points_scale.to(query).unsqueeze(-1)  # [P, 1]
        locations = ref[:, :, None, :, :2] + offsets * scale * ref[:, :, None, :, 2:] * self.offset_scale
        return deformable_attention(values, locations, weights, self.points)


class Gate(nn.Module):
    """Gated fusion of the query and the cross-attention output, then LayerNorm."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * dim, 2 * dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        g1, g2 = torch.sigmoid(self.gate(torch.cat([x1, x2], -1))).chunk(2, -1)
        return self.norm(g1 * x1 + g2 * x2)


class MLP(nn.Module):
    """Linear layers with SiLU between them (none after the last)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.layers = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.silu(x)
        return x


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ff: int, points: Sequence[int]) -> None:
        super().__init__()
        self.self_attn = SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = MSDeformableAttention(dim, heads, points)
        self.gateway = Gate(dim)
        self.linear1 = nn.Linear(dim, ff)
        self.linear2 = nn.Linear(ff, dim)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, target: torch.Tensor, ref: torch.Tensor, values: list[torch.Tensor],
                query_pos: torch.Tensor) -> torch.Tensor:
        q = target + query_pos
        target = self.norm1(target + self.self_attn(q, q, target))
        target = self.gateway(target, self.cross_attn(target + query_pos, ref, values))
        # clamped to float16's range (as D-FINE), so a half-precision run cannot overflow here
        return self.norm3((target + self.linear2(F.relu(self.linear1(target)))).clamp(-65504, 65504))


def weighting_function(reg_max: int, up: torch.Tensor, reg_scale: torch.Tensor) -> torch.Tensor:
    """D-FINE's non-uniform bin values W(n), n = 0..reg_max: 0 in the middle, growing
    geometrically ((1 + a)^(2 / (reg_max - 2)) per bin, a = |up| * |reg_scale|) to +-a at the
    second-outermost bins, and +-2a at the two ends."""
    a = (up[0].abs() * reg_scale.abs()).item()
    step = (a + 1) ** (2 / (reg_max - 2))
    left = [-(step ** i) + 1 for i in range(reg_max // 2 - 1, 0, -1)]
    right = [step ** i - 1 for i in range(1, reg_max // 2)]
    return torch.tensor([-2 * a] + left + [0.0] + right + [2 * a], dtype=up.dtype, device=up.device)


def distance_to_box(points: torch.Tensor, distance: torch.Tensor, reg_scale: torch.Tensor) -> torch.Tensor:
    """Edge distances (left, top, right, bottom) from a reference box (cx, cy, w, h) -> (cx, cy, w, h):
    edge = centre -+ (reg_scale / 2 + d) * size / reg_scale."""
    rs = reg_scale.abs().to(points.dtype)
    x1 = points[..., 0] - (0.5 * rs + distance[..., 0]) * (points[..., 2] / rs)
    y1 = points[..., 1] - (0.5 * rs + distance[..., 1]) * (points[..., 3] / rs)
    x2 = points[..., 0] + (0.5 * rs + distance[..., 2]) * (points[..., 2] / rs)
    y2 = points[..., 1] + (0.5 * rs + distance[..., 3]) * (points[..., 3] / rs)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], -1)


def integral(corners: torch.Tensor, project: torch.Tensor, reg_max: int) -> torch.Tensor:
    """Expected edge distance of each of the 4 distributions: sum_n softmax(logits)_n * W(n)."""
    shape = corners.shape
    prob = F.softmax(corners.reshape(-1, reg_max + 1), 1)
    return F.linear(prob, project.to(prob)).reshape(list(shape[:-1]) + [4])


class LQE(nn.Module):
    """Location-quality estimator: the top-k probabilities of each edge distribution (and their
    mean) through an MLP, added to the class logits."""

    def __init__(self, k: int, hidden: int, layers: int, reg_max: int) -> None:
        super().__init__()
        self.k, self.reg_max = k, reg_max
        self.reg_conf = MLP(4 * (k + 1), hidden, 1, layers)

    def forward(self, scores: torch.Tensor, corners: torch.Tensor) -> torch.Tensor:
        b, lq, _ = corners.shape
        prob = F.softmax(corners.reshape(b, lq, 4, self.reg_max + 1), -1)
        top = prob.topk(self.k, -1).values
        stat = torch.cat([top, top.mean(-1, keepdim=True)], -1)
        return scores + self.reg_conf(stat.reshape(b, lq, -1))


class TransformerDecoder(nn.Module):
    def __init__(self, config: RTDETRConfig, up: nn.Parameter, reg_scale: nn.Parameter) -> None:
        super().__init__()
        self.hidden, self.heads, self.reg_max = config.dec_hidden, config.dec_heads, config.reg_max
        # the same parameters as the owner's (ComfyUI's files hold both names)
        self.up, self.reg_scale = up, reg_scale
        self.layers = nn.ModuleList([DecoderLayer(config.dec_hidden, config.dec_heads, config.dec_ff,
                                                  config.num_points) for _ in range(config.dec_layers)])
        self.lqe_layers = nn.ModuleList([LQE(4, 64, 2, config.reg_max) for _ in range(config.dec_layers)])
        self.register_buffer("project", weighting_function(config.reg_max, up.data, reg_scale.data))

    def forward(self, target: torch.Tensor, ref_unact: torch.Tensor, memory: torch.Tensor,
                shapes: list[tuple[int, int]], owner: "DFINETransformer") -> tuple[torch.Tensor, torch.Tensor]:
        b = memory.shape[0]
        c = self.hidden // self.heads
        flat = memory.reshape(b, memory.shape[1], self.heads, c).permute(0, 2, 3, 1).flatten(0, 1)
        values = [v.reshape(v.shape[0], c, h, w)
                  for v, (h, w) in zip(flat.split([h * w for h, w in shapes], dim=-1), shapes)]
        ref = torch.sigmoid(ref_unact)
        output = target
        output_detach: Any = 0
        corners_undetach: Any = 0
        initial = None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            query_pos = owner.query_pos_head(ref).clamp(-10, 10)
            output = layer(output, ref.unsqueeze(2), values, query_pos)
            if i == 0:
                r = ref.clamp(1e-5, 1 - 1e-5)
                initial = torch.sigmoid(owner.pre_bbox_head(output) + torch.log(r / (1 - r)))
            corners = owner.dec_bbox_head[i](output + output_detach) + corners_undetach
            boxes = distance_to_box(initial, integral(corners, self.project, self.reg_max), self.reg_scale)
            if i == last:
                scores = self.lqe_layers[i](owner.dec_score_head[i](output), corners)
                return boxes, scores
            corners_undetach, ref, output_detach = corners, boxes, output
        raise AssertionError("unreachable: the decoder has at least one layer")


class DFINETransformer(nn.Module):
    """Query selection from the encoder memory (top scores over fixed anchors), then the decoder."""

    def __init__(self, config: RTDETRConfig) -> None:
        super().__init__()
        hidden = config.dec_hidden
        self.num_queries = config.num_queries
        self.strides = list(config.feat_strides)
        self.spatial_size = config.spatial_size
        self.input_proj = nn.ModuleList()
        for _ in config.feat_strides:
            if config.enc_hidden == hidden:
                self.input_proj.append(nn.Identity())
            else:
                seq = nn.Sequential()
                seq.add_module("conv", nn.Conv2d(config.enc_hidden, hidden, 1, bias=True))
                self.input_proj.append(seq)
        self.up = nn.Parameter(torch.tensor([0.5]), requires_grad=False)
        self.reg_scale = nn.Parameter(torch.tensor([config.reg_scale]), requires_grad=False)
        self.decoder = TransformerDecoder(config, self.up, self.reg_scale)
        self.query_pos_head = MLP(4, 2 * hidden, hidden, 2)
        self.enc_output = nn.Sequential()
        self.enc_output.add_module("proj", nn.Linear(hidden, hidden))
        self.enc_output.add_module("norm", nn.LayerNorm(hidden))
        self.enc_score_head = nn.Linear(hidden, config.num_classes)
        self.enc_bbox_head = MLP(hidden, hidden, 4, 3)
        self.dec_score_head = nn.ModuleList([nn.Linear(hidden, config.num_classes) for _ in range(config.dec_layers)])
        self.pre_bbox_head = MLP(hidden, hidden, 4, 3)
        self.dec_bbox_head = nn.ModuleList([MLP(hidden, hidden, 4 * (config.reg_max + 1), 3)
                                            for _ in range(config.dec_layers)])
        anchors, valid = make_anchors(config.spatial_size, config.feat_strides)
        self.register_buffer("anchors", anchors)
        self.register_buffer("valid_mask", valid)

    def forward(self, feats: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        shapes = [(f.shape[2], f.shape[3]) for f in proj]
        memory = torch.cat([f.flatten(2).permute(0, 2, 1) for f in proj], 1)  # [B, sum(h*w), D]
        anchors = self.anchors.to(memory).expand(memory.shape[0], -1, -1)
        out_mem = self.enc_output(self.valid_mask.to(memory) * memory)
        logits = self.enc_score_head(out_mem)
        idx = torch.topk(logits.max(-1).values, self.num_queries, dim=-1).indices.unsqueeze(-1)
        content = out_mem.gather(1, idx.expand(-1, -1, out_mem.shape[-1]))
        ref = self.enc_bbox_head(content) + anchors.gather(1, idx.expand(-1, -1, anchors.shape[-1]))
        boxes, scores = self.decoder(content, ref, memory, shapes, self)
        return {"pred_logits": scores, "pred_boxes": boxes}


def make_anchors(side: int, strides: Sequence[int], grid_size: float = 0.05,
                 eps: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor boxes in logit space `[1, N, 4]` (cell centres, size grid_size * 2^level) and which
    lie inside (eps, 1 - eps) on every coordinate `[1, N, 1]`; the others are +inf."""
    anchors = []
    for level, stride in enumerate(strides):
        h = w = int(side / stride)
        gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        xy = (torch.stack([gx, gy], -1).float() + 0.5) / torch.tensor([w, h], dtype=torch.float32)
        wh = torch.ones_like(xy) * grid_size * (2.0 ** level)
        anchors.append(torch.cat([xy, wh], -1).reshape(-1, h * w, 4))
    anchors_t = torch.cat(anchors, 1)
    valid = ((anchors_t > eps) & (anchors_t < 1 - eps)).all(-1, keepdim=True)
    logit = torch.log(anchors_t / (1 - anchors_t))
    return torch.where(valid, logit, torch.full_like(logit, float("inf"))), valid


# --- the whole detector ----------------------------------------------------------------------------

def cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)


class RTv4(nn.Module):
    """RT-DETRv4: backbone -> encoder -> decoder, then ComfyUI's post-processing (`postprocess`)."""

    def __init__(self, config: RTDETRConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or RTDETRConfig()
        self.num_classes, self.num_queries = config.num_classes, config.num_queries
        self.backbone = HGNetv2(config)
        self.encoder = HybridEncoder(config)
        self.decoder = DFINETransformer(config)

    def raw(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """`pred_logits` `[B, Q, classes]` and `pred_boxes` `[B, Q, 4]` (cx, cy, w, h in 0..1)."""
        return self.decoder(self.encoder(self.backbone(x)))

    def postprocess(self, outputs: dict[str, torch.Tensor], orig_size: tuple[int, int]) -> list[dict]:
        """The `num_queries` best (query, class) pairs by sigmoid score over all queries and classes;
        boxes as x1, y1, x2, y2 scaled by `orig_size` (width, height)."""
        boxes = cxcywh_to_xyxy(outputs["pred_boxes"])
        boxes = boxes * torch.tensor(orig_size, device=boxes.device, dtype=boxes.dtype).repeat(2)
        scores, idx = torch.topk(torch.sigmoid(outputs["pred_logits"]).flatten(1), self.num_queries, dim=-1)
        labels = idx % self.num_classes
        boxes = boxes.gather(1, (idx // self.num_classes).unsqueeze(-1).expand(-1, -1, 4))
        return [{"labels": lbl, "boxes": b, "scores": s} for lbl, b, s in zip(labels, boxes, scores)]

    def forward(self, x: torch.Tensor, orig_size: tuple[int, int] = (INPUT_SIDE, INPUT_SIDE),
                **_kwargs: Any) -> list[dict]:
        """`x` `[B, 3, side, side]` in 0..1 (cast to the network's device and dtype)."""
        p = next(self.parameters())
        return self.postprocess(self.raw(x.to(device=p.device, dtype=p.dtype)), orig_size)


class DetectionModel(nn.Module):
    """What a MODEL patcher holds for a detector: `diffusion_model` is the network, as ComfyUI's
    `model.model.diffusion_model` (its BaseModel wrapper), so code written for ComfyUI finds it."""

    def __init__(self, network: RTv4, dtype: torch.dtype) -> None:
        super().__init__()
        self.diffusion_model = network
        self.manual_cast_dtype = None
        self._dtype = dtype

    def get_dtype(self) -> torch.dtype:
        return self._dtype


def build_rtdetr(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> RTv4:
    """An RT-DETRv4 network built for `state_dict`'s sizes and loaded with it (strict), eval mode."""
    config = RTDETRConfig.detect_from_weights({k: tuple(v.shape) for k, v in state_dict.items()})
    network = RTv4(config)
    network.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()})
    return network.to(dtype).eval().requires_grad_(False)


def load_detection_model(file: Any, policy: Any = None, weight_dtype: torch.dtype | None = None) -> DetectionModel:
    """An open RT-DETRv4 `CheckpointFile` (`is_rtdetr(file)`) -> `DetectionModel` (what ComfyUI's
    UNETLoader wraps in its MODEL patcher; comfy_core/split/diffusion_model.py makes the patcher).
    Weights in float16 or float32 (ComfyUI's `supported_inference_dtypes`): `weight_dtype` when it
    is one of them, else what the dtype policy (`comfy_core.checkpoint.dtype.DtypePolicy`) picks
    for the device (float32 on a CPU)."""
    from comfy_core.checkpoint.dtype import UNET, DtypePolicy

    policy = policy or DtypePolicy()
    state = {name: file.read(name) for name in file.keys()}
    stored = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    dtype = weight_dtype if weight_dtype in (torch.float16, torch.float32) else \
        policy.dtype_for(UNET, [torch.float16, torch.float32], stored)
    if dtype not in (torch.float16, torch.float32):
        dtype = torch.float32
    return DetectionModel(build_rtdetr(state, dtype), dtype)
