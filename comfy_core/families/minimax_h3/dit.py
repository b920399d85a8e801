"""The MiniMax H3 joint audio-video diffusion transformer and `MiniMaxH3Config` read from weights.

A single-stream DiT: one packed sequence (`layout.py`) of text, condition rows, the stereo audio
latent (32 channels at 40 Hz) and the video latent (24 channels, 1x2x2 patches), conditioned on
Qwen3-VL-32B's layer-50 states through a condition projection and a 2-block token refiner.
State-dict names, constructor arguments, the forward and its patch points are those of ComfyUI's
`comfy/ldm/minimax/model.py` (`MiniMaxH3Model`); written here from its equations. Per block:

    h = RMSNorm(x) * (1 + scale_msa[row]) + shift_msa[row];   x += gate_msa[row] * Attn(h)
    h = RMSNorm(x) * (1 + scale_mlp[row]) + shift_mlp[row];   x += gate_mlp[row] * MLP(h)

with `row` per token: (its timestep's index among the step's distinct timesteps) * 3 + its
modality tag (0 video, 1 text, 2 audio); each block's `adaln_proj` maps the timestep embedding to
6 tables per modality. Attention: fused q/k/v (no biases), per-head RMS norms on q / k, then a
split-half ("rotate half") RoPE on the first 96 of each head's 128 channels, 16 frequencies per
axis (t, h, w) from the file's `rope.inv_freq`; the MLP is SwiGLU (gate = first half of `fc1`).

Timesteps: the network gets the video sigma (timestep / 1000); video and text rows run at
t = 1 - sigma, audio rows at 1 - sigma_a with sigma_a the audio schedule's sigma (shift 3 instead
of the video's 12: `time_shift_sigma`), condition rows at max(t, 0.999) (video) / max(t_a, 1.0)
(audio), their latents mixed with seeded noise by that amount (`visual_cond_noise_aug`). The
timestep embedding takes t in [0, 1] (cos half first, 256 frequencies) or, in the curve-form files
(`adaln_t_table`), interpolates a [grid, t_dim] table, the adaLN then taking it without SiLU.

The sampler carries the audio latent scaled onto the video schedule (`ModelSamplingAV`'s
`audio_scale` = shift_video / shift_audio, applied by the model's latent in / out): the forward
turns the carried variable into the audio latent (times sigma_a / sigma_v) and the prediction
back. Distilled files carry a PDD head bank (`final_layer.video_out` holds n heads): a step uses
the dt-weighted mean of the heads its [sigma, next sigma) interval covers on the base grid.

A denoise mask gives per-row labels: a row kept by mask value m runs at 1 - m sigma (no higher than
its stream's condition label), its velocity scaled by m (`mask_row_values`, `conditions.py`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.minimax_h3.blocks import (DiTBlock, FinalLayer, MiniMaxH3InputError, TimeEmbedder,
                                                   TokenRefiner, mask_row_values, row_index)
from comfy_core.families.minimax_h3.layout import (AUDIO_COND_TIMESTEP, AUDIO_KINDS, PATCH, SEGMENT_TAGS,
                                                   VISUAL_COND_TIMESTEP, MiniMaxH3LayoutError, PackedLayout,
                                                   build_layout, pack_audio, patchify_video, time_shift_sigma,
                                                   unpack_audio, unpatchify_video)
from comfy_core.latent.nested import pack_latents, unpack_latents
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered

SHIFT_VIDEO = 12.0
SHIFT_AUDIO = 3.0
SHIFT_VIDEO_OPTION = "minimax_h3_sigma_shift_video"  # transformer_options keys MiniMaxH3SigmaShift sets
SHIFT_AUDIO_OPTION = "minimax_h3_sigma_shift_audio"
LAYOUT_OPTION = "minimax_h3_layout"  # where the forward leaves the layout for attention patches
MARKER = "audio_patch_proj.weight"


class MiniMaxH3ConfigError(ValueError):
    """The MiniMax H3 weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class MiniMaxH3Config:
    """ComfyUI's `MiniMaxH3Model` constructor arguments (its defaults: the released 50-block net)."""

    hidden_size: int = 5376
    num_layers: int = 50
    token_refiner_num_layers: int = 2
    num_attention_heads: int = 56
    attention_head_dim: int = 128
    ffn_hidden_size: int = 14336
    latents_dim: int = 24
    audio_latents_dim: int = 32
    text_dim: int = 5120
    timestep_input_dim: int = 256
    time_embed_hidden_size: int = 5376
    time_embed_dim: int = 2688
    rope_inv_freq_len: int = 16
    norm_eps: float = 1e-5
    qk_norm_eps: float = 1e-5
    final_norm_eps: float = 1e-5
    sigma_shift_video: float = SHIFT_VIDEO
    sigma_shift_audio: float = SHIFT_AUDIO
    adaln_curve_grid: int | None = None  # curve-form files: rows of `adaln_t_table`
    gate_compress: bool = False  # VSA checkpoints' `to_gate_compress` layers (unused by dense attention)
    pdd_heads: int = 1  # output heads in `final_layer.video_out` / `audio_out` (distilled files: > 1)

    def __post_init__(self) -> None:
        if min(self.hidden_size, self.num_layers, self.num_attention_heads, self.attention_head_dim,
               self.ffn_hidden_size, self.latents_dim, self.audio_latents_dim, self.text_dim, self.pdd_heads) <= 0:
            raise MiniMaxH3ConfigError(f"MiniMax H3: impossible sizes {self}")
        if 6 * self.rope_inv_freq_len > self.attention_head_dim:
            raise MiniMaxH3ConfigError(f"MiniMax H3: {self.rope_inv_freq_len} RoPE frequencies per axis do not fit "
                                       f"a head of {self.attention_head_dim}")

    @property
    def video_patch_dim(self) -> int:
        return self.latents_dim * PATCH[0] * PATCH[1] * PATCH[2]

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` dict of this network (what packs read)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "pdd_heads"}
        out["image_model"] = "minimax_h3"
        out["patch_size"] = list(PATCH)
        return out

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MiniMaxH3Config":
        """Widths, depths, heads, the time embedding's form and the PDD bank from names and shapes."""
        def shape(name: str) -> tuple[int, ...]:
            key = prefix + name
            if key not in tensors:
                raise MiniMaxH3ConfigError(f"MiniMax H3: {key!r} is missing")
            return tuple(tensors[key].shape)

        hidden, patch_dim = shape("video_patch_proj.weight")
        if patch_dim % 4:
            raise MiniMaxH3ConfigError(f"MiniMax H3: video_patch_proj takes {patch_dim} values, not a 1x2x2 patch")
        audio_dim = shape("audio_patch_proj.weight")[1]
        text_dim = shape("condition_proj.weight")[1]
        head_dim = shape("blocks.0.attn.q_norm.weight")[0]
        qkv = shape("blocks.0.attn.qkv_proj.weight")[0]
        if qkv % (3 * head_dim):
            raise MiniMaxH3ConfigError(f"MiniMax H3: qkv_proj of {qkv} rows is not 3 x heads x {head_dim}")
        ffn = shape("blocks.0.mlp.fc2.weight")[1]
        adaln = shape("blocks.0.adaln_proj.linear.weight")
        if adaln[0] != 18 * hidden:
            raise MiniMaxH3ConfigError(f"MiniMax H3: adaln_proj gives {adaln[0]} values, expected 6 x 3 x {hidden}")
        curve = None
        if prefix + "adaln_t_table" in tensors:
            curve = shape("adaln_t_table")[0]
            t_in, t_hidden = 256, hidden
        else:
            t_hidden, t_in = shape("time_embedder.proj_in.weight")
        video_out = shape("final_layer.video_out.weight")[0]
        if video_out % patch_dim:
            raise MiniMaxH3ConfigError(f"MiniMax H3: final_layer.video_out of {video_out} rows is not a bank of "
                                       f"{patch_dim}-wide heads")
        audio_out = shape("final_layer.audio_out.weight")[0]
        if audio_out != (video_out // patch_dim) * audio_dim:
            raise MiniMaxH3ConfigError(f"MiniMax H3: final_layer.audio_out of {audio_out} rows does not match "
                                       f"{video_out // patch_dim} heads of {audio_dim}")
        depth = count_numbered(tensors, prefix, "blocks", MiniMaxH3ConfigError, "MiniMax H3")
        refiner = count_numbered(tensors, prefix, "token_refiner.blocks", MiniMaxH3ConfigError, "MiniMax H3")
        if depth == 0:
            raise MiniMaxH3ConfigError("MiniMax H3: no blocks.N in the file")
        return cls(hidden_size=hidden, num_layers=depth, token_refiner_num_layers=refiner,
                   num_attention_heads=qkv // (3 * head_dim), attention_head_dim=head_dim, ffn_hidden_size=ffn,
                   latents_dim=patch_dim // 4, audio_latents_dim=audio_dim, text_dim=text_dim,
                   timestep_input_dim=t_in, time_embed_hidden_size=t_hidden, time_embed_dim=adaln[1],
                   rope_inv_freq_len=shape("rope.inv_freq")[0], adaln_curve_grid=curve,
                   gate_compress=prefix + "blocks.0.attn.to_gate_compress.weight" in tensors,
                   pdd_heads=video_out // patch_dim)


class MiniMaxH3Model(nn.Module):
    """ComfyUI's `MiniMaxH3Model` (see the module doc). `forward(x, timestep, context, ...)` takes the
    packed `[B, 1, N]` latent with `latent_shapes` (or the [video, audio] pair) and returns the same
    layout; `minimax_payload` is the conditioning's (`conditions.py`)."""

    def __init__(self, config: MiniMaxH3Config, operations: Any = None, dtype: torch.dtype | None = None,
                 device: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        c = self.config = config
        self.hidden_size, self.latents_dim, self.patch_size = c.hidden_size, c.latents_dim, PATCH
        self.sigma_shift_video, self.sigma_shift_audio = c.sigma_shift_video, c.sigma_shift_audio
        self.video_patch_proj = ops.Linear(c.video_patch_dim, c.hidden_size, bias=True, dtype=torch.float32,
                                           device=device)
        self.audio_patch_proj = ops.Linear(c.audio_latents_dim, c.hidden_size, bias=True, dtype=torch.float32,
                                           device=device)
        self.condition_proj = ops.Linear(c.text_dim, c.hidden_size, bias=True, **factory)
        if c.adaln_curve_grid is not None:
            self.register_buffer("adaln_t_table", torch.empty(c.adaln_curve_grid, c.time_embed_dim,
                                                              dtype=torch.float32, device=device))
        else:
            self.time_embedder = TimeEmbedder(c.timestep_input_dim, c.time_embed_hidden_size, c.time_embed_dim, ops,
                                              device)
        self.rope = nn.Module()
        self.rope.register_buffer("inv_freq", torch.empty(c.rope_inv_freq_len, dtype=torch.float32, device=device))
        self.token_refiner = TokenRefiner(c, ops, factory)
        self.blocks = nn.ModuleList([DiTBlock(c, ops, factory) for _ in range(c.num_layers)])
        self.final_layer = FinalLayer(c, ops, factory, device)

    @classmethod
    def from_config(cls, config: MiniMaxH3Config, operations: Any = None) -> "MiniMaxH3Model":
        return cls(config, operations=operations)

    @property
    def dtype(self) -> torch.dtype:
        return self.condition_proj.weight.dtype

    def preprocess_text_embeds(self, text_states: torch.Tensor,
                               transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """[B, L, text_dim] Qwen states -> [B, L, hidden] (condition projection + token refiner); states
        already `hidden` wide are taken as refined."""
        if text_states.shape[-1] == self.hidden_size:
            return text_states
        if text_states.shape[-1] != self.config.text_dim:
            raise MiniMaxH3InputError(f"MiniMax H3: text states are {text_states.shape[-1]} wide, the network takes "
                                      f"{self.config.text_dim} (Qwen3-VL-32B: CLIPLoader type 'minimax')")
        return torch.stack([self.token_refiner(self.condition_proj(row), transformer_options) for row in text_states])

    def rope_angles(self, position_ids: torch.Tensor, device: Any) -> torch.Tensor:
        """[S, 3] positions -> [S, 3 F] angles (t's F frequencies, then h's, then w's)."""
        pos = position_ids.to(torch.float32).to(device)
        per_axis = pos.unsqueeze(-1) * self.rope.inv_freq.to(device=device, dtype=torch.float32).view(1, 1, -1)
        return per_axis.reshape(pos.shape[0], -1)

    def time_embedding(self, t_values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.config.adaln_curve_grid is None:
            return self.time_embedder(t_values).to(dtype)
        table = self.adaln_t_table.to(device=t_values.device, dtype=torch.float32)
        pos = t_values.clamp(0.0, 1.0) * (table.shape[0] - 1)
        low = pos.floor().long().clamp(max=table.shape[0] - 2)
        return torch.lerp(table[low], table[low + 1], (pos - low).unsqueeze(1))

    # --- the sampler's call ---

    def forward(self, x: Any, timestep: torch.Tensor, context: torch.Tensor, y: Any = None,
                transformer_options: dict[str, Any] | None = None, minimax_payload: Mapping[str, Any] | None = None,
                latent_shapes: list | None = None, control: Any = None, denoise_mask: torch.Tensor | None = None,
                audio_denoise_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        options = {} if transformer_options is None else transformer_options
        packed = isinstance(x, torch.Tensor)
        if packed:
            if latent_shapes is None or len(latent_shapes) != 2:
                raise MiniMaxH3InputError("MiniMax H3 samples the nested [video, audio] latent "
                                          "(EmptyMiniMaxH3LatentAV, MiniMaxH3ImageToVideo, ...), got a plain "
                                          f"latent of shape {tuple(x.shape)}")
            video, audio = unpack_latents(x, latent_shapes)
        else:
            video, audio = x
        payload = minimax_payload or {}
        scale = float(payload.get("audio_scale", 1.0))
        shift_v = float(options.get(SHIFT_VIDEO_OPTION, self.sigma_shift_video))
        shift_a = float(options.get(SHIFT_AUDIO_OPTION, self.sigma_shift_audio))
        timestep = torch.as_tensor(timestep).reshape(-1)
        outs_v, outs_a = [], []
        for i in range(video.shape[0]):
            sigma_v = float(timestep[min(i, timestep.shape[0] - 1)].float() / 1000.0)
            sigma_v = max(sigma_v, 1e-6)
            carried = audio[i:i + 1]
            net_audio, carry, sigma_a = carried, 1.0, time_shift_sigma(sigma_v, shift_v, shift_a)
            if scale != 1.0:
                carry = sigma_a / sigma_v  # the sampler's variable is audio * sigma_v / sigma_a
                net_audio = carried * carry
            v_out, a_out = self._forward(video[i:i + 1], net_audio, sigma_v, context[min(i, context.shape[0] - 1)],
                                         options, payload, shift_v, shift_a, denoise_mask, audio_denoise_mask)
            # masked rows were run at mask x sigma: their velocity scaled to the sampler's step
            if denoise_mask is not None:
                v_out = v_out * denoise_mask.to(v_out)
            if audio_denoise_mask is not None:
                a_out = a_out * audio_denoise_mask.to(a_out)
            if scale != 1.0:  # the velocity of the carried variable
                a_out = (1.0 - scale) * (carried * carry) + (1.0 + (scale - 1.0) * sigma_a) * a_out
            outs_v.append(v_out)
            outs_a.append(a_out)
        out_v, out_a = torch.cat(outs_v), torch.cat(outs_a)
        if packed:
            return pack_latents([out_v, out_a])[0]
        return [out_v, out_a]

    def _mod_segments(self, layout: PackedLayout, seg_t: dict[str, float], t_row: dict[float, int],
                      tags: list[int] | None, rows_t: dict[str, torch.Tensor]) -> list:
        segments = []
        for a, b, kind in layout.segments:
            base = t_row[seg_t[kind]] * 3
            if kind in rows_t:  # a masked target: one adaLN row per token
                segments.append((a, b, row_index(rows_t[kind], t_row) * 3 + SEGMENT_TAGS[kind]))
            elif kind == "text" and tags is not None:
                start = 0  # runs of equal tags (vision blocks are tagged video)
                for i in range(1, b - a + 1):
                    if i == b - a or tags[i] != tags[start]:
                        segments.append((a + start, a + i, base + int(tags[start])))
                        start = i
            else:
                segments.append((a, b, base + SEGMENT_TAGS[kind]))
        return segments

    def _cond_rows(self, latents: list, aug: float, seed: int, to_rows: Any, device: Any) -> torch.Tensor | None:
        rows = []
        for z in latents:
            if to_rows is patchify_video and (z.ndim != 5 or z.shape[-2] % 2 or z.shape[-1] % 2):
                raise MiniMaxH3InputError(f"MiniMax H3: a condition video latent {tuple(z.shape)} is not [1, 24, T, "
                                          "H, W] with even H and W (frames of sides that are multiples of 32)")
            r = to_rows(z.to(torch.float32))
            if aug < 1.0:  # each condition restarts the same seeded noise
                gen = torch.Generator("cpu").manual_seed(seed)
                noise = torch.randn(r.shape, generator=gen, dtype=torch.float32)
                r = aug * r + (1.0 - aug) * noise.to(r.device)
            rows.append(r.to(device))
        return torch.cat(rows) if rows else None

    def _forward(self, video_x: torch.Tensor, audio_x: torch.Tensor, sigma_v: float, context: torch.Tensor,
                 options: dict[str, Any], payload: Mapping[str, Any], shift_v: float, shift_a: float,
                 denoise_mask: torch.Tensor | None = None,
                 audio_denoise_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if video_x.ndim != 5 or video_x.shape[1] != self.latents_dim:
            raise MiniMaxH3InputError(f"MiniMax H3: the video latent is [1, {self.latents_dim}, T, H, W], got "
                                      f"{tuple(video_x.shape)}")
        if audio_x.ndim != 4 or audio_x.shape[1] != self.config.audio_latents_dim or audio_x.shape[2] != 2:
            raise MiniMaxH3InputError(f"MiniMax H3: the audio latent is [1, {self.config.audio_latents_dim}, 2, T], "
                                      f"got {tuple(audio_x.shape)}")
        orig_t, orig_h, orig_w = video_x.shape[2:]
        video_x = F.pad(video_x, (0, orig_w % 2, 0, orig_h % 2))  # to the 2x2 patch
        device = video_x.device
        dtype = context.dtype if context.is_floating_point() else self.dtype  # the compute dtype (ComfyUI's)
        latent_t, lat_h, lat_w = video_x.shape[2:]
        audio_t = audio_x.shape[-1]
        text = context.to(device)
        if text.shape[-1] != self.hidden_size:
            text = self.preprocess_text_embeds(text.unsqueeze(0).to(dtype), options)[0]
        text = text.to(dtype)
        signature = (text.shape[0], latent_t, lat_h, lat_w, audio_t)
        layout = payload.get("layout")
        if layout is None or layout.signature != signature:
            layout = build_layout(*signature, keyframes=payload.get("keyframes"), refs=payload.get("refs"))
        options[LAYOUT_OPTION] = layout

        t_v = 1.0 - sigma_v
        t_a = 1.0 - time_shift_sigma(sigma_v, shift_v, shift_a)
        vis_aug = float(payload.get("visual_cond_noise_aug", VISUAL_COND_TIMESTEP))
        aud_aug = float(payload.get("audio_cond_noise_aug", AUDIO_COND_TIMESTEP))
        seg_t = {"text": t_v, "video": t_v, "audio": t_a, "cond": max(t_v, vis_aug), "ref_img": max(t_v, vis_aug),
                 "cond_audio": max(t_a, aud_aug), "ref_audio": max(t_a, aud_aug)}
        # masked targets: a row kept by mask value m runs at sigma m x sigma_stream, so its label is
        # 1 - m sigma, no higher than its stream's condition label (a fully kept row is a condition row)
        rows_t: dict[str, torch.Tensor] = {}
        if denoise_mask is not None:
            m = mask_row_values(denoise_mask[0, 0].to(torch.float32).cpu(), latent_t, lat_h, lat_w)
            if m is not None:
                rows_t["video"] = (1.0 - m * sigma_v).clamp(max=max(t_v, VISUAL_COND_TIMESTEP))
        if audio_denoise_mask is not None:
            m = audio_denoise_mask[0, 0].to(torch.float32).cpu().reshape(-1)  # [2 T]: pack_audio's row order
            if not bool((m >= 1.0 - 1e-3).all()):
                rows_t["audio"] = (1.0 - m * (1.0 - t_a)).clamp(max=max(t_a, AUDIO_COND_TIMESTEP))
        for kind, values in list(rows_t.items()):
            if values.unique().numel() == 1:  # one label for the whole stream
                seg_t[kind] = float(values[0])
                del rows_t[kind]
        unique_t = sorted({t_v, t_a} | {seg_t[k] for _, _, k in layout.segments}
                          | {float(v) for values in rows_t.values() for v in values.unique().tolist()})
        t_row = {t: i for i, t in enumerate(unique_t)}
        tags = payload.get("text_token_tags")
        if tags is not None:
            tags = [int(v) for v in torch.as_tensor(tags).reshape(-1).tolist()]
            if len(tags) != text.shape[0]:
                raise MiniMaxH3InputError(f"MiniMax H3: {len(tags)} token tags for {text.shape[0]} text tokens")
        mod_segments = self._mod_segments(layout, seg_t, t_row, tags, rows_t)

        video_rows = patchify_video(video_x.to(torch.float32))
        audio_rows = pack_audio(audio_x.to(torch.float32))
        seed = int(payload.get("seed", 0) or 0)
        cond_video = self._cond_rows(list(payload.get("cond_video_latents", [])), vis_aug, seed, patchify_video, device)
        cond_audio = self._cond_rows(list(payload.get("cond_audio_latents", [])), aud_aug, seed + 1, pack_audio,
                                     device)
        all_video = video_rows if cond_video is None else torch.cat([cond_video, video_rows])
        all_audio = audio_rows if cond_audio is None else torch.cat([cond_audio, audio_rows])
        video_embed = self.video_patch_proj(all_video).to(dtype)
        audio_embed = self.audio_patch_proj(all_audio).to(dtype)

        h = torch.empty(layout.seq_len, self.hidden_size, dtype=dtype, device=device)
        voff = aoff = 0
        for a, b, kind in layout.segments:
            n = b - a
            if kind == "text":
                h[a:b] = text
            elif kind in AUDIO_KINDS:
                h[a:b] = audio_embed[aoff:aoff + n]
                aoff += n
            else:
                h[a:b] = video_embed[voff:voff + n]
                voff += n
        if voff != video_embed.shape[0] or aoff != audio_embed.shape[0]:
            raise MiniMaxH3LayoutError(f"MiniMax H3: the condition latents give {video_embed.shape[0]} video / "
                                       f"{audio_embed.shape[0]} audio rows, the layout holds {voff} / {aoff}")

        t_emb = self.time_embedding(torch.tensor(unique_t, dtype=torch.float32, device=device), dtype)
        angles = self.rope_angles(layout.position_ids, device)
        blocks_replace = options.get("patches_replace", {}).get("dit", {})
        # what a block patch needs beyond ComfyUI's args: the unpadded latent's shape (the Fun ControlNet's hint)
        video_shape = (video_x.shape[0], video_x.shape[1], orig_t, orig_h, orig_w)
        for i, block in enumerate(self.blocks):
            options["block_index"] = i
            if ("double_block", i) in blocks_replace:
                def original(args: dict[str, Any], block: nn.Module = block) -> dict[str, Any]:
                    return {"img": block(args["img"], args["t_emb"], args["mod_segments"], args["rope_freqs"],
                                         transformer_options=args["transformer_options"],
                                         attention=args.get("attention"))}

                h = blocks_replace[("double_block", i)](
                    {"img": h, "t_emb": t_emb, "mod_segments": mod_segments, "rope_freqs": angles, "layout": layout,
                     "transformer_options": options, "sigma": sigma_v, "video_shape": video_shape},
                    {"original_block": original})["img"]
            else:
                h = block(h, t_emb, mod_segments, angles, transformer_options=options)

        va, vb = layout.segment("video")
        aa, ab = layout.segment("audio")
        v_row = row_index(rows_t["video"], t_row) if "video" in rows_t else t_row[seg_t["video"]]
        a_row = row_index(rows_t["audio"], t_row) if "audio" in rows_t else t_row[seg_t["audio"]]
        v, a = self.final_layer(h, t_emb, (va, vb, v_row), (aa, ab, a_row), sigma_v,
                                options.get("sample_sigmas"), (shift_v, shift_a))
        video_out = unpatchify_video(v, latent_t, lat_h // 2, lat_w // 2, self.latents_dim)
        video_out = video_out[:, :, :orig_t, :orig_h, :orig_w]
        return -video_out.to(video_x.dtype), -unpack_audio(a).to(audio_x.dtype)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's native names (`diffusion_model.blocks.0.attn.qkv_proj`)
        and the kohya spelling (`comfy_core.families.lora_keys.native_key_map`); no diffusers layout exists."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(names)
