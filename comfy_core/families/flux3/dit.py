"""FLUX 3 Image (Black Forest Labs, 2026; the "Klein" release and its step-distilled flow map):
the rectified-flow transformer, and `Flux3Config` read from weights.

As diffusers' `Flux3Transformer2DModel` (models/transformers/transformer_flux3.py) and its
single-file converter (`convert_flux3_transformer_checkpoint_to_diffusers`) define it; the
maths written here, in BFL's (ComfyUI's) names:

- three token modes share one sequence: the noisy image tokens, the VAE-encoded reference images
  (`image_cond`) and the text context (`txt`). Each mode first runs its own *mode blocks*
  (`content_mode_blocks.image.N`, `content_mode_blocks.image_cond.N`, `txt_mode_blocks.N`), a
  mode attending only within itself; then `[txt, image, image_cond]` run the joint *single
  blocks* (`single_blocks.N`); only the image tokens reach `final_layer.image`;
- every block is parallel: one modulated LayerNorm (no affine) feeds both the attention
  (`q_proj`, `k_proj`, `v_proj`, RMS QK-norm `norm.query_norm` / `norm.key_norm` in float32,
  `attn_out`) and a SwiGLU MLP (`mlp_in` gate rows first, `mlp_out`); `x + gate * (attn + mlp)`;
  no biases anywhere (Flux.2's SwiGLU and bias-free embedders are reused);
- modulation is per mode, not per block: `early_stream_modulations.<mode>.lin` (mode blocks)
  and `single_stream_modulations.<mode>.lin` (single blocks), each `lin(silu(temb))` into
  shift, scale, gate. The image tokens' `temb` embeds the flow timestep, the reference and text
  tokens' embed timestep 0 (`time_in`, Flux's 256-channel sinusoid of 1000 t); a flow-map
  (step-distilled) checkpoint adds `ref_time_in(target)`, the timestep the step jumps to, to
  every mode's embedding;
- 4-axis RoPE `(t, h, w, l)`, 32 channels each for 128-channel heads, base 10000: image tokens
  `(0, row / 2, col / 2, 0)` (the image axes scaled by 0.5, as trained), the k-th reference
  `(0, row / 2, col / 2, -k)` (k from 1), text tokens `(0, 0, 0, index)`;
- 128 input channels (the Flux.2 VAE's 32 in 2x2 patches, patch size 1 here); the text input is
  Qwen3-VL's stacked hidden states (8 layers of the 4B: 20480 wide).

The flow-map target: ComfyUI's samplers hand the network only the current sigma; the step's
target is the next lower sigma of the run's schedule (`transformer_options["sample_sigmas"]`,
0 after the last), as diffusers' distilled loop passes `timesteps[i + 1]`. A direct call may
pass `target_timestep`; a flow-map call with neither is `Flux3ConfigError`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import EmbedND, ModulationOut, QKNorm, apply_mod, timestep_embedding
from comfy_core.families.flux.dit import count_numbered, tokens_to_image
from comfy_core.families.flux2.dit import Embedder, Flux2LastLayer, GlobalModulation, swiglu
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

FLUX3_THETA = 10000
IMAGE_ROPE_SCALE = 0.5  # the image row / column position ids are scaled by this (BFL's training)
TEXT_ID_AXIS = 3
REF_ID_AXIS = 3  # the k-th reference image sits at l = -k
MODES = ("image", "image_cond")
TEXT_MODE = "txt"
MARKER = "early_stream_modulations.image.lin.weight"


class Flux3ConfigError(ValueError):
    """The FLUX 3 weights are incomplete or inconsistent, or the call lacks what the model needs."""


@dataclass(frozen=True)
class Flux3Config:
    """The structure of a FLUX 3 Image transformer (diffusers' defaults: 24 heads of 128, 5 mode
    blocks, 28 single blocks)."""

    in_channels: int = 128
    cond_in_channels: int | None = 128  # None: no reference-image mode in the weights
    context_in_dim: int = 20480
    hidden_size: int = 3072
    mlp_ratio: float = 3.0
    num_heads: int = 24
    depth: int = 5
    depth_single_blocks: int = 28
    axes_dim: tuple[int, ...] = (32, 32, 32, 32)
    theta: int = FLUX3_THETA
    flow_map: bool = False
    patch_size: int = 1

    image_model = "flux3"

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes_dim", tuple(int(a) for a in self.axes_dim))
        if self.num_heads <= 0 or self.hidden_size % self.num_heads:
            raise Flux3ConfigError(f"FLUX 3: hidden size {self.hidden_size} must be divisible by num_heads "
                                   f"{self.num_heads}")
        if sum(self.axes_dim) != self.head_dim or len(self.axes_dim) != 4:
            raise Flux3ConfigError(f"FLUX 3: axes_dim {list(self.axes_dim)} must be 4 axes summing to the head "
                                   f"width {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(round(self.hidden_size * self.mlp_ratio))

    @property
    def out_channels(self) -> int:
        return self.in_channels

    @property
    def variant(self) -> str:
        """"distilled" (a flow map: `ref_time_in`) or "base"."""
        return "distilled" if self.flow_map else "base"

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        params["axes_dim"] = list(self.axes_dim)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI-style `unet_config` of this model (`image_model` "flux3" and the network's arguments)."""
        return {"image_model": self.image_model, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Flux3Config":
        """The structure of the FLUX 3 transformer under `prefix` from names and shapes only: width and
        input channels from `emb_in.image`, reference channels from `emb_in.image_cond` (absent: no
        reference mode), text width from `txt_in`, head width from a QK-norm scale, MLP width from
        `mlp_in` (half its rows), depths from the numbered blocks, a flow map from `ref_time_in`.
        Raises `Flux3ConfigError` naming the key when the weights are not a FLUX 3 transformer."""
        shape = shape_reader(tensors, prefix, Flux3ConfigError, "FLUX 3")
        if prefix + MARKER not in tensors:
            raise Flux3ConfigError(f"FLUX 3: no {prefix}{MARKER} (per-mode modulation)")
        hidden, in_channels = shape("emb_in.image.weight")
        cond_in = shape("emb_in.image_cond.weight")[1] if prefix + "emb_in.image_cond.weight" in tensors else None
        txt_hidden, context = shape("txt_in.weight")
        time_hidden, time_in = shape("time_in.in_layer.weight")
        out_channels, final_in = shape("final_layer.image.linear.weight")
        for key, width in (("txt_in.weight", txt_hidden), ("time_in.in_layer.weight", time_hidden),
                           ("final_layer.image.linear.weight", final_in)):
            if width != hidden:
                raise Flux3ConfigError(f"FLUX 3: {prefix}{key} has width {width}, emb_in.image has {hidden}")
        if time_in != 256:
            raise Flux3ConfigError(f"FLUX 3: {prefix}time_in.in_layer.weight takes {time_in} channels, not 256")
        if out_channels != in_channels:
            raise Flux3ConfigError(f"FLUX 3: {prefix}final_layer.image.linear.weight gives {out_channels} channels, "
                                   f"the image input takes {in_channels}")
        expect = _expecter(shape, prefix)
        modes = MODES if cond_in is not None else MODES[:1]
        for kind in ("early_stream_modulations", "single_stream_modulations"):
            for mode in (*modes, TEXT_MODE):
                expect(f"{kind}.{mode}.lin.weight", (3 * hidden, hidden))
        expect("final_layer.image.adaLN_modulation.1.weight", (2 * hidden, hidden))
        depth = count_numbered(tensors, prefix, "txt_mode_blocks", Flux3ConfigError, "FLUX 3")
        for mode in modes:
            found = count_numbered(tensors, prefix, f"content_mode_blocks.{mode}", Flux3ConfigError, "FLUX 3")
            if found != depth:
                raise Flux3ConfigError(f"FLUX 3: {found} {prefix}content_mode_blocks.{mode} blocks, "
                                       f"{depth} txt_mode_blocks")
        depth_single = count_numbered(tensors, prefix, "single_blocks", Flux3ConfigError, "FLUX 3")
        blocks = [f"content_mode_blocks.{m}.{i}" for m in modes for i in range(depth)]
        blocks += [f"txt_mode_blocks.{i}" for i in range(depth)] + [f"single_blocks.{i}" for i in range(depth_single)]
        if not blocks:
            raise Flux3ConfigError(f"FLUX 3: no {prefix}txt_mode_blocks.N or {prefix}single_blocks.N weights")
        (head_dim,) = shape(f"{blocks[0]}.norm.query_norm.scale")
        if head_dim <= 0 or hidden % head_dim or head_dim % 8:
            raise Flux3ConfigError(f"FLUX 3: head width {head_dim} does not divide the width {hidden} into "
                                   "heads of 4 even RoPE axes")
        mlp2 = shape(f"{blocks[0]}.mlp_in.weight")[0]
        if mlp2 % 2:
            raise Flux3ConfigError(f"FLUX 3: the SwiGLU input has {mlp2} rows, not gate + value halves")
        mlp = mlp2 // 2
        for block in blocks:
            for name in ("q_proj", "k_proj", "v_proj", "attn_out"):
                expect(f"{block}.{name}.weight", (hidden, hidden))
            expect(f"{block}.mlp_in.weight", (2 * mlp, hidden))
            expect(f"{block}.mlp_out.weight", (hidden, mlp))
            expect(f"{block}.norm.key_norm.scale", (head_dim,))
        flow_map = prefix + "ref_time_in.in_layer.weight" in tensors
        if flow_map:
            expect("ref_time_in.in_layer.weight", (hidden, 256))
        return cls(in_channels=in_channels, cond_in_channels=cond_in, context_in_dim=context, hidden_size=hidden,
                   mlp_ratio=mlp / hidden, num_heads=hidden // head_dim, depth=depth,
                   depth_single_blocks=depth_single, axes_dim=(head_dim // 4,) * 4, flow_map=flow_map)


def _expecter(shape: Any, prefix: str) -> Any:
    def expect(key: str, expected: tuple[int, ...]) -> None:
        found = shape(key)
        if found != expected:
            raise Flux3ConfigError(f"FLUX 3: {prefix}{key} has shape {found}, expected {expected}")
    return expect


# -- blocks -----------------------------------------------------------------------------------------

class Flux3Block(nn.Module):
    """One parallel block: a modulated LayerNorm feeds the attention and the SwiGLU MLP, the gated
    sum is added back. A mode block runs one mode's tokens; a single block the joint sequence."""

    def __init__(self, hidden: int, num_heads: int, mlp: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = ops.Linear(hidden, hidden, bias=False, **factory)
        self.k_proj = ops.Linear(hidden, hidden, bias=False, **factory)
        self.v_proj = ops.Linear(hidden, hidden, bias=False, **factory)
        self.norm = QKNorm(hidden // num_heads, operations=ops, **factory)
        self.attn_out = ops.Linear(hidden, hidden, bias=False, **factory)
        self.mlp_in = ops.Linear(hidden, 2 * mlp, bias=False, **factory)
        self.mlp_out = ops.Linear(mlp, hidden, bias=False, **factory)

    def mixed(self, x: torch.Tensor, pe: torch.Tensor, options: dict[str, Any] | None) -> torch.Tensor:
        """`attn_out(attention) + mlp_out(swiglu(mlp_in))` of the modulated, normalised `x` `[B, N, C]`."""
        b, n, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.num_heads, -1).transpose(1, 2)  # [B, H, N, d]

        v = heads(self.v_proj(x))
        q, k = self.norm(heads(self.q_proj(x)).float(), heads(self.k_proj(x)).float(), v.float())  # float32 QK-norm
        attn = flux_math.run_attention(q, k, v.to(q.dtype), pe=pe, transformer_options=options).to(x.dtype)
        return self.attn_out(attn) + self.mlp_out(swiglu(self.mlp_in(x)))

    def forward(self, x: torch.Tensor, mod: ModulationOut, pe: torch.Tensor,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """A mode block: `x` `[B, N, C]`, `mod` fields `[B, 1 or N, C]`, `pe` for the N tokens."""
        return x + mod.gate * self.mixed(_modulated(x, mod), pe, transformer_options)

    def joint(self, content: torch.Tensor, txt: torch.Tensor, content_mod: ModulationOut, txt_mod: ModulationOut,
              pe: torch.Tensor, transformer_options: dict[str, Any] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """A single block over `[txt, content]` (each with its own modulation) -> (content, txt)."""
        n_txt = txt.shape[1]
        out = self.mixed(torch.cat((_modulated(txt, txt_mod), _modulated(content, content_mod)), dim=1), pe,
                         transformer_options)
        return content + content_mod.gate * out[:, n_txt:], txt + txt_mod.gate * out[:, :n_txt]


def _modulated(x: torch.Tensor, mod: ModulationOut) -> torch.Tensor:
    return apply_mod(F.layer_norm(x, x.shape[-1:], eps=1e-6), 1 + mod.scale, mod.shift)


def _join(mods: Sequence[tuple[ModulationOut, int]]) -> ModulationOut:
    """Per-token modulation of a concatenation: each `(mod, tokens)` expanded to its tokens."""
    def cat(field: str) -> torch.Tensor:
        return torch.cat([getattr(m, field).expand(-1, n, -1) for m, n in mods], dim=1)

    return ModulationOut(cat("shift"), cat("scale"), cat("gate"))


# -- position ids -------------------------------------------------------------------------------------

def flux3_image_tokens(x: torch.Tensor, l_coord: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[B, C, h, w]` (patch size 1) -> tokens `[B, h*w, C]` and ids `[B, h*w, 4]` =
    `(0, row / 2, col / 2, l_coord)`."""
    b, c, h, w = x.shape
    tokens = x.reshape(b, c, h * w).transpose(1, 2)
    ids = torch.zeros((h, w, 4), device=x.device, dtype=torch.float32)
    ids[..., 1] = torch.arange(h, device=x.device, dtype=torch.float32)[:, None] * IMAGE_ROPE_SCALE
    ids[..., 2] = torch.arange(w, device=x.device, dtype=torch.float32)[None, :] * IMAGE_ROPE_SCALE
    ids[..., REF_ID_AXIS] = l_coord
    return tokens, ids.reshape(1, h * w, 4).repeat(b, 1, 1)


def flux3_text_ids(batch: int, length: int, device: Any) -> torch.Tensor:
    """Text position ids `[B, T, 4]`: `(0, 0, 0, index)`."""
    ids = torch.zeros((batch, length, 4), device=device, dtype=torch.float32)
    ids[..., TEXT_ID_AXIS] = torch.arange(length, device=device, dtype=torch.float32)
    return ids


def flow_map_target(timestep: torch.Tensor, sample_sigmas: torch.Tensor | None) -> torch.Tensor:
    """The timestep each batch entry's step jumps to: the largest schedule sigma below it (0 after
    the last), as diffusers' distilled loop passes the next scheduler timestep."""
    if sample_sigmas is None:
        raise Flux3ConfigError("FLUX 3: a flow-map (distilled) model needs the step's target: "
                               "transformer_options['sample_sigmas'] or target_timestep")
    sigmas = torch.as_tensor(sample_sigmas, dtype=torch.float32).flatten().to(timestep.device)
    out = []
    for t in timestep.float().flatten():
        below = sigmas[sigmas < t - 1e-6]
        out.append(below.max() if below.numel() else torch.zeros((), device=timestep.device))
    return torch.stack(out).to(timestep)


# -- the network --------------------------------------------------------------------------------------

@comfyui_name("Flux3")
class Flux3Transformer(nn.Module):
    """The FLUX 3 Image transformer (see the module docstring); `params` are `Flux3Config`'s fields."""

    def __init__(self, image_model: Any = None, final_layer: bool = True, dtype: Any = None, device: Any = None,
                 operations: Any = None, **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = Flux3Config(**params)
        except TypeError as error:
            raise Flux3ConfigError(f"FLUX 3: {error}") from None
        factory = {"dtype": dtype, "device": device}
        self.dtype = dtype
        self.config = self.params = config
        self.patch_size = config.patch_size
        self.in_channels = self.out_channels = config.in_channels
        self.hidden_size, self.num_heads = config.hidden_size, config.num_heads
        hidden, mlp = config.hidden_size, config.mlp_hidden
        channels = {"image": config.in_channels}
        if config.cond_in_channels is not None:
            channels["image_cond"] = config.cond_in_channels
        self.modes = tuple(channels)
        self.pe_embedder = EmbedND(dim=config.head_dim, theta=config.theta, axes_dim=config.axes_dim)
        self.emb_in = nn.ModuleDict({m: ops.Linear(c, hidden, bias=False, **factory) for m, c in channels.items()})
        self.txt_in = ops.Linear(config.context_in_dim, hidden, bias=False, **factory)
        self.time_in = Embedder(256, hidden, ops, factory)
        if config.flow_map:
            self.ref_time_in = Embedder(256, hidden, ops, factory)
        names = (*self.modes, TEXT_MODE)
        self.early_stream_modulations = nn.ModuleDict({m: GlobalModulation(hidden, 1, ops, factory) for m in names})
        self.single_stream_modulations = nn.ModuleDict({m: GlobalModulation(hidden, 1, ops, factory) for m in names})

        def blocks(n: int) -> nn.ModuleList:
            return nn.ModuleList(Flux3Block(hidden, config.num_heads, mlp, ops, factory) for _ in range(n))

        self.content_mode_blocks = nn.ModuleDict({m: blocks(config.depth) for m in self.modes})
        self.txt_mode_blocks = blocks(config.depth)
        self.single_blocks = blocks(config.depth_single_blocks)
        if final_layer:
            self.final_layer = nn.ModuleDict({"image": Flux2LastLayer(hidden, config.in_channels, ops, factory)})

    @classmethod
    def from_config(cls, config: Flux3Config, **kwargs: Any) -> "Flux3Transformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; spellings: `flux3.keys.lora_key_map`)."""
        from comfy_core.families.flux3.keys import lora_key_map

        return lora_key_map(self.config, names)

    def _temb(self, embedder: nn.Module, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return embedder(timestep_embedding(t, 256).to(dtype))  # [B, C]

    def forward_orig(self, img: torch.Tensor, img_ids: torch.Tensor, txt: torch.Tensor, txt_ids: torch.Tensor,
                     timesteps: torch.Tensor, cond: torch.Tensor | None = None, cond_ids: torch.Tensor | None = None,
                     target_timesteps: torch.Tensor | None = None,
                     transformer_options: Mapping[str, Any] = {}) -> torch.Tensor:
        """Tokens in, tokens out: img `[B, Ni, in]`, img_ids `[B, Ni, 4]`, txt `[B, Nt, context]`,
        txt_ids `[B, Nt, 4]`, timesteps (the flow time, sigma) `[B]`, the reference tokens `cond`
        `[B, Nc, cond_in]` with `cond_ids`, the flow-map target `[B]` -> velocity `[B, Ni, in]`."""
        if img.ndim != 3 or txt.ndim != 3:
            raise Flux3ConfigError("FLUX 3: img and txt token tensors must have 3 dimensions")
        if (target_timesteps is not None) != self.config.flow_map:
            raise Flux3ConfigError("FLUX 3: a target timestep is required by, and only by, a flow-map model")
        if cond is not None and "image_cond" not in self.modes:
            raise Flux3ConfigError("FLUX 3: these weights have no reference-image mode (emb_in.image_cond)")
        options = dict(transformer_options or {})
        dtype = img.dtype
        vec_t = self._temb(self.time_in, timesteps, dtype)  # [B, C]
        vec_0 = self._temb(self.time_in, torch.zeros_like(timesteps), dtype)
        if target_timesteps is not None:
            target = self._temb(self.ref_time_in, target_timesteps, dtype)
            vec_t, vec_0 = vec_t + target, vec_0 + target
        streams = {"image": (self.emb_in["image"](img), vec_t, img_ids), TEXT_MODE: (self.txt_in(txt), vec_0, txt_ids)}
        if cond is not None:
            streams["image_cond"] = (self.emb_in["image_cond"](cond), vec_0, cond_ids)
        tokens, early, single, pe = {}, {}, {}, {}
        for mode, (x, vec, ids) in streams.items():
            tokens[mode] = x
            (early[mode],) = self.early_stream_modulations[mode](vec)  # fields [B, 1, C]
            (single[mode],) = self.single_stream_modulations[mode](vec)
            pe[mode] = self.pe_embedder(ids)  # [B, 1, N, d/2, 2, 2]
        for mode, blocks in ((TEXT_MODE, self.txt_mode_blocks), *((m, self.content_mode_blocks[m]) for m in streams
                                                                 if m != TEXT_MODE)):
            for i, block in enumerate(blocks):
                options["block_index"], options["block_type"] = i, f"mode_{mode}"
                tokens[mode] = block(tokens[mode], early[mode], pe[mode], options)
        content_modes = [m for m in ("image", "image_cond") if m in streams]
        content = torch.cat([tokens[m] for m in content_modes], dim=1)
        content_mod = _join([(single[m], tokens[m].shape[1]) for m in content_modes])
        joint_pe = torch.cat([pe[TEXT_MODE]] + [pe[m] for m in content_modes], dim=2)
        txt_tokens = tokens[TEXT_MODE]
        for i, block in enumerate(self.single_blocks):
            options["block_index"], options["block_type"] = i, "single"
            content, txt_tokens = block.joint(content, txt_tokens, content_mod, single[TEXT_MODE], joint_pe, options)
        return self.final_layer["image"](content[:, :img.shape[1]], vec_t)  # [B, Ni, in]

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, ref_latents: Sequence[torch.Tensor] | None = None,
                control: Mapping[str, Any] | None = None, transformer_options: Mapping[str, Any] = {},
                target_timestep: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 128, h, w]` (the patchified latent), timestep (sigma) `[B]`, context
        `[B, Nt, context_in_dim]`, ref_latents `[B, 128, h', w']` each (the k-th at l = -k) ->
        `[B, 128, h, w]`. `y` and `guidance` are ignored (no pooled input, no guidance embedding)."""
        bs, _, h, w = x.shape
        options = dict(transformer_options or {})
        method = kwargs.get("ref_latents_method") or options.get("ref_latents_method")
        if ref_latents and method not in (None, "index"):  # another placement would be silently wrong
            raise Flux3ConfigError(f"FLUX 3: reference latents method {method!r} is not supported; the k-th "
                                   "reference sits at l = -k ('index')")
        img, img_ids = flux3_image_tokens(x)
        cond = cond_ids = None
        if ref_latents:
            pieces = [flux3_image_tokens(ref.to(x), l_coord=-float(k)) for k, ref in enumerate(ref_latents, start=1)]
            cond = torch.cat([p[0] for p in pieces], dim=1)
            cond_ids = torch.cat([p[1] for p in pieces], dim=1)
        target = None
        if self.config.flow_map:
            target = (target_timestep if target_timestep is not None
                      else flow_map_target(timestep, options.get("sample_sigmas")))
            target = target.to(timestep).expand(bs) if target.numel() == 1 else target.to(timestep)
        txt_ids = flux3_text_ids(bs, context.shape[1], x.device)
        out = self.forward_orig(img, img_ids, context, txt_ids, timestep.expand(bs) if timestep.numel() == 1
                                else timestep, cond, cond_ids, target, options)
        return tokens_to_image(out, h, w, 1)  # [B, 128, h, w]
