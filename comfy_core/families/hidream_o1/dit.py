"""HiDream-O1-Image's unified pixel-space transformer and `HiDreamO1Config` read from weights.

HiDream-O1 (HiDream.ai 2026; ComfyUI's `comfy/ldm/hidream_o1/model.py`: `HiDreamO1Transformer`,
behaviour read there, code written here) is a Qwen3-VL-8B that denoises pixels. One sequence:

    [chat-template text ids (reference images' ViT tokens at their <|image_pad|> ids), the noisy
     image's 32x32 RGB patches, the reference images' 32x32 RGB patches]

- text: the language model's token table; the `<|tms_token|>` entry replaced by the timestep
  embedding `t_embedder1((1 - sigma) * 1000)` (a 256-wide sinusoid, cos half first, then
  Linear-SiLU-Linear); `<|image_pad|>` entries by the Qwen3-VL vision tower's merged tokens of the
  reference images (`visual.*`, the tower of `text_encoders/qwen3vl_vision.py`; its DeepStack
  mergers are stored in the files but unused, as in ComfyUI);
- pixels: a patch [3 * 32 * 32] (channel-major, rows, columns) -> `x_embedder.proj1` (to width / 4,
  no bias) -> `x_embedder.proj2` (to width);
- the Qwen3 decoder blocks (`language_model.layers.N`: RMSNorm, q/k/v with per-head q/k RMSNorm,
  interleaved M-RoPE of Qwen3-VL (sections 24 / 20 / 20, theta 5e6), grouped-query attention,
  output projection, residual; RMSNorm, SwiGLU, residual), then `language_model.norm`;
- attention in two passes: the first `ar_len` tokens (the text up to, not including, the tms
  token) are causal among themselves; every later token attends the whole sequence;
- out: the noisy image's hidden states -> `final_layer2.linear` -> patches, the clean-image
  prediction x0; the network returns the flow velocity `(x - x0) / max(sigma, 1e-3)` in float32.

The position ids, the token mask of the image positions (`vinput_mask`), `ar_len` and the reference
inputs come with the conditioning (`conditioning.py`, ComfyUI's `build_extra_conds`).

Widths, depth, heads (the q-norm width), MLP, vocabulary, patch size and the vision tower's shape
are read from the weights; the text config ComfyUI fixes (eps 1e-6, theta 5e6, sections) is
written here, the M-RoPE sections scaled to narrower heads for small test models.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.sd3.mmdit_blocks import TimestepEmbedder
from comfy_core.families.zimage.nextdit import RMSNorm
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.text_encoders.decoder_llm import apply_rotary
from comfy_core.text_encoders.qwen3vl import interleaved_mrope_tables
from comfy_core.text_encoders.qwen3vl_vision import Qwen3VLVisionConfig

IMAGE_TOKEN_ID = 151655  # Qwen3-VL <|image_pad|>
TMS_TOKEN_ID = 151673  # HiDream-O1 <|tms_token|>: carries the timestep embedding
ROPE_THETA = 5_000_000.0
RMS_EPS = 1e-6
VISION_LN_EPS = 1e-6
SIGMA_FLOOR = 1e-3  # ComfyUI's clamp of sigma in the velocity
MARKER = "t_embedder1.mlp.0.weight"  # with x_embedder.proj1: ComfyUI's detection keys
PATCH_MARKER = "x_embedder.proj1.weight"


class HiDreamO1ConfigError(ValueError):
    """Weights that are not a HiDream-O1 transformer."""


class HiDreamO1InputError(ValueError):
    """Model inputs that do not fit (missing token ids, image not a multiple of the patch)."""


def mrope_sections(head_dim: int) -> tuple[int, int, int]:
    """Qwen3-VL's (24, 20, 20) frequency pairs of a 128-channel head, scaled to `head_dim`
    (rows and columns 20/64 of the pairs each, the rest temporal)."""
    pairs = head_dim // 2
    side = pairs * 20 // 64
    return pairs - 2 * side, side, side


@dataclass(frozen=True)
class HiDreamO1Config:
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_layers: int = 36
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    vocab_size: int = 151936
    patch_size: int = 32
    in_channels: int = 3
    bottleneck: int = 1024
    rope_theta: float = ROPE_THETA
    vision: Qwen3VLVisionConfig | None = None

    @property
    def mrope_section(self) -> tuple[int, int, int]:
        return mrope_sections(self.head_dim)

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HiDreamO1Config":
        shape = shape_reader(tensors, prefix, HiDreamO1ConfigError, "HiDream-O1")
        vocab, width = shape("language_model.embed_tokens.weight")
        layers = count_numbered(tensors, prefix, "language_model.layers", HiDreamO1ConfigError, "HiDream-O1")
        if layers == 0:
            raise HiDreamO1ConfigError("HiDream-O1: no language_model.layers")
        head_dim = shape("language_model.layers.0.self_attn.q_norm.weight")[0]
        q_out = shape("language_model.layers.0.self_attn.q_proj.weight")[0]
        k_out = shape("language_model.layers.0.self_attn.k_proj.weight")[0]
        if q_out % head_dim or k_out % head_dim or (q_out // head_dim) % (k_out // head_dim):
            raise HiDreamO1ConfigError(f"HiDream-O1: q {q_out} / k {k_out} outputs do not split into "
                                       f"{head_dim}-channel heads")
        intermediate = shape("language_model.layers.0.mlp.gate_proj.weight")[0]
        bottleneck, patch_in = shape(PATCH_MARKER)
        patch = round((patch_in // 3) ** 0.5)
        if 3 * patch * patch != patch_in:
            raise HiDreamO1ConfigError(f"HiDream-O1: {PATCH_MARKER} reads {patch_in} values, not an RGB square patch")
        if shape("final_layer2.linear.weight") != (patch_in, width) or shape(MARKER)[0] != width:
            raise HiDreamO1ConfigError("HiDream-O1: final_layer2 / t_embedder1 do not fit the language model's width")
        vision = _vision_config(tensors, prefix + "visual.", width) if prefix + "visual.patch_embed.proj.weight" \
            in tensors else None
        return cls(hidden_size=width, intermediate_size=intermediate, num_layers=layers, num_heads=q_out // head_dim,
                   num_kv_heads=k_out // head_dim, head_dim=head_dim, vocab_size=vocab, patch_size=patch,
                   bottleneck=bottleneck, vision=vision)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` for this model (`model_detection`: `image_model` "hidream_o1")."""
        return {"image_model": "hidream_o1"}


