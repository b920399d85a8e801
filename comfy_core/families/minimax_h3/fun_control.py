"""MiniMax H3's Fun ControlNet-Union (Alibaba PAI's VideoX-Fun `MiniMax-H3-Fun-Controlnet-Union`), a
model patch (ComfyUI's `MiniMaxH3FunControl` in `comfy/ldm/minimax/controlnet.py`, loaded by
`ModelPatchLoader` in `comfy_extras/nodes_model_patch.py` and applied by `MiniMaxH3FunControlPatch`
in `comfy_extras/nodes_minimax_h3.py`; behaviour read there, code written here).

A side stream of MiniMax H3 DiT blocks (`blocks.DiTBlock` plus `after_proj`, the first also
`before_proj`) next to the DiT blocks `injection_layers` (spread evenly over the 50 base blocks:
5 control blocks at 0, 10, ..., 40; 10 at 0, 5, ..., 45; or the file's `control_blocks_places`
metadata). With `h0` the packed sequence entering DiT block `L0 = injection_layers[0]` and
`hint` the control latent `[1, 24 | 49, T, H, W]` (control video latent | visibility | masked
source latent):

    rows  = control_proj_in(patchify(hint))      the target video's rows; other video rows
                                                  (keyframes, references) a zero row (the bias)
    c     = before_proj(h0 with its video rows replaced by rows) + h0
    after DiT block L_k:  c = control_blocks[k](c; the step's t_emb, adaLN rows, RoPE)
                          h = h + strength * after_proj(c)    (audio rows: no skip)

The control stream runs only at sigmas in [sigma(end_percent), sigma(start_percent)]. Today's
`fade_in_frames` / `fade_out_frames` ease the skip of the target video's rows over the output's
first / last pixel frames (`fade_envelope`: a smoothstep per frame, averaged over the frames of
each latent frame), as ComfyUI's `_video_row_scale`.
`control_proj_in` is float32 (ComfyUI builds it so); the blocks hold the file's dtype (bf16 or
int8 ConvRot layers kept as stored: comfy_core/models/quant_linear.py) and compute in the DiT's
dtype. Files whose metadata says `minimax_h3_fun_controlnet: adaln_basis` take the curve-form
timestep embedding (their adaLN without SiLU, float32); `inpaint_masked_pixel_mode: post_norm`
(Union 2.0) fills the regenerated pixels of the masked source with the pixel the VAE normalises
to zero (ImageNet's mean) instead of black.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.minimax_h3.blocks import DiTBlock
from comfy_core.families.minimax_h3.layout import (AUDIO_KINDS, FRAME_PER_TOKEN, PATCH, VIDEO_KINDS, PackedLayout,
                                                   patchify_video)
from comfy_core.models.unet_blocks import operations_or_default

# ComfyUI's `is_minimax_h3_fun_state_dict` keys.
MARKERS = ("control_proj_in.weight", "control_blocks.0.adaln_proj.linear.weight", "control_blocks.0.after_proj.weight",
           "control_blocks.0.before_proj.weight", "control_blocks.0.attn.qkv_proj.weight",
           "control_blocks.0.attn.q_norm.weight", "control_blocks.0.mlp.fc1.weight")
CONTROL_IN_DIM = 49  # 24 control latent channels | 1 visibility | 24 masked-source latent channels
LATENT_CHANNELS = 24
BASE_BLOCKS = 50  # ComfyUI spreads the control blocks over the released DiT's 50 blocks
PLACES_KEY, FORM_KEY, INPAINT_KEY = "control_blocks_places", "minimax_h3_fun_controlnet", "inpaint_masked_pixel_mode"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
_FLOAT32_LAYERS = ("control_proj_in.",)


class MiniMaxH3FunControlError(ValueError):
    """A Fun ControlNet file, control input or model that does not fit."""


def is_fun_control(names: Mapping[str, Any]) -> bool:
    return all(k in names for k in MARKERS)


@dataclass(frozen=True)
class FunControlConfig:
    """ComfyUI's `MiniMaxH3FunControl` arguments; the field names are those `DiTBlock` reads."""

    hidden_size: int
    num_attention_heads: int
    attention_head_dim: int
    ffn_hidden_size: int
    time_embed_dim: int
    injection_layers: tuple[int, ...]
    use_adaln_curves: bool = False
    inpaint_post_norm: bool = False
    control_in_dim: int = CONTROL_IN_DIM
    norm_eps: float = 1e-5
    qk_norm_eps: float = 1e-5
    gate_compress: bool = False

    def __post_init__(self) -> None:
        layers = self.injection_layers
        if not layers or layers[0] != 0:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: injection layers must start at 0, got {layers}")
        if tuple(sorted(set(layers))) != layers:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: injection layers must be unique and "
                                           f"increasing, got {layers}")

    @property
    def adaln_curve_grid(self) -> int | None:
        """What `DiTBlock` tests for the curve form (its adaLN float32, without SiLU)."""
        return 1 if self.use_adaln_curves else None

    @property
    def patch_dim(self) -> int:
        return self.control_in_dim * PATCH[0] * PATCH[1] * PATCH[2]

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
                            ) -> "FunControlConfig":
        """From names and (logical) shapes, and the file's metadata, as ComfyUI's loader reads them;
        the time-embedding width is read from the adaLN's input (ComfyUI assumes 8 or 2688)."""
        metadata = metadata or {}

        def shape(key: str) -> tuple[int, ...]:
            if key not in tensors:
                raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {key!r} is missing")
            return tuple(tensors[key].shape)

        count = 0
        while f"control_blocks.{count}.after_proj.weight" in tensors:
            count += 1
        if count == 0:
            raise MiniMaxH3FunControlError("MiniMax H3 Fun ControlNet: no control_blocks.N.after_proj")
        layers = tuple(range(0, BASE_BLOCKS, BASE_BLOCKS // count)) if count <= BASE_BLOCKS else ()
        if PLACES_KEY in metadata:
            try:
                layers = tuple(int(v) for v in json.loads(metadata[PLACES_KEY]))
            except (ValueError, TypeError) as exc:
                raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: metadata {PLACES_KEY} is not a list "
                                               f"of block numbers ({exc})") from None
            if len(layers) != count:
                raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: metadata {PLACES_KEY} names "
                                               f"{len(layers)} blocks, the file has {count} control blocks")
        hidden, patch_dim = shape("control_proj_in.weight")
        head_dim = shape("control_blocks.0.attn.q_norm.weight")[0]
        qkv = shape("control_blocks.0.attn.qkv_proj.weight")[0]
        if head_dim <= 0 or qkv % (3 * head_dim):
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: q/k/v width {qkv} is not "
                                           f"3 x heads x {head_dim}")
        ffn = shape("control_blocks.0.mlp.fc1.weight")[0] // 2
        t_dim = shape("control_blocks.0.adaln_proj.linear.weight")[1]
        config = cls(hidden_size=hidden, num_attention_heads=qkv // (3 * head_dim), attention_head_dim=head_dim,
                     ffn_hidden_size=ffn, time_embed_dim=t_dim, injection_layers=layers,
                     use_adaln_curves=metadata.get(FORM_KEY) == "adaln_basis",
                     inpaint_post_norm=metadata.get(INPAINT_KEY) == "post_norm")
        if patch_dim != config.patch_dim:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: control_proj_in takes {patch_dim} inputs, "
                                           f"expected {config.patch_dim} ({CONTROL_IN_DIM} channels in 1x2x2 patches)")
        inner = config.num_attention_heads * head_dim
        expected: dict[str, tuple[int, ...]] = {}
        for i in range(count):
            b = f"control_blocks.{i}."
            expected.update({b + "attn.qkv_proj.weight": (3 * inner, hidden),
                             b + "attn.out_proj.weight": (hidden, inner),
                             b + "mlp.fc1.weight": (2 * ffn, hidden), b + "mlp.fc2.weight": (hidden, ffn),
                             b + "adaln_proj.linear.weight": (6 * hidden * 3, t_dim),
                             b + "after_proj.weight": (hidden, hidden)})
        expected["control_blocks.0.before_proj.weight"] = (hidden, hidden)
        for key, want in expected.items():
            if shape(key) != want:
                raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {key} has shape {list(shape(key))}, "
                                               f"expected {list(want)}")
        return config


