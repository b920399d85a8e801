"""The Gemma 4 text tower (Google DeepMind 2026, Gemma 4): LTX-2.5's text encoder (Gemma 4 12B, with
LTX's feature projection in the same file), the E2B / E4B models TextGenerate and
TextGenerateLTX2Prompt run, as ComfyUI's `comfy/text_encoders/gemma4.py` (`Gemma4Transformer`,
`TransformerBlockGemma4`, `Gemma4Attention`, the `Gemma4*_Config`s) runs them; written here.

Weights (ComfyUI's names, transformers' `Gemma4TextModel` ones under `model.`): `embed_tokens`,
`layers.N.self_attn.{q,k,v,o}_proj`, `layers.N.self_attn.{q,k}_norm`, the four sandwich norms
`layers.N.{input,post_attention,pre_feedforward,post_feedforward}_layernorm`, `layers.N.mlp.{gate,up,
down}_proj`, the per-block gain `layers.N.layer_scalar` (the marker ComfyUI's `detect_te_model` tells
Gemma 4 by), `norm`; E2B / E4B add the per-layer embeddings ("PLE": `embed_tokens_per_layer`,
`per_layer_model_projection`, `per_layer_projection_norm`, per block `per_layer_input_gate`,
`per_layer_projection`, `post_per_layer_input_norm`). The modules are ours (plain linears and norms
under those names), so every file layout loads through `decoder_llm.load_strict` (shapes checked,
quantised GGUF linears kept quantised); ComfyUI's int8 ConvRot / fp8 scaled / NVFP4 files are
read through `weights.quant_registry` (dequantised as read, `gemma4_load.py`).

What the shapes show (`gemma4_config.Gemma4Config.detect_from_weights`): the widths, heads, block count; the
block types (a global block's per-head norm is wider: `global_head_dim` 512 against 256); whether
a global block's values are its keys (`attention_k_eq_v`: no `v_proj`, 12B's, with one key head);
PLE's width; E2B's double-wide feed-forward on its key/value-sharing blocks (which gives their
count). What they do not show is ComfyUI's configs: RMS epsilon 1e-6, sliding window 1024 for the
12B / 31B and 512 for E2B / E4B, RoPE theta 10 000 on sliding blocks and 1 000 000 with a partial
("proportional") rotation of a quarter of the global head on global ones, E4B's 18 key/value-
sharing blocks, the final-logit soft-cap 30, the stop tokens `<eos>` (1), 50 and `<turn|>` (106).

The block (Gemma 2 / 3's sandwich, with what Gemma 4 changes): h = x + N2(attn(N1(x)));
h = h + N4(mlp(N3(h))); with PLE h = h + N5(proj(gelu_tanh(gate(h)) * ple_i)); out = h * layer_scalar.
Norms scale by `weight` (not Gemma 2 / 3's `1 + weight`). Attention: q and k RMS-normed per head,
v normed per head without a weight; RoPE on q and k (rotate-half; on global blocks only the first
quarter of the frequency pairs turn, the rest have frequency 0); scale 1 (no 1/sqrt(d)); causal,
a sliding block seeing the keys less than `sliding_window` back; grouped heads. Blocks at index >=
`num_layers - num_kv_shared_layers` compute no keys / values: they attend over those of the last
earlier block of their type. Input embeddings are scaled by sqrt(width); PLE's token part by
sqrt(ple width), its context part is `norm(per_layer_model_projection(x) / sqrt(width))`, the two
summed and scaled by 1/sqrt(2).

`hidden_states(ids)` returns what LTX's feature extractor reads (ComfyUI's `intermediate_output=
"all"`): the input embeddings, the output of every block but the last, and the last block's output
through the final norm (`num_layers + 1` states). Generation (`decode_step`, `logits`): a key / value
cache per computing block, the key/value-sharing blocks reading their source block's entries,
logits from the tied token table soft-capped at 30 (ComfyUI's `Gemma4Base.logits`, the 12B's two
suppressed ids included). Media (`prompt_embeds`): the soft tokens of E2B / E4B's vision encoder and
audio conformer (`gemma4_vision.py`, `gemma4_audio.py`) or of the 12B's encoder-free embedders
(`gemma4_media.py`) replace the prompt's placeholders; on the 12B / 31B (`vision_bidirectional`) an
image's soft tokens attend to each other both ways in the prompt's pass (ComfyUI's prefill-only
block mask over the causal one, in every block; a sliding block still only within its window).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.float32_compute import compute_in_float32
from comfy_core.text_encoders.decoder_llm import apply_rotary, embed_tokens, grouped_attention, load_strict
from comfy_core.text_encoders.encoder import TokenEmbedding, resolve_layer
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.gemma import GemmaOptions, GemmaTextEncoder
from comfy_core.text_encoders.gemma4_config import (FULL, GEMMA4_SLOT, IGNORED_PREFIXES, MARKER, SLIDING,
                                                    STOP_TOKENS, TOKENIZER_KEY, Gemma4Config, Gemma4DetectionError,
                                                    Gemma4KeyError)
from comfy_core.text_encoders.generate import GenerationError
from comfy_core.text_encoders.qwen3 import Qwen3Transformer


# --- modules (ComfyUI's / transformers' names; the forward pass is the tower's) ---

class Gemma4RMSNorm(nn.Module):
    """RMS norm scaled by `weight` (Gemma 4's; Gemma 2 / 3 scale by 1 + weight)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.pow(x32.pow(2).mean(-1, keepdim=True) + self.eps, -0.5) * self.weight.float()).to(x.dtype)


def _linear(inputs: int, outputs: int) -> nn.Linear:
    return nn.Linear(inputs, outputs, bias=False)


class Gemma4Attention(nn.Module):
    def __init__(self, config: Gemma4Config, index: int) -> None:
        super().__init__()
        d, kv, k_eq_v = config.attention_shape(index)
        w = config.hidden_size
        self.q_proj = _linear(w, config.num_heads * d)
        self.o_proj = _linear(config.num_heads * d, w)
        self.q_norm = Gemma4RMSNorm(d, config.rms_norm_eps)
        if config.has_kv_weights(index):
            self.k_proj = _linear(w, kv * d)
            self.k_norm = Gemma4RMSNorm(d, config.rms_norm_eps)
            if not k_eq_v:
                self.v_proj = _linear(w, kv * d)


class Gemma4MLP(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = _linear(width, inner)
        self.up_proj = _linear(width, inner)
        self.down_proj = _linear(inner, width)


class Gemma4Block(nn.Module):
    def __init__(self, config: Gemma4Config, index: int) -> None:
        super().__init__()
        w, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Gemma4Attention(config, index)
        self.mlp = Gemma4MLP(w, config.mlp_width(index))
        self.input_layernorm = Gemma4RMSNorm(w, eps)
        self.post_attention_layernorm = Gemma4RMSNorm(w, eps)
        self.pre_feedforward_layernorm = Gemma4RMSNorm(w, eps)
        self.post_feedforward_layernorm = Gemma4RMSNorm(w, eps)
        self.register_buffer("layer_scalar", torch.empty(1))
        if config.hidden_size_per_layer_input:
            ple = config.hidden_size_per_layer_input
            self.per_layer_input_gate = _linear(w, ple)
            self.per_layer_projection = _linear(ple, w)
            self.post_per_layer_input_norm = Gemma4RMSNorm(w, eps)


class Gemma4Model(nn.Module):
    """The decoder's modules under ComfyUI's `model.` names."""

    def __init__(self, config: Gemma4Config) -> None:
        super().__init__()
        self.embed_tokens = TokenEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Gemma4Block(config, i) for i in range(config.num_layers))
        self.norm = Gemma4RMSNorm(config.hidden_size, config.rms_norm_eps)
        ple = config.hidden_size_per_layer_input
        if ple:
            self.embed_tokens_per_layer = TokenEmbedding(config.vocab_size_per_layer_input, config.num_layers * ple)
            self.per_layer_model_projection = _linear(config.hidden_size, config.num_layers * ple)
            self.per_layer_projection_norm = Gemma4RMSNorm(ple, config.rms_norm_eps)


# --- the forward pass ---

def rope_tables(positions: torch.Tensor, head_dim: int, theta: float,
                rotary_fraction: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[T, head_dim]` float32 of the rotate-half RoPE at `positions` [T]; with
    `rotary_fraction` < 1 only the first `fraction * head_dim / 2` frequency pairs turn (the
    exponents still over the whole head: "proportional" RoPE), the others have frequency 0."""
    turning = int(rotary_fraction * head_dim // 2)
    inv = 1.0 / (theta ** (torch.arange(0, 2 * turning, 2, dtype=torch.float32) / head_dim))
    inv = torch.cat([inv, torch.zeros(head_dim // 2 - turning)]).to(positions.device)
    freqs = positions.float()[:, None] * inv[None, :]  # [T, d/2]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def attention_biases(query_positions: torch.Tensor, key_count: int, window: int,
                     mask: torch.Tensor | None = None,
                     blocks: Sequence[tuple[int, int]] = ()) -> dict[str, torch.Tensor]:
    """Additive float32 biases `[B or 1, 1, T, S]` per block type for queries at `query_positions`
    [T] over keys at 0..S-1: causal; sliding: also the keys `window` or more back; the keys the
    token mask [B, S] excludes too. `blocks`: (start, length) position spans whose tokens also see
    each other's later tokens (an image's soft tokens on the 12B, ComfyUI's `vision_bidirectional`)."""
    device = query_positions.device
    low = torch.finfo(torch.float32).min / 4
    query = query_positions[:, None]
    key = torch.arange(key_count, device=device)[None, :]
    causal = key > query
    for start, length in blocks:  # ComfyUI lifts the causal mask inside each image's block
        inside = (query >= start) & (query < start + length) & (key >= start) & (key < start + length)
        causal = causal & ~inside
    out = {}
    for kind, blocked in ((FULL, causal), (SLIDING, causal | (key <= query - window))):
        bias = torch.zeros(blocked.shape, dtype=torch.float32, device=device).masked_fill(blocked, low)[None, None]
        if mask is not None:
            excluded = (mask.to(device) == 0)[:, None, None, :]
            bias = bias + torch.zeros(excluded.shape, dtype=torch.float32, device=device).masked_fill(excluded, low)
        out[kind] = bias
    return out


def _unit_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x normed to unit RMS over its last axis, no weight (Gemma 4's value norm)."""
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)


class Gemma4Cache:
    """Keys and values of the blocks that compute them, for the positions run so far (the
    key/value-sharing blocks read their source block's). `length` advances after each step."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.length = 0

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer in self.keys:
            key = torch.cat((self.keys[layer], key), dim=1)
            value = torch.cat((self.values[layer], value), dim=1)
        self.keys[layer], self.values[layer] = key, value
        return key, value

    def advance(self, steps: int) -> None:
        self.length += steps


class Gemma4TextEncoder(GemmaTextEncoder):
    """One Gemma 4 tower (see the module doc), ComfyUI's `Gemma4Model` surface (an SDClipModel:
    start token `<bos>` 2, pad 0, attention masks) for our encoder sets; it generates."""

    can_generate = True

    def __init__(self, config: Gemma4Config, transformer: Qwen3Transformer) -> None:
        super().__init__(config, transformer)  # type: ignore[arg-type]
        self.options = self.default_options = GemmaOptions(slot=config.slot, token_key=config.slot, layer_idx=None,
                                                           layer_norm_hidden=False)
        self._ple_ids: torch.Tensor | None = None  # the ids of the last embedded tokens (PLE needs them)
        self._image_blocks: list[tuple[int, int]] = []  # the last prompt's image spans (bidirectional ones)

    @property
    def stop_tokens(self) -> tuple[int, ...]:
        return STOP_TOKENS

    # --- embeddings ---

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> input embeddings [B, T, W] float32, scaled by sqrt(W); the ids are kept
        for the next `decode_step`'s per-layer inputs (and no image spans: plain ids)."""
        self._ple_ids = ids
        self._image_blocks = []
        return embed_tokens(self.token_embedding(), ids, self.config.vocab_size, "gemma4", skip_empty=False) \
            * (self.config.hidden_size ** 0.5)

    def per_layer_inputs(self, x: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor | None:
        """PLE: [B, T, L, ple] from the input embeddings x [B, T, W] and the ids [B, T] (None: the
        context part alone, as transformers for embeddings without ids); None without PLE."""
        config: Any = self.config
        ple = config.hidden_size_per_layer_input
        if not ple:
            return None
        model = self.transformer.model
        shape = (*x.shape[:-1], config.num_layers, ple)
        context = compute_in_float32(model.per_layer_model_projection, x) * (config.hidden_size ** -0.5)
        context = compute_in_float32(model.per_layer_projection_norm, context.reshape(shape))
        if ids is None or tuple(ids.shape) != tuple(x.shape[:-1]):
            return context
        table = model.embed_tokens_per_layer
        tokens = embed_tokens(table, ids, config.vocab_size_per_layer_input, "gemma4", skip_empty=False) * (ple ** 0.5)
        return (context + tokens.reshape(shape)) * (0.5 ** 0.5)

    # --- encoding ---

    def _run(self, x: torch.Tensor, ids: torch.Tensor | None, positions: torch.Tensor, mask: torch.Tensor | None,
             cache: Gemma4Cache | None = None, stop_after: int | None = None,
             collect: list[torch.Tensor] | None = None, blocks: Sequence[tuple[int, int]] = ()) -> torch.Tensor:
        """x [B, T, W] at `positions` [T] through the blocks (up to `stop_after`); with `collect`,
        each block's input is appended to it; `blocks`: the bidirectional image spans (`attention_biases`)."""
        config: Any = self.config
        key_count = int(positions[-1]) + 1 if cache is not None else x.shape[1]
        biases = attention_biases(positions, key_count, config.sliding_window, mask, blocks)
        ropes = {SLIDING: rope_tables(positions, config.head_dim, config.rope_local_theta),
                 FULL: rope_tables(positions, config.global_head_dim, config.rope_theta, config.partial_rotary_factor)}
        ple = self.per_layer_inputs(x, ids)
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for index, block in enumerate(self.transformer.model.layers):
            if collect is not None:
                collect.append(x)
            kind = config.layer_type(index)
            x = self._gemma4_block(block, index, x, ropes[kind], biases[kind],
                                   None if ple is None else ple[:, :, index], shared, cache)
            if index == stop_after:
                break
        return x

    def hidden_states(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The input embeddings, every block's output but the last, and the last one through the
        final norm (`num_layers + 1` tensors `[B, T, W]` float32; see the module doc)."""
        if ids.dim() != 2:
            raise TokenizeError(f"gemma4: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        x = self.embed_ids(ids)
        states: list[torch.Tensor] = []
        x = self._run(x, ids, torch.arange(ids.shape[1], device=x.device), attention_mask, collect=states)
        states.append(compute_in_float32(self.transformer.model.norm, x).float())
        return states

    def encode_ids(self, ids: torch.Tensor, overrides: Any = (), layer_idx: int | None = None,
                   layer_norm_hidden: bool = False, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> block `layer_idx`'s output (None: the final normed output) [B, T, W] float32."""
        if overrides:
            raise TokenizeError("gemma4: embedding overrides are not supported by the Gemma 4 tower")
        if ids.dim() != 2:
            raise TokenizeError(f"gemma4: token ids must be [batch, tokens], got shape {tuple(ids.shape)}")
        target = resolve_layer(layer_idx, self.num_layers)
        x = self.embed_ids(ids)
        x = self._run(x, ids, torch.arange(ids.shape[1], device=x.device), attention_mask, stop_after=target)
        if target is None or layer_norm_hidden:
            x = compute_in_float32(self.transformer.model.norm, x)
        return x.float()

    # --- generation ---

    def new_cache(self, batch: int, capacity: int) -> Gemma4Cache:
        return Gemma4Cache()

    @property
    def generation_media(self) -> tuple[str, ...]:
        """The media TextGenerate may give: images and video frames with E2B / E4B's vision encoder
        or the 12B's image embedder, audio with E2B / E4B's conformer or the 12B's audio projector."""
        return tuple(name for name, tower in (("image", "vision"), ("video", "vision"), ("audio", "audio"))
                     if getattr(self, tower, None) is not None)

    def prompt_embeds(self, row: Sequence[Any]) -> torch.Tensor:
        """One token row -> [1, T, W] float32: ids embedded (scaled), an image item (the tokenizer's
        `{"type": "image", "data": [1, H, W, 3], "max_soft_tokens": n}`) or audio item (`{"type":
        "audio", "data": [1, T, 128] log-mel frames, or the 12B's [1, T, 640] waveform frames, "mask":
        [1, T]}`) replaced by the vision / audio tower's soft tokens (`gemma4_vision.py`,
        `gemma4_audio.py`, the 12B's `gemma4_media.py`; not scaled; token id 0 for the per-layer
        inputs, as ComfyUI's). The images' spans are kept for the next prompt pass (bidirectional
        on the 12B / 31B)."""
        device = self.token_embedding().weight.device
        parts: list[torch.Tensor] = []
        ids: list[int] = []
        pending: list[int] = []
        blocks: list[tuple[int, int]] = []

        def flush() -> None:
            if pending:
                parts.append(self.embed_ids(torch.tensor([pending], dtype=torch.long, device=device))[0])
                ids.extend(pending)
                pending.clear()

        for item in row:
            if isinstance(item, int):
                pending.append(item)
                continue
            kind = item.get("type") if isinstance(item, dict) else None
            tower = getattr(self, {"image": "vision", "audio": "audio"}.get(str(kind), ""), None)
            if tower is None:
                raise GenerationError(f"gemma4: this Gemma 4 encoder cannot read {kind or type(item).__name__} "
                                      f"inputs (it reads {', '.join(('text',) + self.generation_media)}; its file "
                                      "has no vision encoder / audio conformer for them, nor the 12B's "
                                      "encoder-free image embedder / audio projector)")
            flush()
            if kind == "image":
                soft = tower(item["data"].to(device), int(item.get("max_soft_tokens", 280)))[0]  # [n, W]
                blocks.append((len(ids), soft.shape[0]))
            else:
                soft = tower(item["data"].to(device), item["mask"].to(device))[0]
            parts.append(soft.float())
            ids.extend([0] * soft.shape[0])
        flush()
        self._ple_ids = torch.tensor([ids], dtype=torch.long, device=device)
        self._image_blocks = blocks
        return torch.cat(parts, dim=0)[None]

    def decode_step(self, embeds: torch.Tensor, cache: Gemma4Cache) -> torch.Tensor:
        """Run embeds [B, T, W] at positions `cache.length ..` through every block (the computing
        blocks' keys and values join the cache) -> the last position's final normed state [B, W]."""
        start, length = cache.length, embeds.shape[1]
        ids = self._ple_ids if self._ple_ids is not None and tuple(self._ple_ids.shape) == tuple(embeds.shape[:2]) \
            else None
        positions = torch.arange(start, start + length, device=embeds.device)
        config: Any = self.config
        blocks: Sequence[tuple[int, int]] = ()
        if start == 0 and config.vision_bidirectional:  # the prompt's pass (ComfyUI: prefill only)
            blocks = [(b, n) for b, n in self._image_blocks if b + n <= length]
        x = self._run(embeds.float(), ids, positions, None, cache=cache, blocks=blocks)
        cache.advance(length)
        return compute_in_float32(self.transformer.model.norm, x[:, -1]).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, W] -> next-token logits [B, vocab] float32 from the tied table, soft-capped
        (`cap * tanh(l / cap)`), the suppressed ids at the lowest value."""
        config: Any = self.config
        weight = self.token_embedding().weight
        out = F.linear(hidden.float(), weight.to(device=hidden.device, dtype=torch.float32))
        cap = config.final_logit_softcapping
        if cap:
            out = cap * torch.tanh(out / cap)
        if config.suppress_tokens:
            out[..., list(config.suppress_tokens)] = torch.finfo(out.dtype).min
        return out

    # --- one block ---

    def _gemma4_block(self, block: nn.Module, index: int, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                      bias: torch.Tensor, ple: torch.Tensor | None,
                      shared: dict[int, tuple[torch.Tensor, torch.Tensor]],
                      cache: Gemma4Cache | None) -> torch.Tensor:
        config: Any = self.config
        d, kv_heads, k_eq_v = config.attention_shape(index)
        attn = block.self_attn
        batch, length, _ = x.shape
        cos, sin = rope
        normed = compute_in_float32(block.input_layernorm, x)
        q = compute_in_float32(attn.q_proj, normed).view(batch, length, config.num_heads, d)
        q = apply_rotary(compute_in_float32(attn.q_norm, q), cos, sin)
        if config.computes_kv(index):
            k = compute_in_float32(attn.k_proj, normed).view(batch, length, kv_heads, d)
            v = k if k_eq_v else compute_in_float32(attn.v_proj, normed).view(batch, length, kv_heads, d)
            k = apply_rotary(compute_in_float32(attn.k_norm, k), cos, sin)
            v = _unit_rms(v, config.rms_norm_eps)
            if cache is not None:
                k, v = cache.update(index, k, v)
            shared[index] = (k, v)
        else:
            k, v = shared[config.kv_source(index)]
        out = grouped_attention(q * math.sqrt(d), k, v, config.num_heads, bias)  # scale 1: undo the backend's 1/sqrt(d)
        x = x + compute_in_float32(block.post_attention_layernorm, compute_in_float32(attn.o_proj, out))
        h = compute_in_float32(block.pre_feedforward_layernorm, x)
        mlp = block.mlp
        inner = F.gelu(compute_in_float32(mlp.gate_proj, h), approximate="tanh") * compute_in_float32(mlp.up_proj, h)
        x = x + compute_in_float32(block.post_feedforward_layernorm, compute_in_float32(mlp.down_proj, inner))
        if ple is not None:
            gate = F.gelu(compute_in_float32(block.per_layer_input_gate, x), approximate="tanh") * ple
            x = x + compute_in_float32(block.post_per_layer_input_norm,
                                       compute_in_float32(block.per_layer_projection, gate))
        return x * block.layer_scalar.to(device=x.device, dtype=torch.float32)


# --- loading ---

def gemma4_state_dict(config: Gemma4Config, state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """The file's tensors under `config.prefix` -> module names (without `model.`). The tokenizer,
    media embedders, LTX's projection and an LM head are skipped (`IGNORED_PREFIXES`); so are the
    unused key / value weights of key/value-sharing blocks; any other key is a `Gemma4KeyError`."""
    wanted = config.weight_shapes()
    model = config.prefix + "model."
    out: dict[str, Any] = {}
    for key in state_dict.keys():
        if not key.startswith(config.prefix):
            continue
        name = key[len(config.prefix):]
        if name.startswith(IGNORED_PREFIXES):
            continue
        inner = name[len("model."):] if key.startswith(model) else None
        if inner is not None and inner.startswith("lm_head."):  # ComfyUI's renamed LM head (tied here)
            continue
        if inner is None or inner not in wanted:
            if inner is not None and _unused_shared_kv(config, inner):
                continue
            raise Gemma4KeyError(f"Gemma 4 key {key!r} is not a weight of this "
                                 f"{config.num_layers}-block Gemma 4 text encoder")
        out[inner] = state_dict[key]
    return out


def _unused_shared_kv(config: Gemma4Config, name: str) -> bool:
    parts = name.split(".")
    return (len(parts) >= 4 and parts[0] == "layers" and parts[1].isdigit()
            and not config.computes_kv(int(parts[1])) and parts[2] == "self_attn"
            and parts[3] in ("k_proj", "v_proj", "k_norm", "v_norm"))


def build_gemma4_encoder(config: Gemma4Config, state_dict: Mapping[str, Any],
                         dtype: torch.dtype | None = None) -> Gemma4TextEncoder:
    """Build on the meta device, then load the file's tensors (`dtype`: storage dtype, None as
    stored; `layer_scalar` and the norms are read as they are stored too)."""
    from comfy_core.checkpoint.meta_build import meta_build

    with meta_build():
        model = Gemma4Model(config)
    load_strict(model, gemma4_state_dict(config, state_dict), config.prefix + "model.", dtype, Gemma4KeyError,
                "Gemma 4", f"Gemma 4 encoder (prefix {config.prefix!r})", f"this {config.num_layers}-block encoder")
    return Gemma4TextEncoder(config, Qwen3Transformer(model))


__all__ = ["FULL", "GEMMA4_SLOT", "Gemma4Cache", "Gemma4Config", "Gemma4DetectionError", "Gemma4KeyError",
           "Gemma4TextEncoder", "MARKER", "SLIDING", "STOP_TOKENS", "TOKENIZER_KEY", "attention_biases",
           "build_gemma4_encoder", "gemma4_state_dict", "rope_tables"]