def _vision_config(tensors: Mapping[str, Any], visual: str, out_hidden: int) -> Qwen3VLVisionConfig:
    """The Qwen3-VL vision tower's shape under `visual` (its DeepStack mergers, when stored, unused)."""
    shape = shape_reader(tensors, visual, HiDreamO1ConfigError, "HiDream-O1 vision tower")
    hidden, channels, temporal, patch, _ = shape("patch_embed.proj.weight")
    positions = shape("pos_embed.weight")[0]
    intermediate = shape("blocks.0.mlp.linear_fc1.weight")[0]
    merged = shape("merger.linear_fc1.weight")[0]
    merge = round((merged // hidden) ** 0.5)
    if merge * merge * hidden != merged or shape("merger.linear_fc2.weight")[0] != out_hidden:
        raise HiDreamO1ConfigError("HiDream-O1: the vision merger does not fit the tower or the language model")
    depth = count_numbered(tensors, visual, "blocks", HiDreamO1ConfigError, "HiDream-O1 vision tower")
    return Qwen3VLVisionConfig(hidden_size=hidden, intermediate_size=intermediate, depth=depth,
                               out_hidden_size=out_hidden, num_position_embeddings=positions,
                               deepstack_visual_indexes=(), patch_size=patch, temporal_patch_size=temporal,
                               spatial_merge_size=merge, in_channels=channels)


# --- the vision tower (module names as ComfyUI's / transformers' `visual.*`) ---

class _VisionPatchEmbed(nn.Module):
    def __init__(self, config: Qwen3VLVisionConfig, factory: dict[str, Any]) -> None:
        super().__init__()
        h, p = config.hidden_size, config.patch_size
        self.proj = nn.Conv3d(config.in_channels, h, (config.temporal_patch_size, p, p),
                              stride=(config.temporal_patch_size, p, p), bias=True, **factory)


class _VisionAttention(nn.Module):
    def __init__(self, width: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.qkv = ops.Linear(width, 3 * width, bias=True, **factory)
        self.proj = ops.Linear(width, width, bias=True, **factory)


class _VisionMLP(nn.Module):
    def __init__(self, width: int, inner: int, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear_fc1 = ops.Linear(width, inner, bias=True, **factory)
        self.linear_fc2 = ops.Linear(inner, width, bias=True, **factory)


class _VisionBlock(nn.Module):
    def __init__(self, config: Qwen3VLVisionConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        h = config.hidden_size
        self.norm1 = nn.LayerNorm(h, eps=VISION_LN_EPS, **factory)
        self.norm2 = nn.LayerNorm(h, eps=VISION_LN_EPS, **factory)
        self.attn = _VisionAttention(h, factory, ops)
        self.mlp = _VisionMLP(h, config.intermediate_size, factory, ops)


class _VisionMerger(nn.Module):
    def __init__(self, config: Qwen3VLVisionConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        merged = config.hidden_size * config.spatial_merge_size ** 2
        self.norm = nn.LayerNorm(config.hidden_size, eps=VISION_LN_EPS, **factory)
        self.linear_fc1 = ops.Linear(merged, merged, bias=True, **factory)
        self.linear_fc2 = ops.Linear(merged, config.out_hidden_size, bias=True, **factory)


class VisionTower(nn.Module):
    """Qwen3-VL's vision transformer without its DeepStack mergers (run by
    `qwen3vl_vision.encode_image_patches`)."""

    def __init__(self, config: Qwen3VLVisionConfig, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = _VisionPatchEmbed(config, factory)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.hidden_size, **factory)
        self.blocks = nn.ModuleList(_VisionBlock(config, factory, ops) for _ in range(config.depth))
        self.merger = _VisionMerger(config, factory, ops)
        self.deepstack_merger_list = nn.ModuleList()

    def forward(self, pixel_values: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """patches [N, C*frames*p*p], grid [n, 3] -> merged tokens [N / merge^2, out] float32."""
        from comfy_core.text_encoders.qwen3vl_vision import encode_image_patches

        tokens, _ = encode_image_patches(self, self.config, pixel_values, grid.long())
        return tokens


# --- the language model (ComfyUI's `Llama2_` names) ---

class Attention(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        w, d = config.hidden_size, config.head_dim
        self.heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, d
        self.q_proj = ops.Linear(w, config.num_heads * d, bias=False, **factory)
        self.k_proj = ops.Linear(w, config.num_kv_heads * d, bias=False, **factory)
        self.v_proj = ops.Linear(w, config.num_kv_heads * d, bias=False, **factory)
        self.o_proj = ops.Linear(config.num_heads * d, w, bias=False, **factory)
        self.q_norm = RMSNorm(d, RMS_EPS, **factory)
        self.k_norm = RMSNorm(d, RMS_EPS, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ar_len: int,
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        """x [B, T, W] -> [B, T, W]: two-pass attention (module docstring)."""
        b, t, _ = x.shape
        q = apply_rotary(self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)), cos, sin)
        k = apply_rotary(self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)), cos, sin)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        if self.heads != self.kv_heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=2)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=2)
        q, k, v = (a.transpose(1, 2).to(x.dtype) for a in (q, k, v))  # [B, H, T, d]
        out = two_pass_attention(q, k, v, self.heads, ar_len, transformer_options)  # [B, T, H*d]
        return self.o_proj(out)


def two_pass_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, ar_len: int,
                       transformer_options: Mapping[str, Any]) -> torch.Tensor:
    """q, k, v [B, H, T, d] -> [B, T, H*d]: queries before `ar_len` attend causally within the
    first `ar_len` keys, the others attend every key (ComfyUI's `make_two_pass_attention`)."""
    t = q.shape[2]
    ar = max(0, min(int(ar_len), t))
    parts = []
    if ar > 0:
        causal = torch.full((ar, ar), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)[None, None]
        parts.append(calling.attend_masked(q[:, :, :ar], k[:, :, :ar], v[:, :, :ar], heads, causal,
                                           skip_reshape=True, transformer_options=transformer_options))
    if ar < t:
        parts.append(calling.attend(q[:, :, ar:], k, v, heads, skip_reshape=True,
                                    transformer_options=transformer_options))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


class MLP(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        w, i = config.hidden_size, config.intermediate_size
        self.gate_proj = ops.Linear(w, i, bias=False, **factory)
        self.up_proj = ops.Linear(w, i, bias=False, **factory)
        self.down_proj = ops.Linear(i, w, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, RMS_EPS, **factory)
        self.self_attn = Attention(config, factory, ops)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, RMS_EPS, **factory)
        self.mlp = MLP(config, factory, ops)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ar_len: int,
                transformer_options: Mapping[str, Any]) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ar_len, transformer_options)
        return x + self.mlp(self.post_attention_layernorm(x))


