"""Wan-Animate-2: the Wan 2.1 i2v 14B network driven by a pose video (github.com/Wan-Video/Wan-Animate-2;
ComfyUI's `comfy/ldm/wan/model_animate2.py` and `model_base.WAN_Animate2`, read for behaviour, written here).

The weights are byte for byte an i2v network (same names, same shapes); what makes them Animate 2 is
the file's `config` metadata, `{"transformer": {"model_type": "animate2"}}`, which ComfyUI's
model_detection merges into the detected config (`with_metadata` below). The forward differs:

- The generation latent `[B, 36, 1 + F, h, w]` carries the reference image as its frame 0 (the
  "reference slot"), the F video frames after it; the caller trims frame 0 off after sampling.
- A *pose branch* runs in lockstep through the same blocks over the pose video's latents
  `[B, 16, F, h, w]`, embedded as `[pose | ones(4) | pose]` (36 channels: latent, an all-known
  mask, latent again), at timestep 1 (almost clean), with its own text (`context_pose`, default the
  prompt) and CLIP-vision tokens (`clip_fea_pose`, default the reference's). Its RoPE positions are
  frames 1..F (pose frame j lines up with generation frame j + 1) and columns shifted right by the
  grid's width, so pose tokens sit in a strip of RoPE space of their own.
- In every block the pose branch's self-attention keys (RMS-normed, rotated) and values are handed
  to the generation branch: generation frame j (hw tokens) attends to every generation token plus
  the hw tokens of pose frame j - 1; frame 0 (the reference slot) to the generation tokens alone.
  `pose_strength` scales the pose values, `reference_strength` the values of the reference slot's
  tokens (for every query).
- Without `pose_latents` (outside the node's pose window) the network is the plain i2v network.

`PoseBranchCache` (WanAnimate2Cache's, under `transformer_options["animate2_cache"]`): the pose
branch does not depend on the sampling step, so the first call keeps each block's pose input and
later calls only re-project the keys and values from it (one slot per pose sequence, e.g. per
context window; least recently used slots are dropped when the store device runs low). Stored as
computed ("default") or per token in int8 / int4 after a ConvRot Hadamard rotation of the width
(comfy_core/weights/quant_int8.py), which spreads the activations' outlier channels over a group
before the row scale is taken.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import torch

from comfy_core.families.wan.blocks import attention, repeat_e, split_modulation
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel, _conv_in
from comfy_core.attention.rope import apply_rope1
from comfy_core.weights.quant_int8 import rotate

MODEL_TYPE = "animate2"
CACHE_OPTION = "animate2_cache"  # transformer_options key (ComfyUI's)
CACHE_DTYPES = ("default", "int8", "int4")
CONVROT_GROUP = 256  # the largest ConvRot group; smaller powers of 4 for widths it does not divide
MASK_CHANNELS = 4


class Animate2Error(ValueError):
    """Inputs the Animate 2 network cannot take (pose latents of the wrong length or width)."""


# -- detection --------------------------------------------------------------------------------------

def metadata_transformer(metadata: Mapping[str, str] | None) -> dict[str, Any]:
    """The `transformer` entry of a file's `config` metadata (ComfyUI's), {} when there is none."""
    encoded = (metadata or {}).get("config")
    if encoded is None:
        return {}
    try:
        config = json.loads(encoded)
    except (TypeError, ValueError) as exc:
        raise WanConfigError(f"Wan: the file's 'config' metadata is not JSON ({exc})") from None
    transformer = config.get("transformer", {}) if isinstance(config, dict) else None
    if not isinstance(transformer, dict):
        raise WanConfigError("Wan: the file's 'config' metadata has no 'transformer' object")
    return transformer


def with_metadata(config: WanConfig, metadata: Mapping[str, str] | None) -> WanConfig:
    """The detected config with the model type the file's metadata states: "animate2" on an
    i2v-shaped network makes it Animate 2; a type equal to the detected one changes nothing; any
    other stated type contradicts the weights (`WanConfigError`)."""
    import dataclasses

    stated = metadata_transformer(metadata).get("model_type")
    if stated is None or stated == config.model_type:
        return config
    if stated == MODEL_TYPE:
        if config.model_type != "i2v" or config.flf_pos_embed_token_number is not None:
            raise WanConfigError(f"Wan: the file's metadata says Animate 2, but the weights are a "
                                 f"{config.variant} network (Animate 2 is i2v-shaped)")
        return dataclasses.replace(config, model_type=MODEL_TYPE)
    raise WanConfigError(f"Wan: the file's metadata says model_type {stated!r}, the weights are {config.model_type!r}")


# -- the pose-branch cache ----------------------------------------------------------------------------

def convrot_group(width: int) -> int:
    """The largest power of 4 (at most 256, at least 4) dividing `width` (ComfyUI's choice)."""
    group = CONVROT_GROUP
    while group > 4 and width % group:
        group //= 4
    return group


def quantize_tokens(t: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """`[..., C]` -> (stored values, scale per token `[N, 1]` or None, ConvRot group). int8: rotated
    rows at absmax / 127; int4: absmax / 7, two codes per byte (offset by 8)."""
    if dtype == "default":
        return t.detach().clone(), None, 0
    width = t.shape[-1]
    group = convrot_group(width)
    rows = rotate(t.detach().reshape(-1, width).float(), group)
    levels = 127.0 if dtype == "int8" else 7.0
    scale = rows.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / levels
    q = torch.round(rows / scale).clamp_(-levels, levels).to(torch.int8)
    if dtype == "int4":
        if width % 2:
            raise Animate2Error(f"int4 pose cache: width {width} is odd")
        nibbles = (q + 8).to(torch.uint8)
        q = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    return q, scale, group


def dequantize_tokens(values: torch.Tensor, scale: torch.Tensor | None, group: int, dtype: str,
                      shape: torch.Size, device: Any, out_dtype: torch.dtype) -> torch.Tensor:
    values = values.to(device)
    if dtype == "default":
        return values.to(out_dtype)
    if dtype == "int4":
        low, high = (values & 0x0F).to(torch.int16) - 8, (values >> 4).to(torch.int16) - 8
        values = torch.stack([low, high], dim=-1).flatten(-2)
    rows = values.float() * scale.to(device)
    return rotate(rows, group).reshape(shape).to(out_dtype)


def _free_bytes(device: torch.device) -> int | None:
    from comfy_core.memory import device_free_memory

    if device.type == "cpu":
        try:
            import psutil
        except ImportError:  # no way to ask: keep every slot
            return None
        return int(psutil.virtual_memory().available)
    return device_free_memory(device)


class PoseBranchCache:
    """Pose-branch block inputs kept across the steps of one sampling run (module docstring).
    `select(pose_latents)` picks (or makes) the slot of a pose sequence; `put(i, x)` keeps block i's
    input, `take(i, ...)` gives it back; `filled(n)` once all n blocks are in."""

    def __init__(self, store_device: torch.device | str = "cpu", dtype: str = "default") -> None:
        if dtype not in CACHE_DTYPES:
            raise ValueError(f"pose cache: dtype must be one of {CACHE_DTYPES}, got {dtype!r}")
        self.store_device = torch.device(store_device)
        self.dtype = dtype
        self.slots: list[dict[str, Any]] = []  # least recently used first
        self.slot: dict[str, Any] | None = None
        self.reads = 0  # blocks given back (cache hits), for reports and tests

    def __deepcopy__(self, memo: dict) -> "PoseBranchCache":
        """A MODEL clone copies its options deeply: the clone gets an empty cache of the same
        settings, never a copy of the kept activations."""
        return PoseBranchCache(self.store_device, self.dtype)

    def select(self, key: torch.Tensor, create: bool = True) -> bool:
        """Make the slot of `key` current; True when it already existed."""
        for i, slot in enumerate(self.slots):
            if slot["key"].shape == key.shape and torch.equal(slot["key"], key.to(slot["key"].device)):
                self.slots.append(self.slots.pop(i))
                self.slot = slot
                return True
        self.slot = None
        if not create:
            return False
        largest = max((self._bytes(s) for s in self.slots), default=0)
        while self.slots:
            free = _free_bytes(self.store_device)
            if free is None or free >= 1.5 * largest:
                break
            self.slots.pop(0)
        self.slot = {"key": key.detach().clone().to(self.store_device), "blocks": {}}
        self.slots.append(self.slot)
        return False

    def filled(self, num_blocks: int) -> bool:
        return self.slot is not None and len(self.slot["blocks"]) == num_blocks

    def put(self, index: int, x: torch.Tensor) -> None:
        values, scale, group = quantize_tokens(x, self.dtype)
        self.slot["blocks"][index] = (values.to(self.store_device), None if scale is None else
                                      scale.to(self.store_device), group, x.shape)

    def take(self, index: int, device: Any, dtype: torch.dtype, batch_size: int) -> torch.Tensor:
        values, scale, group, shape = self.slot["blocks"][index]
        self.reads += 1
        x = dequantize_tokens(values, scale, group, self.dtype, shape, device, dtype)
        return x.repeat(batch_size // x.shape[0], *([1] * (x.ndim - 1))) if x.shape[0] != batch_size else x

    @staticmethod
    def _bytes(slot: dict[str, Any]) -> int:
        return sum(v.numel() * v.element_size() + (0 if s is None else s.numel() * s.element_size())
                   for v, s, _g, _shape in slot["blocks"].values())

    def memory_bytes(self) -> int:
        return sum(self._bytes(s) for s in self.slots)

    def free(self) -> None:
        self.slots = []
        self.slot = None


# -- the blocks, two ways ----------------------------------------------------------------------------

def _rows_and_input(block: Any, x: torch.Tensor, e: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The block's 6 modulation rows and the modulated self-attention input."""
    rows = split_modulation(block.modulation, e, x, 6)
    return rows, torch.addcmul(repeat_e(rows[0], x), block.norm1(x), 1 + repeat_e(rows[1], x))


def _heads(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.view(t.shape[0], t.shape[1], n, t.shape[2] // n)


def _keys_values(attn: Any, h: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention keys (RMS-normed, rotated) and values `[B, L, H, D]`."""
    n = attn.num_heads
    return apply_rope1(_heads(attn.norm_k(attn.k(h)), n), freqs), _heads(attn.v(h), n)


def _after_self_attention(block: Any, x: torch.Tensor, y: torch.Tensor, rows: tuple[torch.Tensor, ...],
                          context: torch.Tensor, context_img_len: int | None, options: dict) -> torch.Tensor:
    """Gated residual, cross-attention and the modulated FFN (Wan's block after self-attention)."""
    x = torch.addcmul(x, y, repeat_e(rows[2], x))
    x = x + block.cross_attn(block.norm3(x), context, context_img_len=context_img_len, transformer_options=options)
    y = block.ffn(torch.addcmul(repeat_e(rows[3], x), block.norm2(x), 1 + repeat_e(rows[4], x)))
    return torch.addcmul(x, y, repeat_e(rows[5], x))


def pose_block(block: Any, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
               context_img_len: int | None, options: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block on the pose tokens (plain Wan self-attention among them) -> (next tokens, k, v)."""
    attn = block.self_attn
    rows, h = _rows_and_input(block, x, e)
    q = apply_rope1(_heads(attn.norm_q(attn.q(h)), attn.num_heads), freqs)
    k, v = _keys_values(attn, h, freqs)
    b, s = x.shape[:2]
    y = attn.o(attention(q.reshape(b, s, -1), k.reshape(b, s, -1), v.reshape(b, s, -1), attn.num_heads, options))
    return _after_self_attention(block, x, y, rows, context, context_img_len, options), k, v


def pose_keys_values(block: Any, x: torch.Tensor, e: torch.Tensor,
                     freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values `pose_block` hands on, from a kept block input."""
    _rows, h = _rows_and_input(block, x, e)
    return _keys_values(block.self_attn, h, freqs)


def generation_block(block: Any, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                     context_img_len: int | None, k_pose: torch.Tensor | None, v_pose: torch.Tensor | None,
                     frames: int, hw: int, reference_strength: float, options: dict) -> torch.Tensor:
    """One block on the generation tokens `[B, frames * hw, C]`: frame j attends to every token plus
    pose frame j - 1 (`k_pose` / `v_pose` `[B, (frames - 1) * hw, H, D]`); none without pose."""
    attn = block.self_attn
    rows, h = _rows_and_input(block, x, e)
    q = apply_rope1(_heads(attn.norm_q(attn.q(h)), attn.num_heads), freqs)
    k, v = _keys_values(attn, h, freqs)
    if reference_strength != 1.0:
        v = torch.cat([v[:, :hw] * reference_strength, v[:, hw:]], dim=1)  # the reference slot's values
    b, s, n = x.shape[0], x.shape[1], attn.num_heads
    if k_pose is None:
        out = attention(q.reshape(b, s, -1), k.reshape(b, s, -1), v.reshape(b, s, -1), n, options)
    else:
        parts = []
        for j in range(frames):
            q_j = q[:, j * hw:(j + 1) * hw].reshape(b, hw, -1)
            if j == 0:
                k_j, v_j = k, v
            else:
                k_j = torch.cat([k, k_pose[:, (j - 1) * hw:j * hw]], dim=1)
                v_j = torch.cat([v, v_pose[:, (j - 1) * hw:j * hw]], dim=1)
            parts.append(attention(q_j, k_j.reshape(b, k_j.shape[1], -1), v_j.reshape(b, v_j.shape[1], -1), n,
                                   options))
        out = torch.cat(parts, dim=1)
    return _after_self_attention(block, x, attn.o(out), rows, context, context_img_len, options)


# -- the network -------------------------------------------------------------------------------------

def window_pose(pose: torch.Tensor, window: Any, frames: int) -> torch.Tensor:
    """The pose latents of a context window: the window's frames after its first (the first position
    is the reference slot, which has no pose frame), each one back (pose frame j is generation frame
    j + 1); ComfyUI's `WAN_Animate2.resize_cond_for_context_window` (`slice_cond` with a temporal
    offset of 1). Our context handler slices only conditioning as long as the latent, so the network
    does it here, given the window (`transformer_options["context_window"]`). A window run with a causal
    fix frame before it (`causal_anchor_index`) holds that frame in the reference slot, so all its own
    frames get pose frames (ComfyUI skips one position fewer). Unchanged when there is no window or the
    pose latents already fit."""
    index_list = getattr(window, "index_list", None)
    if index_list is None or pose.ndim != 5 or pose.shape[2] == frames - 1:
        return pose
    anchored = getattr(window, "causal_anchor_index", None) is not None and window.causal_anchor_index >= 0
    indices = [i - 1 for i in list(index_list)[0 if anchored else 1:] if 0 <= i - 1 < pose.shape[2]]
    return pose[:, :, indices]


class WanAnimate2Model(WanModel):
    """Wan-Animate-2 (module docstring): the i2v network's modules and names, its own forward.
    Extra forward inputs: `pose_latents` `[B, 16, F, h, w]` (model space, F = latent frames - 1),
    `clip_fea_pose`, `context_pose`, `pose_strength`, `reference_strength`."""

    def __init__(self, model_type: str = MODEL_TYPE, **kwargs: Any) -> None:
        super().__init__(model_type=MODEL_TYPE, **kwargs)

    def pose_rope(self, frames: int, h_len: int, w_len: int, device: Any, dtype: Any) -> torch.Tensor:
        """RoPE of the pose grid: frames from 1, columns from `w_len` (a strip right of the video)."""
        ids = torch.zeros((frames, h_len, w_len, 3), device=device, dtype=dtype)
        ids[..., 0] += torch.arange(1, frames + 1, device=device, dtype=dtype).reshape(-1, 1, 1)
        ids[..., 1] += torch.arange(h_len, device=device, dtype=dtype).reshape(1, -1, 1)
        ids[..., 2] += torch.arange(w_len, 2 * w_len, device=device, dtype=dtype).reshape(1, 1, -1)
        return self.rope_embedder(ids.reshape(1, -1, 3)).movedim(1, 2)

    def _context(self, context: torch.Tensor, clip_fea: torch.Tensor | None) -> tuple[torch.Tensor, int | None]:
        context = self.text_embedding(context)
        if clip_fea is None:
            return context, None
        return torch.cat([self.img_emb(clip_fea.to(context.dtype)), context], dim=1), clip_fea.shape[-2]

    def forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                     clip_fea: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                     transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 36, 1 + F, H, W]` (padded; frame 0 the reference slot), t `[B]`, context
        `[B, Nt, text_dim]`; kwargs as the class docstring."""
        options = dict(transformer_options or {})
        pose_latents = kwargs.get("pose_latents")
        pose_strength = float(kwargs.get("pose_strength", 1.0))
        reference_strength = float(kwargs.get("reference_strength", 1.0))

        x = _conv_in(self.patch_embedding, x)  # [B, C, 1 + F, h', w']
        grid_sizes = x.shape[2:]
        frames, hw = grid_sizes[0], grid_sizes[1] * grid_sizes[2]
        x = x.flatten(2).transpose(1, 2)  # [B, L, C]
        e, e0 = self.time_modulation(t, x.dtype)
        raw_context = context
        context, context_img_len = self._context(context, clip_fea)

        apply_pose = pose_latents is not None
        cache = options.get(CACHE_OPTION) if apply_pose else None
        x_pose = e0_pose = freqs_pose = context_pose = None
        context_img_len_pose = None
        cached = False
        if apply_pose:
            pose_latents = window_pose(pose_latents, options.get("context_window"), frames).to(device=x.device,
                                                                                              dtype=x.dtype)
            if pose_latents.ndim != 5 or pose_latents.shape[2] != frames - 1:
                raise Animate2Error(f"Wan Animate 2: the pose latents have {tuple(pose_latents.shape)}; expected "
                                    f"{frames - 1} latent frames (the generation's {frames} minus the reference slot)")
            if 2 * pose_latents.shape[1] + MASK_CHANNELS != self.in_dim:
                raise Animate2Error(f"Wan Animate 2: pose latents of {pose_latents.shape[1]} channels do not make the "
                                    f"network's {self.in_dim} input channels (2 x latent + 4)")
            from comfy_core.families.flux.dit import pad_to_patch_size

            pose_latents = pad_to_patch_size(pose_latents, self.patch_size)
            grid_pixels = (grid_sizes[1] * self.patch_size[1], grid_sizes[2] * self.patch_size[2])
            if tuple(pose_latents.shape[-2:]) != grid_pixels:
                raise Animate2Error(f"Wan Animate 2: pose latents of {tuple(pose_latents.shape[-2:])} pixels for a "
                                    f"{tuple(grid_sizes[1:])}-patch generation grid")
            freqs_pose = self.pose_rope(frames - 1, grid_sizes[1], grid_sizes[2], x.device, x.dtype)
            _e_pose, e0_pose = self.time_modulation(torch.ones_like(t.flatten()), x.dtype)
            if cache is not None:
                cache.select(pose_latents[:1])
                cached = cache.filled(len(self.blocks))
            if not cached:
                ones = torch.ones_like(pose_latents[:, :MASK_CHANNELS])
                x_pose = _conv_in(self.patch_embedding, torch.cat([pose_latents, ones, pose_latents], dim=1))
                x_pose = x_pose.flatten(2).transpose(1, 2)  # [B, F * hw, C]
                text_pose = kwargs.get("context_pose")
                clip_pose = kwargs.get("clip_fea_pose")
                context_pose, context_img_len_pose = self._context(
                    raw_context if text_pose is None else text_pose.to(x.device),
                    clip_fea if clip_pose is None else clip_pose)

        options["grid_sizes"] = tuple(grid_sizes)  # ComfyUI's, for block patches
        options["total_blocks"] = len(self.blocks)
        options["block_type"] = "double"
        if cache is not None and not cached and "context_window" in options:
            # pose-only pass first: under context windows the pose state of every block is kept before the
            # generation runs, so no window holds both branches' activations at once
            for i, block in enumerate(self.blocks):
                options["block_index"] = i
                cache.put(i, x_pose[:1])
                x_pose = pose_block(block, x_pose, e0_pose, freqs_pose, context_pose, context_img_len_pose, options)[0]
            x_pose, cached = None, True

        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        for i, block in enumerate(self.blocks):
            options["block_index"] = i
            k_pose = v_pose = None
            if apply_pose and cached:
                kept = cache.take(i, x.device, x.dtype, x.shape[0])
                k_pose, v_pose = pose_keys_values(block, kept, e0_pose, freqs_pose)
            elif apply_pose:
                if cache is not None:
                    cache.put(i, x_pose[:1])
                # the pose branch runs even where the block is replaced: block i + 1 needs its state
                x_pose, k_pose, v_pose = pose_block(block, x_pose, e0_pose, freqs_pose, context_pose,
                                                    context_img_len_pose, options)
            if v_pose is not None and pose_strength != 1.0:
                v_pose = v_pose * pose_strength

            def original(args: dict, block: Any = block, k_pose: Any = k_pose, v_pose: Any = v_pose) -> dict:
                return {"img": generation_block(block, args["img"], args["vec"], args["pe"], args["txt"],
                                                context_img_len, k_pose, v_pose, frames, hw, reference_strength,
                                                args.get("transformer_options") or options)}

            if ("double_block", i) in blocks_replace:
                x = blocks_replace[("double_block", i)](
                    {"img": x, "txt": context, "vec": e0, "pe": freqs, "transformer_options": options},
                    {"original_block": original})["img"]
            else:
                x = original({"img": x, "txt": context, "vec": e0, "pe": freqs, "transformer_options": options})["img"]
        return self.unpatchify(self.head(x, e), grid_sizes)

