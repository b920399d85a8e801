"""SAM 3.1's multiplex video tracker: its parameters (`add_multiplex_video`, on the network's
`tracker`) and the frame-by-frame propagation with detection (`track_video`), as ComfyUI's
`SAM31Tracker.track_video_with_detection` (`comfy/ldm/sam3/tracker.py`; Carion et al. 2025, "SAM 3";
Ravi et al. 2024, "SAM 2"), read there and written here.

Per frame (every frame resized to 1008 x 1008): the ViT trunk once, the propagation neck (3 levels)
for tracking and memory, the detector's neck for detection, the interactive neck when masks
condition the tracker.

- Conditioning (frame 0 with the initial masks; or the first frame where detection finds
  objects, with the detector's masks): the masks themselves are the output (x 20 - 10 as logits);
  the interactive SAM heads, prompted with the mask (downsampled by a stride-4 conv), give each
  object's pointer; the memory encoder stores the masks with their "conditioning" planes at 1.
- Propagation: the frame's tokens attend to the memory bank (decoupled memory attention) -- the
  conditioning frames' memories, the last 6 frames', each with its temporal embedding, and the
  object pointers of the conditioning frames and of the last 15 frames (sine of the frame distance,
  projected); the multiplex decoder gives 3 candidate masks per object and keeps the one of best
  predicted IoU (objects scored absent: -1024). The low-resolution masks are cleaned (holes and
  sprinkles up to 16 cells, the more recently occluded of two overlapping tracks dropped), an
  object losing most of its area to stronger ones is cleared, and the result is encoded to memory.
- Detection (text prompts) on frame 0 and every `detect_interval`-th frame, while fewer than
  `max_objects` are tracked (0: no limit): the detector's masks scoring above the threshold,
  mask NMS (overlap 0.5); a detection overlapping no track (0.5) becomes a new object (up to
  `max_objects`), encoded to memory as conditioning; one scoring >= 0.8 that overlaps a track
  replaces that track's mask. Tracks matched by a detection gain keep-alive (at most 8), unmatched
  ones lose it (at least -4) on detection frames; a track whose keep-alive is <= 0 is output empty.

The result is SAM3_TRACK_DATA (comfy_core/families/wan/scail_masks.py): each frame's binary masks
(logits > 0) at 1008 x 1008, bit-packed by the `pack` given, objects in the order they appeared
(frames before an object appears: empty), and one score per object (1.0 for initial masks, the
detection score for detected ones); `packed_masks` None when nothing was tracked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.sam3.config import Sam3Config
from comfy_core.models.sam3.detector import MLP
from comfy_core.models.sam3.memory import MASK_SIZE, DecoupledMemoryEncoder, MemoryEncoder, MemoryTransformer
from comfy_core.models.sam3.multiplex import (MultiplexMaskDecoder, MultiplexState, fill_holes, mask_overlap,
                                              nms_masks, non_overlap_constraint, pad_buckets,
                                              suppress_recently_occluded)
from comfy_core.models.sam3.sam_heads import NO_OBJ_SCORE, PositionEmbeddingRandom

MEMORY_HEADS = 8  # SAM 3.1's memory attention
MAX_POINTERS = 16  # object pointers attended to (frames)
MEM_SCALE, MEM_BIAS = 2.0, -1.0  # sigmoid(mask) -> memory encoder input
MATCH, HIGH_CONFIDENCE = 0.5, 0.8
KEEP_ALIVE_MAX, KEEP_ALIVE_MIN = 8, -4


def add_multiplex_video(tracker: nn.Module, config: Sam3Config) -> None:
    """The video tensors of a SAM 3.1 tracker (ComfyUI's `SAM31Tracker`), on `tracker`."""
    d, m, mem = config.d_model, config.multiplex_count, config.mem_dim
    grid = config.image_size // config.patch
    tracker.transformer = MemoryTransformer(DecoupledMemoryEncoder(d, MEMORY_HEADS, config.mem_ffn,
                                                                   config.mem_layers, grid))
    tracker.sam_mask_decoder = MultiplexMaskDecoder(d, config.sam_ffn, config.sam_depth, m)
    tracker.maskmem_backbone = MemoryEncoder(d, mem, 2 * m, config.mask_channels, config.fuser_layers)
    tracker.maskmem_tpos_enc = nn.Parameter(torch.zeros(config.num_maskmem, 1, 1, mem))
    tracker.no_obj_embed_spatial = nn.Parameter(torch.zeros(m, mem))
    tracker.obj_ptr_proj = MLP([d, d, d, d])
    tracker.obj_ptr_tpos_proj = nn.Linear(d, mem)
    tracker.no_obj_ptr_linear = nn.Linear(d, d)
    tracker.interactive_obj_ptr_proj = MLP([d, d, d, d])
    tracker.interactive_mask_downsample = nn.Conv2d(1, 1, 4, stride=4)
    tracker.output_valid_embed = nn.Parameter(torch.zeros(m, d))
    tracker.output_invalid_embed = nn.Parameter(torch.zeros(m, d))
    tracker.image_pe_layer = PositionEmbeddingRandom(d // 2)


def temporal_sine(positions: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """`[P]` -> `[P, dim]`: sin of p / T^(2 floor(i / 2) / (dim / 2)) for i < dim / 2, then the cos."""
    half = dim // 2
    i = torch.arange(half, dtype=torch.float32, device=positions.device)
    raw = positions.float().unsqueeze(-1) / temperature ** (2 * torch.div(i, 2, rounding_mode="floor") / half)
    return torch.cat([raw.sin(), raw.cos()], dim=-1)


@dataclass
class FrameFeatures:
    trunk: torch.Tensor  # [1, Cv, g, g]
    levels: list[torch.Tensor]  # propagation neck, fine to coarse, [1, C, *, *]
    tokens: torch.Tensor  # [1, HW, C] the coarsest level
    positions: torch.Tensor  # [1, HW, C]


@dataclass
class FrameOutput:
    low: torch.Tensor  # [N, 1, 4g, 4g] mask logits
    high: torch.Tensor  # [N, 1, S, S]
    pointers: torch.Tensor  # [buckets, M, C]
    scores: torch.Tensor  # [N, 1] object logits
    image: torch.Tensor  # [1, HW, C] the frame's tokens, for the decoupled attention
    image_pos: torch.Tensor
    memory: torch.Tensor | None = None  # [buckets, C, g, g]
    memory_pos: torch.Tensor | None = None


class MultiplexTracker:
    """One video's tracking over a `Sam3Model` with SAM 3.1's video tensors (module docstring)."""

    def __init__(self, network: nn.Module, num_frames: int) -> None:
        self.network = network
        self.tracker = network.tracker
        self.backbone = network.detector.backbone["vision_backbone"]
        self.size = network.config.image_size
        self.slots = network.config.multiplex_count
        self.num_maskmem = network.config.num_maskmem
        self.num_frames = num_frames
        self.cond: dict[int, FrameOutput] = {}
        self.recent: dict[int, FrameOutput] = {}
        self._positions: dict[tuple, torch.Tensor] = {}

    def levels(self, trunk: torch.Tensor, neck: nn.ModuleList) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """A neck's levels and their sine positions (the same for every frame: computed once)."""
        features = [conv(trunk) for conv in neck]
        positions = []
        for f in features:
            key = (tuple(f.shape), f.dtype, f.device)
            if key not in self._positions:
                self._positions[key] = self.backbone.position_encoding(f)
            positions.append(self._positions[key])
        return features, positions

    # --- features -------------------------------------------------------------------------------

    def features(self, frame: torch.Tensor) -> FrameFeatures:
        trunk = self.backbone.trunk(frame)
        levels, positions = self.levels(trunk, self.backbone.propagation_convs)
        return FrameFeatures(trunk, levels, levels[-1].flatten(2).transpose(1, 2),
                             positions[-1].flatten(2).transpose(1, 2))

    def detect(self, feats: FrameFeatures, prompts: Sequence[tuple[torch.Tensor, torch.Tensor | None]],
               threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Every prompt's detections -> (mask logits `[D, 4g, 4g]`, probabilities `[D]`) above
        `threshold`, NMS'd (best first) when more than one."""
        levels, positions = self.levels(feats.trunk, self.backbone.convs)
        scores, masks = [], []
        for emb, mask in prompts:
            _, logits, mask_logits, _ = self.network.detector.detect(levels, positions, emb, mask)
            scores.append(logits[0])
            masks.append(mask_logits[0])
        probs = torch.cat(scores).float().sigmoid()
        keep = probs > threshold
        found, probs = torch.cat(masks)[keep], probs[keep]
        if found.shape[0] > 1:
            found, probs = nms_masks(found, probs)
        return found, probs

    # --- memory ---------------------------------------------------------------------------------

    def encode_memory(self, feats: FrameFeatures, masks: torch.Tensor, scores: torch.Tensor, state: MultiplexState,
                      conditioning: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask logits `[N, 1, H, W]`, object logits `[N, 1]`, bool `[N]` conditioning -> the frame's
        memory `[buckets, C, g, g]` and its positions."""
        t = self.tracker
        planes = torch.sigmoid(masks[:, 0].float()) * MEM_SCALE + MEM_BIAS  # [N, H, W]
        cond = conditioning.to(planes.dtype)[:, None, None].expand_as(planes)
        x = torch.cat([state.mux(planes), state.mux(cond)], 1)  # [buckets, 2M, H, W]
        pix = feats.levels[-1]
        memory, pos = t.maskmem_backbone(pix, x.to(pix.dtype))
        absent = 1 - state.mux((scores > 0).to(memory.dtype))  # [buckets, M, 1]; empty slots count as absent
        no_obj = (absent * t.no_obj_embed_spatial.to(memory.dtype)).sum(1)  # [buckets, C]
        return memory + no_obj[:, :, None, None], pos

    def deferred_memory(self, feats: FrameFeatures, out: FrameOutput, state: MultiplexState,
                        conditioning: torch.Tensor | None = None) -> None:
        low = non_overlap_constraint(out.low)
        masks = F.interpolate(low.float(), size=(MASK_SIZE, MASK_SIZE), mode="bilinear", align_corners=False)
        scores = torch.where((masks > 0).flatten(1).any(1, keepdim=True), 10.0, -10.0)
        if conditioning is None:
            conditioning = torch.zeros(state.count, dtype=torch.bool, device=masks.device)
        out.memory, out.memory_pos = self.encode_memory(feats, masks, scores, state, conditioning)

    def conditioned_features(self, frame: int, feats: FrameFeatures, state: MultiplexState) -> torch.Tensor:
        """The frame's coarsest features after attending to the memory bank -> `[buckets, C, g, g]`."""
        t = self.tracker
        dt = feats.tokens.dtype
        buckets, k = state.buckets, self.num_maskmem
        mems, mem_pos, images, image_pos = [], [], [], []

        def add(out: FrameOutput, index: int) -> None:
            tpos = t.maskmem_tpos_enc[index].to(dt).view(1, 1, -1)
            mems.append(pad_buckets(out.memory, buckets).flatten(2).transpose(1, 2).to(dt))
            mem_pos.append(pad_buckets(out.memory_pos.flatten(2).transpose(1, 2), buckets).to(dt) + tpos)
            images.append(out.image)
            image_pos.append(out.image_pos + tpos)

        for when, out in self.cond.items():
            distance = frame - when
            add(out, k - distance - 1 if 0 < distance < k else k - 1)
        for distance in range(k - 1, 0, -1):
            out = self.recent.get(frame - distance)
            if out is not None and out.memory is not None:
                add(out, distance - 1)
        max_pointers = min(self.num_frames, MAX_POINTERS)
        pointers = [(frame - when, out.pointers) for when, out in self.cond.items() if when <= frame]
        for distance in range(1, max_pointers):
            out = self.recent.get(frame - distance)
            if out is not None:
                pointers.append((distance, out.pointers))
        if not mems:
            tokens = feats.tokens + t.interactivity_no_mem_embed.to(dt)
            return tokens.transpose(1, 2).reshape(1, -1, *feats.levels[-1].shape[-2:])
        exclude = 0
        if pointers:
            ptrs = torch.stack([pad_buckets(p, buckets) for _, p in pointers], 1).to(dt)  # [B, P, M, C]
            b, p, m, c = ptrs.shape
            distances = torch.tensor([d for d, _ in pointers], device=ptrs.device, dtype=torch.float32)
            sine = temporal_sine(distances / max(max_pointers - 1, 1), self.network.config.d_model)
            ptr_pos = t.obj_ptr_tpos_proj(sine.to(dt))  # [P, mem]
            mems.append(ptrs.reshape(b, p * m, c))
            mem_pos.append(ptr_pos[None, :, None].expand(b, p, m, -1).reshape(b, p * m, -1))
            exclude = p * m
        memory, memory_pos = torch.cat(mems, 1), torch.cat(mem_pos, 1)
        b = memory.shape[0]
        x = feats.tokens.expand(b, -1, -1)
        out = t.transformer.encoder(x, memory, memory_pos, feats.positions.expand(b, -1, -1),
                                    torch.cat(images, 1).expand(b, -1, -1), torch.cat(image_pos, 1).expand(b, -1, -1),
                                    exclude)
        g = feats.levels[-1].shape[-2:]
        return out.transpose(1, 2).reshape(b, -1, *g)

    # --- heads ----------------------------------------------------------------------------------

    def blend_pointer(self, pointer: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """An object's pointer where it is scored present, `no_obj_ptr_linear` of it where not."""
        alpha = present.to(pointer.dtype)
        return alpha * pointer + (1 - alpha) * self.tracker.no_obj_ptr_linear(pointer)

    def condition(self, frame: int, feats: FrameFeatures, masks: torch.Tensor,
                  state: MultiplexState, threshold: float) -> FrameOutput:
        """Masks `[N, 1 | -, h, w]` condition the tracker on this frame (module docstring)."""
        t = self.tracker
        dt = feats.tokens.dtype
        masks = masks if masks.ndim == 4 else masks.unsqueeze(1)
        binary = (F.interpolate(masks.float(), size=(self.size, self.size), mode="bilinear",
                                align_corners=False) > threshold).to(dt)  # [N, 1, S, S]
        interactive = [conv(feats.trunk) for conv in self.backbone.interactive_convs]
        pix = interactive[-1] + t.interactivity_no_mem_embed.to(dt).view(1, -1, 1, 1)
        high = binary * 20.0 - 10.0
        grid = self.size // self.network.config.patch
        low = F.interpolate(high, size=(grid * 4, grid * 4), mode="bilinear", align_corners=False, antialias=True)
        pointers = self.interactive_pointer(pix, interactive[:-1], t.interactive_mask_downsample(binary))
        present = binary.flatten(1).gt(0).any(1, keepdim=True)
        scores = present.to(dt) * 20.0 - 10.0
        out = FrameOutput(low, high, state.mux(pointers), scores, feats.tokens, feats.positions)
        out.memory, out.memory_pos = self.encode_memory(feats, high, scores, state,
                                                        torch.ones(state.count, dtype=torch.bool, device=high.device))
        self.cond[frame] = out
        return out

    def interactive_pointer(self, pix: torch.Tensor, high_res: list[torch.Tensor], mask_prompt: torch.Tensor) -> torch.Tensor:
        """The interactive SAM heads prompted by mask logits `[N, 1, *, *]` alone -> pointers `[N, C]`
        (blended towards `no_obj_ptr_linear` where the heads score the object absent)."""
        t = self.tracker
        encoder, decoder = t.interactive_sam_prompt_encoder, t.interactive_sam_mask_decoder
        n, dt, device = mask_prompt.shape[0], pix.dtype, pix.device
        size = (encoder.embedding_size[0] * 4, encoder.embedding_size[1] * 4)
        if tuple(mask_prompt.shape[-2:]) != size:
            mask_prompt = F.interpolate(mask_prompt, size=size, mode="bilinear", align_corners=False, antialias=True)
        points = (torch.zeros(n, 1, 2, device=device, dtype=dt), -torch.ones(n, 1, dtype=torch.int32, device=device))
        sparse, dense = encoder(points, None, mask_prompt, n, dt, device)
        _, _, tokens, obj = decoder(pix, encoder.dense_pe(device).to(dt), sparse, dense, high_res, False)
        return self.blend_pointer(t.interactive_obj_ptr_proj(tokens[:, 0]), obj > 0)

    def propagate(self, frame: int, feats: FrameFeatures, state: MultiplexState) -> FrameOutput:
        t = self.tracker
        feat = self.conditioned_features(frame, feats, state)  # [B, C, g, g]
        dt = feat.dtype
        valid = state.valid().to(device=feat.device, dtype=dt).unsqueeze(-1)
        slot = valid * t.output_valid_embed.to(dt) + (1 - valid) * t.output_invalid_embed.to(dt)
        pe = t.image_pe_layer.dense(feat.shape[-2], feat.shape[-1], feat.device).to(dt)
        masks, iou, tokens, obj = t.sam_mask_decoder(feat, pe, slot, feats.levels[:-1])
        masks, iou, tokens, obj = (state.demux(v) for v in (masks, iou, tokens, obj))
        best = iou.argmax(-1)
        low = masks[torch.arange(state.count, device=feat.device), best].unsqueeze(1)  # [N, 1, 4g, 4g]
        low = torch.where((obj > 0)[:, :, None, None], low, torch.tensor(NO_OBJ_SCORE, dtype=low.dtype,
                                                                       device=low.device))
        high = F.interpolate(low.float(), size=(self.size, self.size), mode="bilinear", align_corners=False)
        pointers = state.mux(self.blend_pointer(t.obj_ptr_proj(tokens), obj > 0))
        return FrameOutput(low, high, pointers, obj, feats.tokens, feats.positions)

    def match_detections(self, feats: FrameFeatures, out: FrameOutput, state: MultiplexState, found: torch.Tensor,
                         probs: torch.Tensor, max_objects: int, keep_alive: dict[int, int] | None) -> list[float]:
        """Detections against the tracks (module docstring) -> the new objects' scores."""
        n = state.count
        if found.shape[0] == 0:
            if keep_alive is not None:
                for i in range(n):
                    keep_alive[i] = max(KEEP_ALIVE_MIN, keep_alive.get(i, 0) - 1)
            return []
        tracks = out.low[:, 0]
        dets = F.interpolate(found.unsqueeze(1).to(tracks.dtype), size=tracks.shape[-2:], mode="bilinear",
                             align_corners=False)[:, 0]
        overlap = mask_overlap(dets, tracks)  # [D, N]
        matched = set((overlap >= MATCH).any(0).nonzero().flatten().tolist())
        if keep_alive is not None:
            for i in range(n):
                step = keep_alive.get(i, 0) + (1 if i in matched else -1)
                keep_alive[i] = min(KEEP_ALIVE_MAX, max(KEEP_ALIVE_MIN, step))
        refreshed = False
        for d in range(overlap.shape[0]):
            best = int(overlap[d].argmax())
            if probs[d] >= HIGH_CONFIDENCE and overlap[d, best] >= MATCH:
                out.low[best] = dets[d].unsqueeze(0)
                out.high[best] = F.interpolate(found[d][None, None].to(out.high.dtype), size=out.high.shape[-2:],
                                               mode="bilinear", align_corners=False)[0]
                refreshed = True
        if refreshed:
            self.deferred_memory(feats, out, state)
        if max_objects > 0 and n >= max_objects:
            return []
        new = overlap.max(1).values < MATCH
        if max_objects > 0:
            new = new & (torch.cumsum(new.int(), 0) <= max_objects - n)
        if not new.any():
            return []
        added = found[new]
        state.add(added.shape[0])
        for name in ("low", "high"):
            current = getattr(out, name)
            det = F.interpolate(added.unsqueeze(1).to(current.dtype), size=current.shape[-2:], mode="bilinear",
                                align_corners=False)
            setattr(out, name, torch.cat([current, det], 0))
        conditioning = torch.zeros(state.count, dtype=torch.bool, device=added.device)
        conditioning[n:] = True
        self.deferred_memory(feats, out, state, conditioning)
        if keep_alive is not None:
            for i in range(n, state.count):
                keep_alive[i] = 1
        return probs[new].tolist()


def track_video(network: nn.Module, frames: torch.Tensor, initial_masks: torch.Tensor | None,
                prompts: Sequence[tuple[torch.Tensor, torch.Tensor | None]] | None, pack: Callable[[torch.Tensor], torch.Tensor],
                threshold: float = 0.5, max_objects: int = 0, detect_interval: int = 1,
                progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """frames `[T, 3, S, S]` in 0..1 (the network's dtype and device); initial masks `[N, h, w]` or
    `[N, 1, h, w]` for frame 0 (or None); prompts: (text states `[1, L, W]` before the resizer, mask
    `[1, L]`) for detection (or None) -> SAM3_TRACK_DATA without `orig_size` (module docstring)."""
    if not getattr(network.config, "video", False) or not network.config.multiplex:
        raise ValueError("this SAM 3 file has no SAM 3.1 multiplex video tracker")
    count = frames.shape[0]
    device = frames.device
    run = MultiplexTracker(network, count)
    resizer = network.detector.backbone["language_backbone"]["resizer"]
    prompts = [(resizer(e.to(device=device, dtype=frames.dtype)), m.to(device).bool() if m is not None else None)
               for e, m in (prompts or [])]
    state: MultiplexState | None = None
    scores: list[float] = []
    keep_alive: dict[int, int] | None = {} if prompts else None
    last_occluded = torch.empty(0, dtype=torch.long, device=device)
    packed: list[torch.Tensor | None] = []
    lookback = max(run.num_maskmem, MAX_POINTERS)
    for i in range(count):
        feats = run.features(frames[i:i + 1])
        found = torch.empty(0, device=device)
        probs = torch.empty(0)
        detecting = bool(prompts) and i % max(detect_interval, 1) == 0 and not (
            max_objects > 0 and state is not None and state.count >= max_objects)
        if detecting:
            found, probs = run.detect(feats, prompts, threshold)
        if i == 0 and initial_masks is not None:
            state = MultiplexState(initial_masks.shape[0], run.slots)
            out = run.condition(i, feats, initial_masks.to(device=device, dtype=frames.dtype), state, 0.5)
            last_occluded = torch.full((state.count,), -1, dtype=torch.long, device=device)
            scores = [1.0] * state.count
            if keep_alive is not None:
                keep_alive.update({j: KEEP_ALIVE_MAX for j in range(state.count)})
        elif state is None or state.count == 0:
            if found.shape[0] == 0:
                packed.append(None)
                if progress is not None:
                    progress(i + 1)
                continue
            if max_objects > 0:
                found, probs = found[:max_objects], probs[:max_objects]
            state = MultiplexState(found.shape[0], run.slots)
            out = run.condition(i, feats, found, state, 0.0)
            last_occluded = torch.full((state.count,), -1, dtype=torch.long, device=device)
            scores = probs.tolist()
            if keep_alive is not None:
                keep_alive.update({j: 1 for j in range(state.count)})
        else:
            out = run.propagate(i, feats, state)
            out.low = fill_holes(out.low, 16)
            if last_occluded.shape[0] == state.count and state.count > 1:
                out.low = suppress_recently_occluded(out.low, last_occluded, i)
            run.deferred_memory(feats, out, state)
            run.recent[i] = out
            for old in [j for j in run.recent if j < i - lookback]:
                del run.recent[old]
            before = state.count
            new_scores = run.match_detections(feats, out, state, found, probs, max_objects,
                                              keep_alive if detecting else None)
            if state.count > before:
                last_occluded = torch.cat([last_occluded, torch.full((state.count - before,), -1, dtype=torch.long,
                                                                device=device)])
                scores.extend(new_scores)
        masks = out.high[:, 0].clone()
        if keep_alive is not None:
            for j in range(masks.shape[0]):
                if keep_alive.get(j, 0) <= 0:
                    masks[j] = NO_OBJ_SCORE
        packed.append(pack(masks > 0).cpu())
        if progress is not None:
            progress(i + 1)
    if all(p is None for p in packed):
        return {"packed_masks": None, "n_frames": count, "scores": []}
    most = max(p.shape[0] for p in packed if p is not None)
    shape = next(p for p in packed if p is not None).shape[1:]
    frames_out = []
    for p in packed:
        if p is None:
            p = torch.zeros((0,) + tuple(shape), dtype=torch.uint8)
        if p.shape[0] < most:
            p = torch.cat([p, torch.zeros((most - p.shape[0],) + tuple(shape), dtype=torch.uint8)], 0)
        frames_out.append(p)
    return {"packed_masks": torch.stack(frames_out), "n_frames": count, "scores": scores}