class LanguageModel(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, **factory)
        self.layers = nn.ModuleList(DecoderBlock(config, factory, ops) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, RMS_EPS, **factory)


class BottleneckPatchEmbed(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.proj1 = ops.Linear(3 * config.patch_size ** 2, config.bottleneck, bias=False, **factory)
        self.proj2 = ops.Linear(config.bottleneck, config.hidden_size, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj2(self.proj1(x))


class FinalLayer(nn.Module):
    def __init__(self, config: HiDreamO1Config, factory: dict[str, Any], ops: Any) -> None:
        super().__init__()
        self.linear = ops.Linear(config.hidden_size, 3 * config.patch_size ** 2, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, C, H, W] -> [B, (H/p)(W/p), C*p*p] (channel, row, column within a patch)."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // patch) * (w // patch), c * patch * patch)


def unpatchify(tokens: torch.Tensor, rows: int, cols: int, patch: int, channels: int = 3) -> torch.Tensor:
    """`patchify`'s inverse: [B, rows*cols, C*p*p] -> [B, C, rows*p, cols*p]."""
    b = tokens.shape[0]
    x = tokens.reshape(b, rows, cols, channels, patch, patch).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, channels, rows * patch, cols * patch)


class HiDreamO1Transformer(nn.Module):
    """HiDream-O1's network (module docstring), built from a `HiDreamO1Config`."""

    def __init__(self, config: HiDreamO1Config, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = config.patch_size
        self.in_channels = self.out_channels = config.in_channels
        if config.vision is not None:
            self.visual = VisionTower(config.vision, factory, ops)
        self.language_model = LanguageModel(config, factory, ops)
        self.t_embedder1 = TimestepEmbedder(config.hidden_size, dtype=dtype, device=device, operations=ops)
        self.x_embedder = BottleneckPatchEmbed(config, factory, ops)
        self.final_layer2 = FinalLayer(config, factory, ops)

    @classmethod
    def from_config(cls, config: HiDreamO1Config, **kwargs: Any) -> "HiDreamO1Transformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic spellings of the module's own names
        (`diffusion_model.language_model.layers.0.self_attn.q_proj`, kohya's `lora_unet_...`)."""
        from comfy_core.families.lora_keys import native_key_map

        return native_key_map(list(names))

    def _reference_tokens(self, pixel_values: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "visual"):
            raise HiDreamO1InputError("HiDream-O1: reference images need the vision tower (visual.*), "
                                      "which this file does not hold")
        pixel_values = pixel_values[0] if pixel_values.dim() == 3 else pixel_values  # a leading batch
        grid = grid[0] if grid.dim() == 3 else grid
        return self.visual(pixel_values, grid)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: Any = None,
                transformer_options: Mapping[str, Any] | None = None, input_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, vinput_mask: torch.Tensor | None = None,
                ar_len: int | None = None, ref_pixel_values: torch.Tensor | None = None,
                ref_image_grid_thw: torch.Tensor | None = None, ref_patches: torch.Tensor | None = None,
                **kwargs: Any) -> torch.Tensor:
        """x [B, 3, H, W] (pixels, about -1..1 scaled by the noise), timesteps [B] (sigma * 1000),
        input_ids [B, L], position_ids [B or 1, 3, T], vinput_mask [B, T], ar_len -> velocity
        [B, 3, H, W] float32."""
        options = dict(transformer_options or {})
        if input_ids is None or position_ids is None:
            raise HiDreamO1InputError("HiDream-O1 needs input_ids and position_ids in its conditioning "
                                      "(encode the prompt with the checkpoint's own CLIP)")
        b, c, h, w = x.shape
        p = self.patch_size
        if c != self.in_channels or h % p or w % p:
            raise HiDreamO1InputError(f"HiDream-O1: the image must be [B, 3, H, W] with H and W multiples of {p}, "
                                      f"got {tuple(x.shape)}")
        rows, cols = h // p, w // p
        input_ids = input_ids.to(x.device).long()
        if input_ids.shape[0] != b:
            input_ids = input_ids.expand(b, -1) if input_ids.shape[0] == 1 else input_ids[:b]
        z = patchify(x, p)  # [B, rows*cols, 3*p*p]
        vinputs = z if ref_patches is None else torch.cat([z, ref_patches.to(z)], dim=1)
        dtype = x.dtype
        embeds = self.language_model.embed_tokens(input_ids).to(dtype)  # [B, L, W]
        if ref_pixel_values is not None and ref_image_grid_thw is not None:
            vision = self._reference_tokens(ref_pixel_values.to(x.device), ref_image_grid_thw.to(x.device))
            where = (input_ids[0] == IMAGE_TOKEN_ID).nonzero(as_tuple=True)[0]
            if where.shape[0] != vision.shape[0]:
                raise HiDreamO1InputError(f"HiDream-O1: {where.shape[0]} image tokens for {vision.shape[0]} "
                                          "vision-tower outputs")
            embeds = embeds.clone()
            embeds[:, where] = vision.to(dtype)[None].expand(b, -1, -1)
        sigma = timesteps.float().to(x.device) / 1000.0  # [B]
        t_emb = self.t_embedder1((1.0 - sigma) * 1000.0, dtype)  # [B, W]
        tms = (input_ids == TMS_TOKEN_ID)[..., None]
        embeds = torch.where(tms, t_emb[:, None].to(dtype), embeds)
        hidden = torch.cat([embeds, self.x_embedder(vinputs.to(dtype))], dim=1)  # [B, T, W]
        positions = position_ids[0] if position_ids.dim() == 3 else position_ids  # [3, T]
        if positions.shape[-1] != hidden.shape[1]:
            raise HiDreamO1InputError(f"HiDream-O1: {positions.shape[-1]} positions for {hidden.shape[1]} tokens")
        cos, sin = interleaved_mrope_tables(positions.to(x.device), self.config.head_dim, self.config.rope_theta,
                                            self.config.mrope_section, x.device)
        cos, sin = cos.to(dtype), sin.to(dtype)
        ar = int(input_ids.shape[1] - 1 if ar_len is None else ar_len)
        blocks_replace = options.get("patches_replace", {}).get("dit", {})
        options["total_blocks"] = len(self.language_model.layers)
        options["block_type"] = "double"
        for index, block in enumerate(self.language_model.layers):
            options["block_index"] = index
            if ("double_block", index) in blocks_replace:
                def original(args: dict[str, Any], _block: nn.Module = block) -> dict[str, Any]:
                    return {"x": _block(args["x"], cos, sin, ar, args.get("transformer_options", options))}

                hidden = blocks_replace[("double_block", index)](
                    {"x": hidden, "transformer_options": options}, {"original_block": original})["x"]
            else:
                hidden = block(hidden, cos, sin, ar, options)
        hidden = self.language_model.norm(hidden)
        length = rows * cols
        if vinput_mask is not None:
            mask = vinput_mask.to(x.device).bool()
            mask = mask.expand(b, -1) if mask.shape[0] == 1 else mask[:b]
            target = hidden[mask].view(b, -1, hidden.shape[-1])[:, :length]
        else:
            start = input_ids.shape[1]
            target = hidden[:, start:start + length]
        x0 = unpatchify(self.final_layer2(target), rows, cols, p, c)
        return (x.float() - x0.float()) / sigma.view(b, 1, 1, 1).clamp_min(SIGMA_FLOOR)


__all__ = ["HiDreamO1Config", "HiDreamO1ConfigError", "HiDreamO1InputError", "HiDreamO1Transformer", "IMAGE_TOKEN_ID",
           "MARKER", "PATCH_MARKER", "TMS_TOKEN_ID", "mrope_sections", "patchify", "two_pass_attention", "unpatchify"]
