"""The LTX-2 joint audio-video diffusion transformer and `LTXAVConfig` read from weights.

Architecture of Lightricks' LTX-2 (HaCohen et al. 2026, "LTX-2: Efficient Joint Audio-Visual
Foundation Model", arXiv 2601.03233; github.com/Lightricks/LTX-2 `ltx_core/model/transformer`):
two token streams go through the same stack of blocks, the video latent `[B, 128, T, H, W]` (one
token per latent pixel) and the audio latent `[B, 8, T_a, 16]` (one token per latent frame, the
8 x 16 channels-by-mel-bins flattened). Each block runs, per stream, an adaLN-modulated
self-attention (RMS norm, RoPE), a text cross-attention, then cross-modal attention both ways
(audio -> video: video queries, audio keys / values; video -> audio the reverse), each side
modulated by its own 5-row table (scale / shift for a2v, scale / shift for v2a, a gate) plus the
timestep rows of four small adaLN networks, and finally an adaLN-modulated tanh-GELU feed-forward.

Constructor arguments, state-dict names, the forward and the patch points are those of ComfyUI's
`comfy/ldm/lightricks/av_model.py` `LTXAVModel` (over `model.py`'s `LTXBaseModel`); written here.
Behaviour:

- `x` is `[video, audio]` (ComfyUI's nested latent unbound); an empty or missing audio latent
  skips the audio stream and the result is the video alone. `timestep` is the sigma (0..1), or
  `(video, audio)` sigmas, each `[B]` or per token `[B, N]` (a denoise mask's, ComfyUI's
  `model_base.LTXAV.process_timestep`), scaled by `timestep_scale_multiplier` (1000).
- Per-frame timesteps: when every token of a latent frame shares its timestep (no spatial
  denoise mask), the video adaLN runs once per frame and is broadcast over the frame's tokens.
- `cross_attention_adaln` (LTX-2.3): the block table has 9 rows, rows 6..8 modulating the text
  cross-attention's query (shift, scale, gate) and a 2-row `prompt_scale_shift_table` plus the
  `prompt_adaln_single` network (fed the largest timestep of the sample) modulating the text.
  Without it the text cross-attention sees the RMS-normed stream, ungated.
- `apply_gated_attention`: every attention multiplies each head's output by `2 sigmoid(g)`,
  `g = to_gate_logits(query input)`.
- Cross-modal timesteps: the scale / shift networks see each stream's own timestep; the a2v gate
  sees the audio's largest timestep, the v2a gate the video's, each times
  `av_ca_timestep_scale_multiplier / timestep_scale_multiplier`.
- RoPE (`rope.py`): video positions are pixel [start, end) spans (VAE factors 8, 32, 32, the
  causal first frame when `causal_temporal_positioning`, time in seconds at `frame_rate`), audio
  positions the latent frames' spans in seconds (mel hop 160 at 16 kHz, 4 mel frames per latent,
  causal); `rope_type` "interleaved" / "split", `frequencies_precision` "float32" / "float64",
  `use_middle_indices_grid` (middle of the span, else the start). The cross-modal attention uses
  a time-only RoPE of width `audio_cross_attention_dim` at the middle of the spans, over
  `max(max_pos[0], audio_max_pos[0])`.
- `ref_audio` (ID-LoRA, LTXVReferenceAudio's conditioning): reference audio tokens prepended to
  the audio stream at timestep 0 and at negative times (ending one latent frame before t = 0);
  their outputs are dropped.
- `keyframes_abs_pos_embedding` (when the file has it) is added to the video tokens whose latent
  frame stands for one pixel frame after the input projection: the first frame (time start 0)
  and the generated keyframes (`generated_keyframes`, LTXVAddGeneratedKeyframes' record: latent
  frames `[first_latent_frame, first_latent_frame + num_keyframes)`), as diffusers'
  `video_keyframes_mask` marks "causal first frame, generated keyframe slots".
- The context is the text encoder's output after the connectors (`connector.py`, run by
  `preprocess_text_embeds`): `[B, M, 2 * caption_channels]`, video half then audio half, each
  through its caption projection.
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` replaces block i with
  ComfyUI's argument names (`img` = (video, audio), `v_context`, `a_context`, `v_timestep`, ...);
  `stg_self_attn_blocks` turns those blocks' self-attention into a pass-through of the values;
  `run_vx` / `run_ax` / `a2v_cross_attn` / `v2a_cross_attn` switch streams and directions off.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.families.ltx2.connector import build_connectors
from comfy_core.families.ltx2.latent import (AUDIO_BINS, AUDIO_CHANNELS, AUDIO_DOWNSAMPLE, AUDIO_HOP, AUDIO_RATE,
                                             LTXAVInputError, audio_positions,
                                             pack_latents, patchify_audio, unpack_latents, unpatchify_audio,
                                             video_positions)
from comfy_core.families.ltx2.layers import AdaLayerNormSingle, Attention, CaptionProjection, FeedForward
from comfy_core.families.ltx2.rope import RopeTable, rope_table
from comfy_core.families.ltxv.dit import rms_norm
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

NUM_HEADS = 32  # ComfyUI's model_detection: attention_head_dim = width // 32


class LTXAVConfigError(ValueError):
    """The LTX-2 weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class LTXAVConfig:
    """ComfyUI's LTXAV `unet_config` entries (its `LTXAVModel` defaults)."""

    in_channels: int = 128
    audio_in_channels: int = 128
    cross_attention_dim: int = 4096
    audio_cross_attention_dim: int = 2048
    attention_head_dim: int = 128
    audio_attention_head_dim: int = 64
    num_attention_heads: int = NUM_HEADS
    audio_num_attention_heads: int = NUM_HEADS
    caption_channels: int = 3840
    num_layers: int = 48
    positional_embedding_theta: float = 10000.0
    positional_embedding_max_pos: tuple[int, ...] = (20, 2048, 2048)
    audio_positional_embedding_max_pos: tuple[int, ...] = (20,)
    causal_temporal_positioning: bool = False
    vae_scale_factors: tuple[int, int, int] = (8, 32, 32)
    use_middle_indices_grid: bool = False
    timestep_scale_multiplier: float = 1000.0
    av_ca_timestep_scale_multiplier: float = 1.0
    apply_gated_attention: bool = False
    cross_attention_adaln: bool = False
    ff_bias: bool = True
    audio_ff_bias: bool = True
    use_prompt_adaln_single: bool = True
    use_keyframes_abs_pos_embedding: bool = False
    caption_proj_before_connector: bool = False
    rope_type: str = "interleaved"
    frequencies_precision: str = "float32"
    connector: dict[str, Any] = field(default_factory=dict)  # Embeddings1DConnector options (connector.py)

    def __post_init__(self) -> None:
        for name in ("positional_embedding_max_pos", "audio_positional_embedding_max_pos", "vae_scale_factors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.rope_type not in ("interleaved", "split"):
            raise LTXAVConfigError(f"LTX-2: rope_type {self.rope_type!r} is not 'interleaved' or 'split'")
        if self.frequencies_precision not in ("float32", "float64"):
            raise LTXAVConfigError(f"LTX-2: frequencies_precision {self.frequencies_precision!r} is not float32 / float64")
        if min(self.in_channels, self.audio_in_channels, self.attention_head_dim, self.audio_attention_head_dim,
               self.num_attention_heads, self.audio_num_attention_heads, self.num_layers) <= 0:
            raise LTXAVConfigError(f"LTX-2: impossible sizes {self}")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def audio_inner_dim(self) -> int:
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @property
    def context_width(self) -> int:
        """The width of the context the blocks get (the connectors' output, both streams)."""
        if self.caption_proj_before_connector:
            return self.cross_attention_dim + self.audio_cross_attention_dim
        return 2 * self.caption_channels

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "",
                            metadata: Mapping[str, str] | None = None) -> "LTXAVConfig":
        """Widths, depth and switches from names and shapes (32 heads per stream, as ComfyUI's
        model_detection assumes), then the file's `config` metadata `transformer` entries (what
        names and shapes cannot show: RoPE layout and precision, middle positions, causal
        positions, the cross-modal gate multiplier), as ComfyUI's `detect_unet_config` merges them."""
        shape = shape_reader(tensors, prefix, LTXAVConfigError, "LTX-2")
        names = set(tensors)
        inner, in_channels = shape("patchify_proj.weight")
        audio_inner, audio_in = shape("audio_patchify_proj.weight")
        depth = count_numbered(tensors, prefix, "transformer_blocks", LTXAVConfigError, "LTX-2")
        if depth == 0:
            raise LTXAVConfigError(f"LTX-2: no {prefix}transformer_blocks.N found")
        k_out, cross = shape("transformer_blocks.0.attn2.to_k.weight")
        a_out, audio_cross = shape("transformer_blocks.0.audio_attn2.to_k.weight")
        if k_out != inner or inner % NUM_HEADS or audio_inner % NUM_HEADS or a_out != audio_inner:
            raise LTXAVConfigError(f"LTX-2: widths {inner} / {audio_inner} are not 32 heads wide")
        rows = shape("transformer_blocks.0.scale_shift_table")[0]
        if rows not in (6, 9):
            raise LTXAVConfigError(f"LTX-2: a block table of {rows} rows (6 or 9 expected)")
        if shape("adaln_single.linear.weight")[0] != rows * inner:
            raise LTXAVConfigError("LTX-2: adaln_single.linear does not match the block tables")
        caption = 3840
        if prefix + "caption_projection.linear_1.weight" in names:
            caption = shape("caption_projection.linear_1.weight")[1]
        # LTX-2.3: no caption projection in the network (ComfyUI's caption_proj_before_connector
        # with an identity projection); the text encoder's projection gives each stream its width.
        before_connector = prefix + "caption_projection.linear_1.weight" not in names
        options: dict[str, Any] = {}
        if metadata and "config" in metadata:
            try:
                options = dict(json.loads(metadata["config"]).get("transformer", {}))
            except (ValueError, AttributeError) as error:
                raise LTXAVConfigError(f"LTX-2: the file's config metadata is not JSON: {error}") from error
        known = {f.name for f in fields(cls)}
        connector = {k: v for k, v in options.items() if k.startswith(("connector_", "audio_connector_"))}
        extra = {k: v for k, v in options.items() if k in known and k != "connector"}
        found = dict(
            in_channels=in_channels, audio_in_channels=audio_in, cross_attention_dim=cross,
            audio_cross_attention_dim=audio_cross, attention_head_dim=inner // NUM_HEADS,
            audio_attention_head_dim=audio_inner // NUM_HEADS, caption_channels=caption, num_layers=depth,
            cross_attention_adaln=rows == 9,
            apply_gated_attention=prefix + "transformer_blocks.0.attn1.to_gate_logits.weight" in names,
            ff_bias=prefix + "transformer_blocks.0.ff.net.0.proj.bias" in names,
            audio_ff_bias=prefix + "transformer_blocks.0.audio_ff.net.0.proj.bias" in names,
            use_prompt_adaln_single=prefix + "prompt_adaln_single.linear.weight" in names or rows == 6,
            use_keyframes_abs_pos_embedding=prefix + "keyframes_abs_pos_embedding" in names,
            caption_proj_before_connector=before_connector)
        if options.get("caption_projection_first_linear"):
            raise LTXAVConfigError("LTX-2: caption_projection_first_linear (a one-linear caption projection "
                                   "before the connectors) is not built here")
        extra = {k: v for k, v in extra.items() if k not in found}
        return cls(**{**found, **extra}, connector={**connector, **_connector_shapes(tensors, prefix, connector)})

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (model_detection's dict for "ltxav" merged with the metadata)."""
        out = {k: v for k, v in asdict(self).items() if k != "connector"}
        out.update(self.connector)
        for key in ("positional_embedding_max_pos", "audio_positional_embedding_max_pos", "vae_scale_factors"):
            out[key] = list(out[key])
        out["image_model"] = "ltxav"
        return out


def _connector_shapes(tensors: Mapping[str, Any], prefix: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The connectors' depth, registers, gates and head widths from the weights (their head count
    from the metadata, else 30: q/k norms span every head)."""
    from comfy_core.families.ltx2.connector import CONNECTOR_DEFAULTS

    shape = shape_reader(tensors, prefix, LTXAVConfigError, "LTX-2")
    names = set(tensors)
    found: dict[str, Any] = {}
    for side, key in (("video", "connector_"), ("audio", "audio_connector_")):
        base = f"{side}_embeddings_connector."
        if prefix + base + "transformer_1d_blocks.0.attn1.to_q.weight" not in names:
            raise LTXAVConfigError(f"LTX-2: no {prefix}{base}transformer_1d_blocks.0 (the text connector) found")
        width = shape(base + "transformer_1d_blocks.0.attn1.to_q.weight")[0]
        heads = int(options.get(key + "num_attention_heads", options.get("connector_num_attention_heads",
                                                                         CONNECTOR_DEFAULTS["connector_num_attention_heads"])))
        if width % heads:
            raise LTXAVConfigError(f"LTX-2: a {side} connector {width} wide is not {heads} heads wide")
        found[key + "attention_head_dim"] = width // heads
        found[key + "num_attention_heads"] = heads
        if side == "video":
            found["connector_num_layers"] = count_numbered(tensors, prefix + base, "transformer_1d_blocks",
                                                           LTXAVConfigError, "LTX-2")
            registers = prefix + base + "learnable_registers"
            found["connector_num_learnable_registers"] = shape(base + "learnable_registers")[0] if registers in names else None
            found["connector_apply_gated_attention"] = (
                prefix + base + "transformer_1d_blocks.0.attn1.to_gate_logits.weight" in names)
    return found


# --- pieces ---

def _rows(table: torch.Tensor, timestep: torch.Tensor, batch: int, select: slice = slice(None)) -> tuple[torch.Tensor, ...]:
    """A block table `[R, dim]` plus the timestep rows `[B, 1 or N, R * dim]` -> R (selected) `[B, 1 or N, dim]`."""
    count = table.shape[0]
    values = (table[select][None, None].to(device=timestep.device, dtype=timestep.dtype)
              + timestep.reshape(batch, timestep.shape[1], count, -1)[:, :, select])
    return values.unbind(dim=2)


class BasicAVTransformerBlock(nn.Module):
    """One joint block (see the module doc); ComfyUI's `BasicAVTransformerBlock` names."""

    def __init__(self, v_dim: int, a_dim: int, v_heads: int, a_heads: int, vd_head: int, ad_head: int,
                 v_context_dim: int, a_context_dim: int, gated: bool, cross_attention_adaln: bool, ff_bias: bool,
                 audio_ff_bias: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.cross_attention_adaln = cross_attention_adaln
        self.attn1 = Attention(v_dim, None, v_heads, vd_head, gated, ops, factory)
        self.audio_attn1 = Attention(a_dim, None, a_heads, ad_head, gated, ops, factory)
        self.attn2 = Attention(v_dim, v_context_dim, v_heads, vd_head, gated, ops, factory)
        self.audio_attn2 = Attention(a_dim, a_context_dim, a_heads, ad_head, gated, ops, factory)
        self.audio_to_video_attn = Attention(v_dim, a_dim, a_heads, ad_head, gated, ops, factory)
        self.video_to_audio_attn = Attention(a_dim, v_dim, a_heads, ad_head, gated, ops, factory)
        self.ff = FeedForward(v_dim, ops, factory, bias=ff_bias)
        self.audio_ff = FeedForward(a_dim, ops, factory, bias=audio_ff_bias)
        rows = 9 if cross_attention_adaln else 6
        self.scale_shift_table = nn.Parameter(torch.empty(rows, v_dim, **factory))
        self.audio_scale_shift_table = nn.Parameter(torch.empty(rows, a_dim, **factory))
        if cross_attention_adaln:
            self.prompt_scale_shift_table = nn.Parameter(torch.empty(2, v_dim, **factory))
            self.audio_prompt_scale_shift_table = nn.Parameter(torch.empty(2, a_dim, **factory))
        self.scale_shift_table_a2v_ca_audio = nn.Parameter(torch.empty(5, a_dim, **factory))
        self.scale_shift_table_a2v_ca_video = nn.Parameter(torch.empty(5, v_dim, **factory))

    def _text(self, x: torch.Tensor, context: torch.Tensor, attn: Attention, table: torch.Tensor,
              prompt_table: torch.Tensor | None, timestep: torch.Tensor, prompt_timestep: torch.Tensor | None,
              mask: torch.Tensor | None, options: dict[str, Any]) -> torch.Tensor:
        if not self.cross_attention_adaln:
            return attn(rms_norm(x), context=context, mask=mask, transformer_options=options)
        shift_q, scale_q, gate = _rows(table, timestep, x.shape[0], slice(6, 9))
        if prompt_timestep is None:  # use_prompt_adaln_single off: the table alone
            shift_kv, scale_kv = prompt_table.to(device=x.device, dtype=x.dtype)[None, None].unbind(dim=2)
        else:
            shift_kv, scale_kv = _rows(prompt_table, prompt_timestep, x.shape[0])
        query = rms_norm(x) * (1 + scale_q) + shift_q
        return attn(query, context=context * (1 + scale_kv) + shift_kv, mask=mask, transformer_options=options) * gate

    def forward(self, x: Sequence[torch.Tensor], v_context: torch.Tensor | None = None,
                a_context: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                v_timestep: torch.Tensor | None = None, a_timestep: torch.Tensor | None = None,
                v_pe: RopeTable | None = None, a_pe: RopeTable | None = None, v_cross_pe: RopeTable | None = None,
                a_cross_pe: RopeTable | None = None, v_cross_scale_shift_timestep: torch.Tensor | None = None,
                a_cross_scale_shift_timestep: torch.Tensor | None = None,
                v_cross_gate_timestep: torch.Tensor | None = None, a_cross_gate_timestep: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None, self_attention_mask: torch.Tensor | None = None,
                v_prompt_timestep: torch.Tensor | None = None,
                a_prompt_timestep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        options = transformer_options or {}
        vx, ax = x
        run_vx = options.get("run_vx", True)
        run_ax = options.get("run_ax", True) and ax.numel() > 0
        run_a2v = run_vx and options.get("a2v_cross_attn", True) and ax.numel() > 0
        run_v2a = run_ax and options.get("v2a_cross_attn", True)
        b = vx.shape[0]
        if run_vx:
            shift, scale, gate = _rows(self.scale_shift_table, v_timestep, b, slice(0, 3))
            vx = vx + self.attn1(rms_norm(vx) * (1 + scale) + shift, pe=v_pe, mask=self_attention_mask,
                                 transformer_options=options) * gate
            vx = vx + self._text(vx, v_context, self.attn2, self.scale_shift_table,
                                 getattr(self, "prompt_scale_shift_table", None), v_timestep, v_prompt_timestep,
                                 attention_mask, options)
        if run_ax:
            shift, scale, gate = _rows(self.audio_scale_shift_table, a_timestep, b, slice(0, 3))
            ax = ax + self.audio_attn1(rms_norm(ax) * (1 + scale) + shift, pe=a_pe, transformer_options=options) * gate
            ax = ax + self._text(ax, a_context, self.audio_attn2, self.audio_scale_shift_table,
                                 getattr(self, "audio_prompt_scale_shift_table", None), a_timestep, a_prompt_timestep,
                                 attention_mask, options)
        if run_a2v or run_v2a:
            a_scale_a2v, a_shift_a2v, a_scale_v2a, a_shift_v2a = _rows(
                self.scale_shift_table_a2v_ca_audio[:4], a_cross_scale_shift_timestep, b)
            v_scale_a2v, v_shift_a2v, v_scale_v2a, v_shift_v2a = _rows(
                self.scale_shift_table_a2v_ca_video[:4], v_cross_scale_shift_timestep, b)
            a_norm, v_norm = rms_norm(ax), rms_norm(vx)
            if run_a2v:
                out = self.audio_to_video_attn(v_norm * (1 + v_scale_a2v) + v_shift_a2v,
                                               context=a_norm * (1 + a_scale_a2v) + a_shift_a2v,
                                               pe=v_cross_pe, k_pe=a_cross_pe, transformer_options=options)
                vx = vx + out * _rows(self.scale_shift_table_a2v_ca_video[4:], v_cross_gate_timestep, b)[0]
            if run_v2a:
                out = self.video_to_audio_attn(a_norm * (1 + a_scale_v2a) + a_shift_v2a,
                                               context=v_norm * (1 + v_scale_v2a) + v_shift_v2a,
                                               pe=a_cross_pe, k_pe=v_cross_pe, transformer_options=options)
                ax = ax + out * _rows(self.scale_shift_table_a2v_ca_audio[4:], a_cross_gate_timestep, b)[0]
        if run_vx:
            shift, scale, gate = _rows(self.scale_shift_table, v_timestep, b, slice(3, 6))
            vx = vx + self.ff(rms_norm(vx) * (1 + scale) + shift) * gate
        if run_ax:
            shift, scale, gate = _rows(self.audio_scale_shift_table, a_timestep, b, slice(3, 6))
            ax = ax + self.audio_ff(rms_norm(ax) * (1 + scale) + shift) * gate
        return vx, ax


# --- the network ---

_ROPE_THETA = 10000.0  # ComfyUI's _precompute_freqs_cis default, which its LTX models never override


class LTXAVModel(nn.Module):
    """ComfyUI's `comfy.ldm.lightricks.av_model.LTXAVModel` (see the module doc)."""

    def __init__(self, dtype: Any = None, device: Any = None, operations: Any = None, **kwargs: Any) -> None:
        super().__init__()
        known = {f.name for f in fields(LTXAVConfig)}
        connector = {k: v for k, v in kwargs.items() if k.startswith(("connector_", "audio_connector_"))}
        ignored = {"image_model", "caption_projection_first_linear", "attn_precision"}
        unknown = sorted(k for k in kwargs if k not in known and k not in connector and k not in ignored)
        if unknown:
            raise LTXAVConfigError(f"LTX-2: unknown LTXAVModel options {unknown}")
        if kwargs.get("caption_projection_first_linear", False):
            raise LTXAVConfigError("LTX-2: caption_projection_first_linear (a one-linear caption projection "
                                   "before the connectors) is not built here")
        config = LTXAVConfig(**{k: v for k, v in kwargs.items() if k in known and k != "connector"},
                             connector={**kwargs.get("connector", {}), **connector})
        self.config = config
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.in_channels = self.out_channels = config.in_channels
        self.inner_dim, self.audio_inner_dim = config.inner_dim, config.audio_inner_dim
        self.num_attention_heads, self.audio_num_attention_heads = config.num_attention_heads, config.audio_num_attention_heads
        self.cross_attention_dim, self.audio_cross_attention_dim = config.cross_attention_dim, config.audio_cross_attention_dim
        self.caption_channels = config.caption_channels
        self.vae_scale_factors = config.vae_scale_factors
        self.causal_temporal_positioning = config.causal_temporal_positioning
        self.num_audio_channels, self.audio_frequency_bins = AUDIO_CHANNELS, AUDIO_BINS
        rows = 9 if config.cross_attention_adaln else 6
        dim, a_dim = config.inner_dim, config.audio_inner_dim
        self.patchify_proj = ops.Linear(config.in_channels, dim, **factory)
        self.audio_patchify_proj = ops.Linear(config.audio_in_channels, a_dim, **factory)
        self.keyframes_abs_pos_embedding = (nn.Parameter(torch.zeros(1, dim, **factory))
                                            if config.use_keyframes_abs_pos_embedding else None)
        self.adaln_single = AdaLayerNormSingle(dim, ops, factory, rows=rows)
        self.audio_adaln_single = AdaLayerNormSingle(a_dim, ops, factory, rows=rows)
        with_prompt = config.cross_attention_adaln and config.use_prompt_adaln_single
        self.prompt_adaln_single = AdaLayerNormSingle(dim, ops, factory, rows=2) if with_prompt else None
        self.audio_prompt_adaln_single = AdaLayerNormSingle(a_dim, ops, factory, rows=2) if with_prompt else None
        self.av_ca_video_scale_shift_adaln_single = AdaLayerNormSingle(dim, ops, factory, rows=4)
        self.av_ca_a2v_gate_adaln_single = AdaLayerNormSingle(dim, ops, factory, rows=1)
        self.av_ca_audio_scale_shift_adaln_single = AdaLayerNormSingle(a_dim, ops, factory, rows=4)
        self.av_ca_v2a_gate_adaln_single = AdaLayerNormSingle(a_dim, ops, factory, rows=1)
        if config.caption_proj_before_connector:  # LTX-2.3: identity (no weights), as ComfyUI builds it
            self.caption_projection = self.audio_caption_projection = None
        else:
            self.caption_projection = CaptionProjection(config.caption_channels, dim, ops, factory)
            self.audio_caption_projection = CaptionProjection(config.caption_channels, a_dim, ops, factory)
        self.video_embeddings_connector, self.audio_embeddings_connector = build_connectors(config, ops, factory)
        self.transformer_blocks = nn.ModuleList([
            BasicAVTransformerBlock(dim, a_dim, config.num_attention_heads, config.audio_num_attention_heads,
                                    config.attention_head_dim, config.audio_attention_head_dim,
                                    config.cross_attention_dim, config.audio_cross_attention_dim,
                                    config.apply_gated_attention, config.cross_attention_adaln, config.ff_bias,
                                    config.audio_ff_bias, ops, factory) for _ in range(config.num_layers)])
        self.scale_shift_table = nn.Parameter(torch.empty(2, dim, **factory))
        self.norm_out = ops.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **factory)
        self.proj_out = ops.Linear(dim, config.in_channels, **factory)
        self.audio_scale_shift_table = nn.Parameter(torch.empty(2, a_dim, **factory))
        self.audio_norm_out = ops.LayerNorm(a_dim, elementwise_affine=False, eps=1e-6, **factory)
        self.audio_proj_out = ops.Linear(a_dim, config.audio_in_channels, **factory)

    @classmethod
    def from_config(cls, config: LTXAVConfig, operations: Any = None, **factory: Any) -> "LTXAVModel":
        options = {f.name: getattr(config, f.name) for f in fields(config)}
        return cls(operations=operations, **options, **factory)

    # --- text ---

    def preprocess_text_embeds(self, context: torch.Tensor, unprocessed: bool = False) -> torch.Tensor:
        """The text encoder's states -> the connectors' `[B, M', video + audio width]`.

        States `[B, M, caption]` go to both connectors; LTX-2.3's `[B, M, cross + audio cross]`
        (one projection per stream) are split at `cross_attention_dim` first. States already as
        wide as the connectors' output (`2 * caption`, or `cross + audio cross`) pass unless
        `unprocessed` (ComfyUI's `LTXAVModel.preprocess_text_embeds`)."""
        split = self.cross_attention_dim + self.audio_cross_attention_dim
        if not unprocessed and context.shape[-1] in (split, 2 * self.caption_channels):
            return context
        if context.shape[-1] == split:
            video_in, audio_in = context.split([self.cross_attention_dim, self.audio_cross_attention_dim], dim=-1)
        elif context.shape[-1] == self.caption_channels:
            video_in = audio_in = context
        else:
            raise LTXAVInputError(f"LTX-2: text states are {context.shape[-1]} wide, expected {self.caption_channels} "
                                  f"or {split}")
        video = self.video_embeddings_connector(video_in)[0]
        audio = self.audio_embeddings_connector(audio_in)[0]
        return torch.cat((video, audio), dim=-1)

    # --- forward ---

    def forward(self, x: Any, timestep: Any, context: torch.Tensor, attention_mask: torch.Tensor | None = None,
                frame_rate: Any = 25, transformer_options: dict[str, Any] | None = None,
                keyframe_idxs: torch.Tensor | None = None, denoise_mask: torch.Tensor | None = None,
                audio_denoise_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """x `[video [B, C, T, H, W], audio [B, 8, T_a, 16]]` (or the video alone), timestep
        sigma(s), context `[B, M, 2 * caption]` -> the velocities in x's layout."""
        options = transformer_options if transformer_options is not None else {}
        shapes = kwargs.get("latent_shapes")
        if shapes is not None and isinstance(x, torch.Tensor):  # a sampler's packed [video, audio]
            out = self.forward(unpack_latents(x, shapes), timestep, context, attention_mask, frame_rate,
                               transformer_options, keyframe_idxs, denoise_mask, audio_denoise_mask,
                               ref_audio=kwargs.get("ref_audio"),
                               generated_keyframes=kwargs.get("generated_keyframes"))
            return pack_latents(out if isinstance(out, list) else [out])[0]
        vx, ax = self._split(x)
        b, c, f, h, w = vx.shape
        dtype = vx.dtype
        v_t, a_t = (timestep if isinstance(timestep, (tuple, list)) and len(timestep) == 2 else (timestep, timestep))
        v_t = self._per_token(v_t, denoise_mask, (f, h, w), b)
        a_t = self._per_token(a_t, audio_denoise_mask, (ax.shape[2],), b, audio=True)
        v_pos = video_positions(f, h, w, b, self.vae_scale_factors, self.causal_temporal_positioning, vx.device)
        guides = 0
        if keyframe_idxs is not None and keyframe_idxs.shape[2] > 0:
            guides = self._place_keyframes(v_pos, keyframe_idxs, denoise_mask)
        a_pos = audio_positions(ax.shape[2], b, vx.device)
        a_in = patchify_audio(ax)  # [B, T_a, 128]
        ref = kwargs.get("ref_audio")
        ref_len = 0
        if ref is not None and ax.numel() > 0:  # ID-LoRA: the reference audio's tokens go first
            a_in, a_pos, a_t, ref_len = self._with_reference_audio(ref, a_in, a_pos, a_t, b)
        v_tokens = self.patchify_proj(vx.flatten(2).transpose(1, 2))
        if self.keyframes_abs_pos_embedding is not None:
            marker = v_pos[:, 0, :, 0] == 0
            if guides:
                marker[:, -guides:] = False
            generated = kwargs.get("generated_keyframes")
            if generated:  # LTXVAddGeneratedKeyframes' slots: each latent frame is one pixel frame
                first = int(generated["first_latent_frame"]) * h * w
                marker[:, first:first + int(generated["num_keyframes"]) * h * w] = True
            v_tokens = v_tokens + marker.unsqueeze(-1).to(v_tokens.dtype) * self.keyframes_abs_pos_embedding.to(v_tokens)
        a_tokens = self.audio_patchify_proj(a_in)
        times = self._timesteps(v_t, a_t, b, h * w, dtype)
        v_context, a_context = self._context(context, b)
        if attention_mask is not None and not torch.is_floating_point(attention_mask):
            attention_mask = ((attention_mask - 1).to(dtype).reshape(attention_mask.shape[0], 1, -1, attention_mask.shape[-1])
                              * torch.finfo(dtype).max)
        pe = self._positions(v_pos, a_pos, frame_rate, dtype)
        vx_out, ax_out = self._blocks(v_tokens, a_tokens, v_context, a_context, attention_mask, times, pe, options)
        video = self._head(vx_out, times["v_embedded"], self.scale_shift_table, self.norm_out, self.proj_out)
        video = video.transpose(1, 2).reshape(b, c, f, h, w)
        if ax.numel() == 0:
            return video
        audio = self._head(ax_out[:, ref_len:], times["a_embedded"][:, ref_len:], self.audio_scale_shift_table,
                           self.audio_norm_out, self.audio_proj_out)
        return [video, unpatchify_audio(audio, self.num_audio_channels, self.audio_frequency_bins)]

    def _split(self, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(x, torch.Tensor):
            vx, ax = x, None
        else:
            vx, ax = x[0], (x[1] if len(x) > 1 else None)
        if vx.ndim != 5 or vx.shape[1] != self.in_channels:
            raise LTXAVInputError(f"LTX-2: expected a video latent [B, {self.in_channels}, T, H, W], got {tuple(vx.shape)}")
        if ax is None:
            ax = torch.zeros((vx.shape[0], AUDIO_CHANNELS, 0, AUDIO_BINS), device=vx.device, dtype=vx.dtype)
        if ax.ndim != 4 or ax.shape[1] * ax.shape[3] != self.config.audio_in_channels:
            raise LTXAVInputError(f"LTX-2: expected an audio latent [B, C, T, F] with C*F = "
                                  f"{self.config.audio_in_channels}, got {tuple(ax.shape)}")
        return vx, ax

    @staticmethod
    def _per_token(t: torch.Tensor, mask: torch.Tensor | None, grid: tuple[int, ...], batch: int,
                   audio: bool = False) -> torch.Tensor:
        """Sigma `[B]` / `[B, N]` -> `[B, 1]` or `[B, N]`; a denoise mask makes it per token."""
        if not isinstance(t, torch.Tensor):
            t = torch.tensor([float(t)])
        if t.ndim >= 2 or mask is None:
            return t.reshape(t.shape[0] if t.ndim else 1, -1).expand(batch, -1) if t.shape[0] != batch else t.reshape(batch, -1)
        mask = mask.to(device=t.device, dtype=t.dtype)
        if mask.ndim != len(grid) + (3 if audio else 2):  # audio masks are [B, C, T, F]
            raise LTXAVInputError(f"LTX-2: a denoise mask of shape {tuple(mask.shape)} for a latent grid {grid}")
        mask = mask[:, :1, :, :1] if audio else mask[:, :1]
        mask = mask.expand(batch, 1, *grid) if not audio else mask.expand(batch, 1, grid[0], 1)
        return (mask * t.view(-1, *([1] * (mask.ndim - 1)))).flatten(1)

    def _place_keyframes(self, v_pos: torch.Tensor, keyframe_idxs: torch.Tensor, denoise_mask: torch.Tensor | None) -> int:
        """Guide tokens (LTXVAddGuide, appended at the end of the latent) take the recorded pixel spans."""
        if denoise_mask is not None and bool((denoise_mask < 0).any()):
            raise LTXAVInputError("LTX-2: dilated guides (negative denoise mask) are not supported by this network")
        count = keyframe_idxs.shape[2]
        if count > v_pos.shape[2]:
            raise LTXAVInputError(f"LTX-2: {count} keyframe tokens for a latent of {v_pos.shape[2]}")
        spans = keyframe_idxs.to(v_pos)
        if spans.ndim == 3:
            spans = torch.stack((spans, spans), dim=-1)
        v_pos[:, :, -count:] = spans
        return count

    def _with_reference_audio(self, ref: Any, a_in: torch.Tensor, a_pos: torch.Tensor, a_t: torch.Tensor,
                              batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """ID-LoRA's in-context reference (ComfyUI's `ref_audio` conditioning, LTXVReferenceAudio):
        its tokens `[B or 1, R, 128]` prepended to the audio tokens at timestep 0, at the positions of
        R latent frames shifted so the reference ends one latent frame (`hop * 4 / rate` s) before
        t = 0 (the target keeps its own); the network drops their outputs."""
        tokens = ref.get("tokens") if isinstance(ref, dict) else None
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 3 or tokens.shape[-1] != a_in.shape[-1]:
            raise LTXAVInputError(f"LTX-2: ref_audio must be {{'tokens': [B, R, {a_in.shape[-1]}]}}, got "
                                  f"{type(ref).__name__}")
        tokens = tokens.to(device=a_in.device, dtype=a_in.dtype)
        if tokens.shape[0] < batch:
            tokens = tokens.expand(batch, -1, -1)
        count = tokens.shape[1]
        ref_pos = audio_positions(count, batch, a_in.device)
        ref_pos = ref_pos - (ref_pos[0, 0, -1, 1] + AUDIO_HOP * AUDIO_DOWNSAMPLE / AUDIO_RATE)
        target = a_t.expand(batch, a_in.shape[1]) if a_t.shape[1] == 1 else a_t
        a_t = torch.cat([torch.zeros(batch, count, dtype=target.dtype, device=target.device), target], dim=1)
        return torch.cat([tokens, a_in], dim=1), torch.cat([ref_pos.to(a_pos), a_pos], dim=2), a_t, count

    def _timesteps(self, v_t: torch.Tensor, a_t: torch.Tensor, batch: int, per_frame: int,
                   dtype: torch.dtype) -> dict[str, Any]:
        """Every modulation input (see the module doc), the video ones per frame when they can be."""
        mult = self.config.timestep_scale_multiplier
        v_scaled, a_scaled = v_t * mult, a_t * mult  # [B, 1 or N], [B, 1 or N_a]
        v_input, repeat = v_scaled, 1
        if v_scaled.shape[1] > 1 and v_scaled.shape[1] % per_frame == 0:
            frames = v_scaled.reshape(batch, -1, per_frame)
            if bool((frames == frames[:, :, :1]).all()):  # no spatial mask: one row per latent frame
                v_input, repeat = frames[:, :, 0], per_frame

        def expand(rows: torch.Tensor) -> torch.Tensor:
            rows = rows.reshape(batch, -1, rows.shape[-1])
            return rows.repeat_interleave(repeat, dim=1) if repeat > 1 else rows

        v_mod, v_emb = self.adaln_single(v_input.flatten(), dtype)
        a_mod, a_emb = self.audio_adaln_single(a_scaled.flatten(), dtype)
        factor = self.config.av_ca_timestep_scale_multiplier / mult
        out = {"v_timestep": expand(v_mod), "v_embedded": expand(v_emb),
               "a_timestep": a_mod.reshape(batch, -1, a_mod.shape[-1]),
               "a_embedded": a_emb.reshape(batch, -1, a_emb.shape[-1])}
        ss = self.av_ca_video_scale_shift_adaln_single(v_input.flatten(), dtype)[0]
        out["v_cross_scale_shift_timestep"] = expand(ss)
        gate = self.av_ca_a2v_gate_adaln_single(a_scaled.max().expand(v_input.numel()) * factor, dtype)[0]
        out["v_cross_gate_timestep"] = expand(gate)
        ss = self.av_ca_audio_scale_shift_adaln_single(a_scaled.flatten(), dtype)[0]
        out["a_cross_scale_shift_timestep"] = ss.reshape(batch, -1, ss.shape[-1])
        gate = self.av_ca_v2a_gate_adaln_single(v_scaled.max().expand(a_scaled.numel()) * factor, dtype)[0]
        out["a_cross_gate_timestep"] = gate.reshape(batch, -1, gate.shape[-1])
        out["v_prompt_timestep"] = out["a_prompt_timestep"] = None
        if self.prompt_adaln_single is not None:
            rows = self.prompt_adaln_single(v_scaled.max(dim=1).values, dtype)[0]
            out["v_prompt_timestep"] = rows.reshape(batch, 1, -1)
            rows = self.audio_prompt_adaln_single(a_scaled.max(dim=1).values, dtype)[0]
            out["a_prompt_timestep"] = rows.reshape(batch, 1, -1)
        return out

    def _context(self, context: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.caption_projection is None:  # LTX-2.3: the connectors' output is each stream's context
            width = self.cross_attention_dim + self.audio_cross_attention_dim
            if context.shape[-1] != width:
                raise LTXAVInputError(f"LTX-2: the context is {context.shape[-1]} wide, expected the connectors' "
                                      f"{width} (video {self.cross_attention_dim}, audio "
                                      f"{self.audio_cross_attention_dim})")
            v_context, a_context = context.split([self.cross_attention_dim, self.audio_cross_attention_dim], dim=-1)
            return v_context, a_context
        if context.shape[-1] != 2 * self.caption_channels:
            raise LTXAVInputError(f"LTX-2: the context is {context.shape[-1]} wide, expected the connectors' "
                                  f"{2 * self.caption_channels} (video half, audio half)")
        v_context, a_context = context.split([self.caption_channels, self.caption_channels], dim=-1)
        v_context = self.caption_projection(v_context).view(batch, -1, self.inner_dim)
        a_context = self.audio_caption_projection(a_context).view(batch, -1, self.audio_inner_dim)
        return v_context, a_context

    def _positions(self, v_pos: torch.Tensor, a_pos: torch.Tensor, frame_rate: Any,
                   dtype: torch.dtype) -> dict[str, RopeTable]:
        config = self.config
        rate = float(frame_rate.flatten()[0]) if isinstance(frame_rate, torch.Tensor) else float(frame_rate)
        v_pos = v_pos.clone()
        v_pos[:, 0] = v_pos[:, 0] * (1.0 / rate)
        split, double = config.rope_type == "split", config.frequencies_precision == "float64"
        middle = config.use_middle_indices_grid
        cross_max = [max(config.positional_embedding_max_pos[0], config.audio_positional_embedding_max_pos[0])]
        a_heads = config.audio_num_attention_heads
        return {
            "v_pe": rope_table(v_pos, self.inner_dim, _ROPE_THETA, config.positional_embedding_max_pos, split,
                               config.num_attention_heads, double, middle, dtype),
            "a_pe": rope_table(a_pos, self.audio_inner_dim, _ROPE_THETA, config.audio_positional_embedding_max_pos,
                               split, a_heads, double, middle, dtype),
            "v_cross_pe": rope_table(v_pos[:, 0:1], config.audio_cross_attention_dim, _ROPE_THETA, cross_max, split,
                                     a_heads, double, True, dtype),
            "a_cross_pe": rope_table(a_pos[:, 0:1], config.audio_cross_attention_dim, _ROPE_THETA, cross_max, split,
                                     a_heads, double, True, dtype),
        }

    def _blocks(self, vx: torch.Tensor, ax: torch.Tensor, v_context: torch.Tensor, a_context: torch.Tensor,
                attention_mask: torch.Tensor | None, times: dict[str, Any], pe: dict[str, RopeTable],
                options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        replace = options.get("patches_replace", {}).get("dit", {})
        stg = options.get("stg_self_attn_blocks", ())
        names = ("v_timestep", "a_timestep", "v_cross_scale_shift_timestep", "a_cross_scale_shift_timestep",
                 "v_cross_gate_timestep", "a_cross_gate_timestep", "v_prompt_timestep", "a_prompt_timestep")
        shared = {**{k: times[k] for k in names}, **pe, "v_context": v_context, "a_context": a_context,
                  "attention_mask": attention_mask, "self_attention_mask": None}
        for i, block in enumerate(self.transformer_blocks):
            block_options = {**options, "stg_skip_self_attn": True} if i in stg else options
            if ("double_block", i) in replace:
                def original(args: dict[str, Any], block: nn.Module = block) -> dict[str, Any]:
                    kwargs = {k: args.get(k) for k in shared}
                    return {"img": block(args["img"], transformer_options=args["transformer_options"], **kwargs)}

                vx, ax = replace[("double_block", i)]({"img": (vx, ax), **shared, "transformer_options": block_options},
                                                      {"original_block": original})["img"]
            else:
                vx, ax = block((vx, ax), transformer_options=block_options, **shared)
        return vx, ax

    @staticmethod
    def _head(x: torch.Tensor, embedded: torch.Tensor, table: torch.Tensor, norm: nn.Module,
              proj: nn.Module) -> torch.Tensor:
        rows = table[None, None].to(device=x.device, dtype=x.dtype) + embedded[:, :, None]
        return proj(norm(x) * (1 + rows[:, :, 1]) + rows[:, :, 0])