class ControlBlock(DiTBlock):
    """A MiniMax H3 DiT block with `after_proj` (its skip) and, the first, `before_proj`."""

    def __init__(self, config: FunControlConfig, first: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__(config, ops, factory)
        if first:
            self.before_proj = ops.Linear(config.hidden_size, config.hidden_size, bias=True, **factory)
        self.after_proj = ops.Linear(config.hidden_size, config.hidden_size, bias=True, **factory)


def layout_rows(layout: PackedLayout, device: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(video row indices [all video-kind rows, in order], which of them are the target video's
    (bool), audio row indices): ComfyUI's `img_pos`, `img_update`, `audio_pos`."""
    img, update, audio = [], [], []
    for a, b, kind in layout.segments:
        if kind in VIDEO_KINDS:
            img.append(torch.arange(a, b))
            update.append(torch.full((b - a,), kind == "video", dtype=torch.bool))
        elif kind in AUDIO_KINDS:
            audio.append(torch.arange(a, b))

    def cat(parts: list, dtype: torch.dtype) -> torch.Tensor:
        return (torch.cat(parts) if parts else torch.zeros(0, dtype=dtype)).to(device)

    return cat(img, torch.long), cat(update, torch.bool), cat(audio, torch.long)


class MiniMaxH3FunControl(nn.Module):
    """`control_proj_in` and `control_blocks` (see the module docstring)."""

    def __init__(self, config: FunControlConfig, dtype: torch.dtype | None = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.injection_layers = tuple(config.injection_layers)
        self.control_in_dim = config.control_in_dim
        self.inpaint_post_norm = config.inpaint_post_norm
        self.control_proj_in = ops.Linear(config.patch_dim, config.hidden_size, bias=True, dtype=torch.float32,
                                          device=device)
        self.control_blocks = nn.ModuleList(ControlBlock(config, i == 0, ops, factory)
                                            for i in range(len(config.injection_layers)))

    def init_stream(self, h: torch.Tensor, control_latent: torch.Tensor, layout: PackedLayout,
                    t_emb: torch.Tensor) -> torch.Tensor:
        """h [S, D] (the sequence entering the first injection block), hint [1, C <= 49, T, H, W]
        -> the control stream c [S, D]."""
        adaln_in = self.control_blocks[0].adaln_proj.linear.in_features
        if t_emb.shape[-1] != adaln_in:
            raise MiniMaxH3FunControlError(
                f"MiniMax H3 Fun ControlNet: its adaLN takes {adaln_in} wide timestep embeddings, the model gives "
                f"{t_emb.shape[-1]}: the ControlNet and the model use different adaLN forms (curve basis vs full)")
        patch_dim = self.config.patch_dim
        hint = control_latent.to(device=h.device, dtype=torch.float32)
        hint = F.pad(hint, (0, hint.shape[-1] % PATCH[2], 0, hint.shape[-2] % PATCH[1]))  # to the 2x2 patch
        target = patchify_video(hint)  # [rows, C * 4]
        if target.shape[1] > patch_dim:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: a control latent of {hint.shape[1]} "
                                           f"channels, the patch takes at most {self.control_in_dim}")
        target = F.pad(target, (0, patch_dim - target.shape[1]))
        img_pos, img_update, _ = layout_rows(layout, h.device)
        if int(img_update.sum()) != target.shape[0]:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: the control latent gives {target.shape[0]} "
                                           f"rows, the target video has {int(img_update.sum())}")
        rows = torch.zeros(img_update.shape[0], patch_dim, dtype=torch.float32, device=h.device)
        rows[img_update] = target
        c = h.clone()
        c[img_pos] = self.control_proj_in(rows).to(h.dtype)
        return self.control_blocks[0].before_proj(c) + h

    def step(self, index: int, c: torch.Tensor, t_emb: torch.Tensor, mod_segments: list, rope_angles: torch.Tensor,
             transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Control block `index` -> (the new stream, its skip `after_proj(c)`)."""
        options = dict(transformer_options or {})
        # the control tower runs dense attention (ComfyUI drops a sparse-attention override here)
        options.pop("optimized_attention_override", None)
        block = self.control_blocks[index]
        c = DiTBlock.forward(block, c, t_emb, mod_segments, rope_angles, transformer_options=options)
        return c, block.after_proj(c)


def _floating(dtype: Any) -> bool:
    return isinstance(dtype, torch.dtype) and dtype.is_floating_point


def load_fun_control(checkpoint: Any) -> MiniMaxH3FunControl:
    """A Fun ControlNet file (an open `CheckpointFile`) -> the network on the CPU: its quantised
    layers (int8 ConvRot, ...) kept as stored, `control_proj_in` (and a curve-form adaLN) float32,
    the rest in the file's float dtype; every layer casts its weights to its input's dtype."""
    from comfy_core.checkpoint.meta_build import build_on_meta
    from comfy_core.checkpoint.reader import TORCH_DTYPES
    from comfy_core.models.quant_linear import attach_quantized, detach_quantized_weights
    from comfy_core.models.storage_cast import cast_weights_at_run_time
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    names = checkpoint.tensors
    try:
        layers = quantized_layers(names, checkpoint.metadata, checkpoint.read_stored)
    except QuantFormatError as exc:
        raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {exc}") from None
    shapes = QuantizedHeader.for_detection(checkpoint, layers).tensors if layers else names
    config = FunControlConfig.detect_from_weights(shapes, checkpoint.metadata)
    owned = {n for layer in layers.values() for n in layer.tensor_names(names)}
    counts = Counter(TORCH_DTYPES[info.dtype] for name, info in names.items()
                     if name not in owned and _floating(TORCH_DTYPES[info.dtype]))
    dtype = counts.most_common(1)[0][0] if counts else torch.bfloat16
    module = build_on_meta(lambda: MiniMaxH3FunControl(config))
    if layers:
        try:
            detach_quantized_weights(module, layers, "")
        except QuantFormatError as exc:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {exc}") from None
    state = {}
    for name, info in names.items():
        if name in owned:
            continue
        stored = TORCH_DTYPES[info.dtype]
        keep32 = name.startswith(_FLOAT32_LAYERS) or (config.use_adaln_curves and ".adaln_proj." in name)
        state[name] = checkpoint.read(name, (torch.float32 if keep32 else dtype) if _floating(stored) else None)
    missing, unexpected = module.load_state_dict(state, strict=False, assign=True)
    quantized_weights = {f"{name}.weight" for name in layers}
    missing = [k for k in missing if k not in quantized_weights]
    if missing or unexpected:
        raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: missing tensors {missing[:5]}, unexpected "
                                       f"{unexpected[:5]}")
    if layers:
        try:
            attach_quantized(module, layers, names, checkpoint.read_stored, "", torch.bfloat16)
        except QuantFormatError as exc:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {exc}") from None
    cast_weights_at_run_time(module)
    return module


def fade_envelope(latent_t: int, fade_in: int, fade_out: int) -> torch.Tensor:
    """The control's weight per latent frame of a `latent_t`-frame video (ComfyUI's MiniMax H3
    "frame ease", `_video_row_scale`): over the video's pixel frames (`FRAME_PER_TOKEN` per latent
    frame: 1, 4, 4, 4, 4, ...) a weight of 1 except the first `fade_in` frames, which rise along the
    smoothstep `3t^2 - 2t^3` from 0 (t = 0 .. 1 over them; one frame: 0), and the last `fade_out`,
    which fall along `1 - smoothstep` to 0 (where both meet, the smaller); each latent frame takes
    the mean over its pixel frames. Counts are clamped to 0 .. the pixel frame count. [latent_t]."""
    spans = [FRAME_PER_TOKEN[k % len(FRAME_PER_TOKEN)] for k in range(latent_t)]
    frames = sum(spans)
    fade_in, fade_out = min(max(int(fade_in), 0), frames), min(max(int(fade_out), 0), frames)
    envelope = torch.ones(frames, dtype=torch.float32)
    if fade_in == 1:
        envelope[0] = 0.0
    elif fade_in > 1:
        t = torch.linspace(0.0, 1.0, fade_in, dtype=torch.float32)
        envelope[:fade_in] = torch.minimum(envelope[:fade_in], t * t * (3.0 - 2.0 * t))
    if fade_out == 1:
        envelope[-1] = 0.0
    elif fade_out > 1:
        t = torch.linspace(0.0, 1.0, fade_out, dtype=torch.float32)
        envelope[-fade_out:] = torch.minimum(envelope[-fade_out:], 1.0 - t * t * (3.0 - 2.0 * t))
    starts = [sum(spans[:k]) for k in range(latent_t)]
    return torch.stack([envelope[a:a + n].mean() for a, n in zip(starts, spans)])


class MiniMaxH3FunControlPatch:
    """The Fun ControlNet on one MODEL (ComfyUI's `MiniMaxH3FunControlPatch`): `block_patch(i)` is
    the `patches_replace["dit"][("double_block", i)]` entry of each injection layer. The control
    latent is encoded once per target shape and kept; the stream lives through one model call.

    `control_video` / `source_video`: [F, H, W, 3] in 0..1; `mask` [F, H, W] (1 = regenerate)."""

    def __init__(self, model_patch: Any, vae: Any, control_video: torch.Tensor | None, mask: torch.Tensor | None,
                 source_video: torch.Tensor | None, strength: float, sigma_start: float, sigma_end: float,
                 fade_in_frames: int = 0, fade_out_frames: int = 0) -> None:
        self.model_patch = model_patch
        self.vae = vae
        self.control_video = control_video
        self.mask = mask
        self.source_video = source_video
        self.strength = float(strength)
        self.sigma_start = float(sigma_start)
        self.sigma_end = float(sigma_end)
        self.fade_in_frames = int(fade_in_frames)
        self.fade_out_frames = int(fade_out_frames)
        self._row_scale: tuple[tuple[int, int], torch.Tensor] | None = None
        self._latent: tuple[tuple[int, ...], torch.Tensor] | None = None
        self._pristine: torch.Tensor | None = None
        self._stream: torch.Tensor | None = None
        self.active = False

    def __deepcopy__(self, memo: dict) -> "MiniMaxH3FunControlPatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the network and VAE)

    @property
    def network(self) -> MiniMaxH3FunControl:
        return self.model_patch.model

    # --- the control latent ---

    @staticmethod
    def _fit(frames: torch.Tensor, count: int, width: int, height: int) -> torch.Tensor:
        """[F, H, W, C] -> [count, height, width, C]: the first `count` frames (the last one held),
        resized (bilinear, centre crop)."""
        from comfy_core.image.resize import upscale_samples

        index = torch.arange(count).clamp(max=frames.shape[0] - 1)
        return upscale_samples(frames[index].movedim(-1, 1).float(), width, height, "bilinear", "center").movedim(1, -1)

    def _encode(self, frames: torch.Tensor, target: tuple[int, ...]) -> torch.Tensor:
        latent = self.vae.encode(frames).to(torch.float32)
        if tuple(latent.shape) != target:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: the VAE encodes the control frames to "
                                           f"{tuple(latent.shape)}, the model's latent is {target} (the MiniMax H3 "
                                           "video VAE's)")
        return latent

    def control_latent(self, target: tuple[int, ...]) -> torch.Tensor:
        """The hint for a video latent of shape `target` [1, 24, T, h, w]: [1, 24 | 49, T, h, w]."""
        target = tuple(int(v) for v in target)
        if self._latent is not None and self._latent[0] == target:
            return self._latent[1]
        latent_t, lat_h, lat_w = target[2:]
        frames = max((latent_t - 2) // 5, 0) * 17 + 5  # the pixel frames of T latent frames (17k + 5)
        ratio = int(self.vae.spacial_compression_encode())
        width, height = lat_w * ratio, lat_h * ratio
        hint = None
        if self.control_video is not None:
            hint = self._encode(self._fit(self.control_video, frames, width, height), target)
        if self.mask is not None:
            from comfy_core.image.resize import upscale_samples

            mask = (self.mask.reshape(-1, 1, *self.mask.shape[-2:]) > 0.5).to(torch.float32)
            mask = upscale_samples(mask[torch.arange(frames).clamp(max=mask.shape[0] - 1)], width, height,
                                   "bilinear", "center")
            keep = 1.0 - (mask > 0.5).to(torch.float32)  # [F, 1, H, W], 1 where the source stays
            if self.source_video is None:
                source = torch.zeros(frames, height, width, 3)
            else:
                source = self._fit(self.source_video, frames, width, height)
            keep_px = keep.movedim(1, -1)
            masked = source * keep_px
            if self.network.inpaint_post_norm:  # holes at the pixel the VAE normalises to zero
                masked = masked + (1.0 - keep_px) * torch.tensor(IMAGENET_MEAN).view(1, 1, 1, 3)
            masked_latent = self._encode(masked, target)
            if hint is None:
                hint = torch.zeros_like(masked_latent)
            visibility = F.interpolate(keep.squeeze(1)[None, None], size=(latent_t, lat_h, lat_w), mode="trilinear",
                                       align_corners=False)
            hint = torch.cat([hint, visibility.to(hint), masked_latent.to(hint)], dim=1)
        if hint is None:
            raise MiniMaxH3FunControlError("MiniMax H3 Fun ControlNet: neither a control video nor a mask")
        self._latent = (target, hint)
        return hint

    # --- the block hooks ---

    def _start(self, args: dict[str, Any]) -> None:
        """At the first injection layer: whether this call is in the sigma window; the hint; h0."""
        sigmas = args["transformer_options"].get("sigmas")
        sigma = float(torch.as_tensor(sigmas).reshape(-1)[0]) if sigmas is not None else float(args["sigma"])
        self.active = self.sigma_end <= sigma <= self.sigma_start
        self._stream = None
        self._pristine = None
        if self.active:
            self.control_latent(args["video_shape"])
            self._pristine = args["img"].clone()

    def after_block(self, layer: int, args: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        if not self.active:
            return out
        net = self.network
        index = net.injection_layers.index(layer)
        img = out["img"]
        with torch.no_grad(), self.model_patch.applied(img.device) as net:
            if index == 0:
                hint = self._latent[1].to(img.device)
                self._stream = net.init_stream(self._pristine, hint, args["layout"], args["t_emb"])
                self._pristine = None
            if self._stream is None:
                raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: control block {index} without the "
                                               "stream (the first injection block did not run)")
            self._stream, skip = net.step(index, self._stream, args["t_emb"], args["mod_segments"],
                                          args["rope_freqs"], args["transformer_options"])
        _, _, audio_pos = layout_rows(args["layout"], skip.device)
        skip[audio_pos] = 0
        if self.fade_in_frames > 0 or self.fade_out_frames > 0:
            skip = self._eased(skip, args["layout"])
        if index == len(net.injection_layers) - 1:
            self._stream = None
        return {**out, "img": img.add(skip.to(img.dtype), alpha=self.strength)}

    def _eased(self, skip: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
        """`skip` with the target video's rows (its last "video" segment) scaled by the fade
        envelope of their latent frame (rows are frame-major: h * w rows per latent frame)."""
        video = [(a, b) for a, b, kind in layout.segments if kind == "video"]
        if not video:
            raise MiniMaxH3FunControlError("MiniMax H3 Fun ControlNet: the fades found no target video rows")
        a, b = video[-1]
        latent_t = int(layout.signature[1])
        if latent_t <= 0 or (b - a) % latent_t:
            raise MiniMaxH3FunControlError(f"MiniMax H3 Fun ControlNet: {b - a} target video rows are not "
                                           f"{latent_t} latent frames")
        key = (latent_t, b - a)
        if self._row_scale is None or self._row_scale[0] != key:
            weights = fade_envelope(latent_t, self.fade_in_frames, self.fade_out_frames)
            self._row_scale = (key, weights.repeat_interleave((b - a) // latent_t))
        scale = self._row_scale[1].to(device=skip.device, dtype=skip.dtype)
        skip[a:b].mul_(scale.unsqueeze(-1))  # in place, as the audio rows' zeroing above
        return skip

    def block_patch(self, layer: int, previous: Any = None) -> "MiniMaxH3FunControlBlockPatch":
        return MiniMaxH3FunControlBlockPatch(self, layer, previous)

    def to(self, device_or_dtype: Any) -> "MiniMaxH3FunControlPatch":
        """ComfyUI's `model_patches_to`: the stream is dropped on a move."""
        if isinstance(device_or_dtype, torch.device):
            self._stream = None
        return self

    def models(self) -> list[Any]:
        """The patcher to load beside the model (ComfyUI's `model_patches_models`)."""
        return [self.model_patch]


class MiniMaxH3FunControlBlockPatch:
    """The `("double_block", layer)` replacement: the block (or the patch it replaced), then the
    control step's skip added to its output."""

    def __init__(self, control: MiniMaxH3FunControlPatch, layer: int, previous: Any = None) -> None:
        self.control = control
        self.layer = layer
        self.previous = previous

    def __deepcopy__(self, memo: dict) -> "MiniMaxH3FunControlBlockPatch":
        return self

    def __call__(self, args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        if self.layer == self.control.network.injection_layers[0]:
            self.control._start(args)
        out = extra["original_block"](args) if self.previous is None else self.previous(args, extra)
        return self.control.after_block(self.layer, args, out)

    def to(self, device_or_dtype: Any) -> "MiniMaxH3FunControlBlockPatch":
        self.control.to(device_or_dtype)
        if hasattr(self.previous, "to"):
            self.previous = self.previous.to(device_or_dtype)
        return self

    def models(self) -> list[Any]:
        models = self.control.models()
        if hasattr(self.previous, "models"):
            models += self.previous.models()
        return models


__all__ = ["CONTROL_IN_DIM", "MARKERS", "ControlBlock", "FunControlConfig", "MiniMaxH3FunControl", "fade_envelope",
           "MiniMaxH3FunControlBlockPatch", "MiniMaxH3FunControlError", "MiniMaxH3FunControlPatch", "is_fun_control",
           "layout_rows", "load_fun_control"]
