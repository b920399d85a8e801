"""MiniMax Music 3's autoregressive stage, the model behind its "text encoder" file
(`minimax_music3_text_encoder_*.safetensors`): a Qwen3-8B-shaped language model (the global LM)
that writes one semantic audio code per 40 ms frame after the prompt, and the RVQ depth decoder
(a 4-layer local LM) that writes the frame's seven residual codes; the per-frame hidden states
(the LM's and the depth decoder's seven) are the conditioning of the DiT.

After ComfyUI's `comfy/ldm/minimax_music/ar.py: MiniMaxMusic3AR` (its generation, its layouts)
and `comfy/text_encoders/minimax_music.py` (the model config: 36 layers, 32 heads / 8 key-value
heads of 128, RoPE base 1e6, RMSNorm eps 1e-6; the depth decoder's 16 heads); equal to diffusers'
`Qwen3ForCausalLM` + `MiniMaxMusic3RVQDepthDecoder` run by its `MiniMaxMusic3AutoregressiveStep`.
Written here from that behaviour.

Layouts (names under `model.`): the full one (`embed_tokens` and `lm_head` over the 200,000-token
vocabulary, separate `q/k/v_proj` and `gate/up_proj`) and the pruned one of Comfy-Org's files
(`embed_tokens_prefill` over the first 151,675 ids for the prompt, `embed_tokens_audio` over the
16,384 semantic codes, `lm_head_pruned` scoring [end, code 0, ..., code 16383], fused `qkv_proj`
= [q ; k ; v] and `gate_up_proj` = [gate ; up] in the LM and the depth decoder). Int8 ConvRot files
are read dequantised (`clip.py`). `audio_extra_embedding` embeds the residual codes (codebook i at
rows i x 1024 ..), `audio_decoder.{projection, pos_embedding (16), layers, norm, audio_heads}`.

Generation (`generate`), per ComfyUI:
- the prompt ids and their unconditional copy (every id but the first and the last two replaced by
  `<|audio_cfg|>` 151654) run as a batch of two through the LM (causal, a key/value cache);
- each step scores the semantic codes (and the end token) from the last final-normed state of
  both rows, guides them `u + cfg_scale (c - u)`, keeps the codes whose conditional score is in
  the conditional row's top-k (others -inf), and draws one from the top-k of the guided scores'
  softmax with `torch.multinomial` and a generator seeded with `derive_seed(seed, "ar")`
  (blake2b-8 personalised "minimax-ttm" over the seed's 8 little-endian bytes, then each part's
  length and UTF-8 bytes; 63 bits);
- the depth decoder, fed `[projection(state), projection(code embedding), projection(residual
  embeddings so far)]` with learned positions (causal, no RoPE, re-run on the whole sequence each
  time), draws codes 1..7 the same way from its heads (guided by the same scale and top-k);
- the frame's conditioning: `[LM state, the depth decoder's seven states]` of the conditional row
  (`8 x width`); the frame's eight codes, embedded as `(code embedding + sum of residual
  embeddings) / sqrt(8)`, feed both rows of the LM;
- the first step only moves past `<|audio_start|>` (its frame is not kept); generation ends on the
  end code or after `max_audio_frames` frames (9,000 at most), and a frame is kept only when its
  own code is not the end.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

AUDIO_CODE_OFFSET = 151675
SPECIAL_TOKEN_IDS = {
    "<|im_start|>": 151644, "<|im_end|>": 151645, "<|audio_cfg|>": 151654, "<|audio_start|>": 151669,
    "<|audio_end|>": 151670, "<|caption_start|>": 151671, "<|caption_end|>": 151672,
    "<|lyrics_start|>": 151673, "<|lyrics_end|>": 151674,
}
AUDIO_END = SPECIAL_TOKEN_IDS["<|audio_end|>"]
AUDIO_CFG = SPECIAL_TOKEN_IDS["<|audio_cfg|>"]
CFG_SCALE = 1.5
CFG_TOP_K = 50
C0_VOCAB_SIZE = 16384
MAX_PROMPT_TOKENS = 5000
MAX_AUDIO_FRAMES = 9000
AUDIO_FRAMES_PER_SECOND = 25
DECODER_HEADS = 16  # ComfyUI's config (the weights cannot show it)
ROPE_THETA = 1_000_000.0
EPS = 1e-6

Progress = Callable[[int, int], None]


class MiniMaxMusic3TextConfigError(ValueError):
    """Weights that do not form MiniMax Music 3's AR text encoder."""


class MiniMaxMusic3GenerationError(ValueError):
    """A prompt or setting the AR stage cannot run."""


def derive_seed(seed: int, *parts: Any) -> int:
    """ComfyUI's seed derivation for MiniMax Music 3 (see the module docstring)."""
    digest = hashlib.blake2b(digest_size=8, person=b"minimax-ttm")
    digest.update(int(seed).to_bytes(8, "little", signed=False))
    for part in parts:
        data = str(part).encode("utf-8")
        digest.update(len(data).to_bytes(4, "little") + data)
    return int.from_bytes(digest.digest(), "little") & ((1 << 63) - 1)


@dataclass(frozen=True)
class MusicARConfig:
    hidden: int = 4096
    layers: int = 36
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 12288
    vocab_size: int = 200000  # the full layout's; the pruned one scores C0_VOCAB_SIZE + 1 rows
    pruned_embedding: bool = True
    pruned_lm_head: bool = True
    merged_qkv: bool = True
    merged_mlp: bool = True
    c0_vocab: int = C0_VOCAB_SIZE
    audio_vocab: int = 1024
    codebooks: int = 8
    decoder_layers: int = 4
    decoder_heads: int = DECODER_HEADS
    decoder_intermediate: int = 6144
    decoder_positions: int = 16
    decoder_merged_qkv: bool = True
    decoder_merged_mlp: bool = True

    @property
    def frame_width(self) -> int:
        """The width of one frame's conditioning: the LM state and the depth decoder's states."""
        return self.codebooks * self.hidden

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any]) -> "MusicARConfig":
        def shape(name: str) -> tuple[int, ...]:
            try:
                return tuple(tensors[name].shape)
            except KeyError:
                raise MiniMaxMusic3TextConfigError(f"MiniMax Music 3 text encoder: {name!r} is missing") from None

        def count(head: str) -> int:
            n = 0
            while f"{head}{n}.input_layernorm.weight" in tensors:
                n += 1
            return n

        hidden = shape("model.norm.weight")[0]
        head_dim = shape("model.layers.0.self_attn.q_norm.weight")[0]
        heads = shape("model.layers.0.self_attn.o_proj.weight")[1] // head_dim
        merged_qkv = "model.layers.0.self_attn.qkv_proj.weight" in tensors
        if merged_qkv:
            kv_heads = (shape("model.layers.0.self_attn.qkv_proj.weight")[0] - heads * head_dim) // (2 * head_dim)
        else:
            kv_heads = shape("model.layers.0.self_attn.k_proj.weight")[0] // head_dim
        merged_mlp = "model.layers.0.mlp.gate_up_proj.weight" in tensors
        intermediate = shape("model.layers.0.mlp.down_proj.weight")[1]
        pruned_embedding = "model.embed_tokens_prefill.weight" in tensors
        pruned_lm_head = "model.lm_head_pruned.weight" in tensors
        if pruned_embedding:
            vocab = shape("model.embed_tokens_prefill.weight")[0]
            if vocab != AUDIO_CODE_OFFSET:
                raise MiniMaxMusic3TextConfigError(f"MiniMax Music 3 text encoder: embed_tokens_prefill has {vocab} "
                                                   f"rows, not {AUDIO_CODE_OFFSET}")
            c0_vocab = shape("model.embed_tokens_audio.weight")[0]
            vocab = AUDIO_CODE_OFFSET + c0_vocab
        else:
            vocab = shape("model.embed_tokens.weight")[0]
            c0_vocab = C0_VOCAB_SIZE
        if pruned_lm_head and shape("model.lm_head_pruned.weight")[0] != c0_vocab + 1:
            raise MiniMaxMusic3TextConfigError("MiniMax Music 3 text encoder: lm_head_pruned must score the end token "
                                               f"and {c0_vocab} codes")
        if not pruned_lm_head:
            vocab = shape("model.lm_head.weight")[0]
        if vocab < AUDIO_CODE_OFFSET + c0_vocab:
            raise MiniMaxMusic3TextConfigError(f"MiniMax Music 3 text encoder: a {vocab}-token vocabulary has no room "
                                               f"for the {c0_vocab} audio codes after id {AUDIO_CODE_OFFSET}")
        layers = count("model.layers.")
        decoder_layers = count("model.audio_decoder.layers.")
        codebooks = 1 + sum(1 for i in range(64) if f"model.audio_decoder.audio_heads.{i}.weight" in tensors)
        audio_vocab = shape("model.audio_decoder.audio_heads.0.weight")[0]
        d = "model.audio_decoder.layers.0."
        if layers == 0 or decoder_layers == 0:
            raise MiniMaxMusic3TextConfigError("MiniMax Music 3 text encoder: no layers")
        if hidden % DECODER_HEADS:
            raise MiniMaxMusic3TextConfigError(f"MiniMax Music 3 text encoder: width {hidden} does not split into "
                                               f"{DECODER_HEADS} depth-decoder heads")
        return cls(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                   intermediate=intermediate, vocab_size=vocab, pruned_embedding=pruned_embedding,
                   pruned_lm_head=pruned_lm_head, merged_qkv=merged_qkv, merged_mlp=merged_mlp, c0_vocab=c0_vocab,
                   audio_vocab=audio_vocab, codebooks=codebooks, decoder_layers=decoder_layers,
                   decoder_intermediate=shape(d + "mlp.down_proj.weight")[1],
                   decoder_positions=shape("model.audio_decoder.pos_embedding.weight")[0],
                   decoder_merged_qkv=d + "self_attn.qkv_proj.weight" in tensors,
                   decoder_merged_mlp=d + "mlp.gate_up_proj.weight" in tensors)


# --- layers: weights kept in their storage dtype, every product in the input's dtype ---------

class ARLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))


class AREmbedding(nn.Embedding):
    def embed(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return F.embedding(ids, self.weight).to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), EPS).to(x.dtype)


def _linear(cin: int, cout: int) -> ARLinear:
    return ARLinear(cin, cout, bias=False)


class Projections(nn.Module):
    """q, k, v from separate or fused (`qkv_proj` = [q ; k ; v]) weights."""

    def __init__(self, width: int, q: int, kv: int, merged: bool) -> None:
        super().__init__()
        self.merged, self.sizes = merged, (q, kv, kv)
        if merged:
            self.qkv_proj = _linear(width, q + 2 * kv)
        else:
            self.q_proj, self.k_proj, self.v_proj = _linear(width, q), _linear(width, kv), _linear(width, kv)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.merged:
            return self.qkv_proj(x).split(self.sizes, dim=-1)  # type: ignore[return-value]
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


class MLP(nn.Module):
    """SwiGLU `down(silu(gate x) * up x)`, gate and up separate or fused (`gate_up_proj` = [gate ; up])."""

    def __init__(self, width: int, inner: int, merged: bool) -> None:
        super().__init__()
        self.merged = merged
        if merged:
            self.gate_up_proj = _linear(width, 2 * inner)
        else:
            self.gate_proj, self.up_proj = _linear(width, inner), _linear(width, inner)
        self.down_proj = _linear(inner, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.merged:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class LayerCache:
    """One layer's keys and values, written into buffers of `capacity` positions (allocated on the
    first write, as ComfyUI's `init_kv_cache` sizes them for the prompt and every frame) so a step
    copies only its own position."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length = capacity, 0
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v `[B, H, T, D]` appended -> every position's so far."""
        end = self.length + k.shape[2]
        if self.k is None:
            shape = (k.shape[0], k.shape[1], max(self.capacity, end), k.shape[3])
            self.k, self.v = k.new_empty(shape), v.new_empty(shape)
        elif end > self.k.shape[2]:  # past the planned length: grow
            grow = (0, 0, 0, end - self.k.shape[2])
            self.k, self.v = F.pad(self.k, grow), F.pad(self.v, grow)
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class LMAttention(Projections):
    def __init__(self, config: MusicARConfig) -> None:
        super().__init__(config.hidden, config.heads * config.head_dim, config.kv_heads * config.head_dim,
                         config.merged_qkv)
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.q_norm = RMSNorm(config.head_dim)
        self.k_norm = RMSNorm(config.head_dim)
        self.o_proj = _linear(config.heads * config.head_dim, config.hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: LayerCache | None
                ) -> torch.Tensor:
        """x `[B, T, W]` at the positions of cos / sin `[T, D]`; `cache`: this layer's keys and values
        so far, extended."""
        b, n, _ = x.shape
        q, k, v = self.qkv(x)
        q = self.q_norm(q.reshape(b, n, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(k.reshape(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = v.reshape(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if cache is not None:
            k, v = cache.extend(k, v)
        grouped = self.heads != self.kv_heads  # grouped-query heads read without copying the cache
        if n == 1 or k.shape[2] == n:  # one new position, or the prompt from position 0
            out = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1, enable_gqa=grouped)
        else:  # a block after cached positions: causal within the block
            mask = torch.ones(n, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - n)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=grouped)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-second, first), dim=-1) * sin.to(x.dtype)


def rope_tables(start: int, length: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(start, start + length, device=device, dtype=torch.float32), inv_freq)
    freqs = torch.cat((freqs, freqs), dim=-1)
    return freqs.cos(), freqs.sin()


class LMBlock(nn.Module):
    def __init__(self, config: MusicARConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden)
        self.self_attn = LMAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden)
        self.mlp = MLP(config.hidden, config.intermediate, config.merged_mlp)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: LayerCache | None
                ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DepthAttention(Projections):
    def __init__(self, width: int, heads: int, merged: bool) -> None:
        super().__init__(width, width, width, merged)
        self.heads = heads
        self.o_proj = _linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        q, k, v = (t.reshape(b, n, self.heads, w // self.heads).transpose(1, 2) for t in self.qkv(x))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, w))


class DepthBlock(nn.Module):
    def __init__(self, config: MusicARConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden)
        self.self_attn = DepthAttention(config.hidden, config.decoder_heads, config.decoder_merged_qkv)
        self.post_attention_layernorm = RMSNorm(config.hidden)
        self.mlp = MLP(config.hidden, config.decoder_intermediate, config.decoder_merged_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class RVQDepthDecoder(nn.Module):
    """The depth decoder: `[B, S, W]` projected inputs -> normed states `[B, S, W]`."""

    def __init__(self, config: MusicARConfig) -> None:
        super().__init__()
        self.projection = _linear(config.hidden, config.hidden)
        self.pos_embedding = AREmbedding(config.decoder_positions, config.hidden)
        self.audio_heads = nn.ModuleList(_linear(config.hidden, config.audio_vocab)
                                         for _ in range(config.codebooks - 1))
        self.layers = nn.ModuleList(DepthBlock(config) for _ in range(config.decoder_layers))
        self.norm = RMSNorm(config.hidden)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(sequence.shape[1], device=sequence.device)
        x = sequence + self.pos_embedding.embed(positions, sequence.dtype).unsqueeze(0)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class _Body(nn.Module):
    """What the file holds under `model.` (see the module docstring)."""

    def __init__(self, config: MusicARConfig) -> None:
        super().__init__()
        if config.pruned_embedding:
            self.embed_tokens_prefill = AREmbedding(AUDIO_CODE_OFFSET, config.hidden)
            self.embed_tokens_audio = AREmbedding(config.c0_vocab, config.hidden)
        else:
            self.embed_tokens = AREmbedding(config.vocab_size, config.hidden)
        self.layers = nn.ModuleList(LMBlock(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.hidden)
        if config.pruned_lm_head:
            self.lm_head_pruned = _linear(config.hidden, config.c0_vocab + 1)
        else:
            self.lm_head = _linear(config.hidden, config.vocab_size)
        self.audio_extra_embedding = AREmbedding(config.audio_vocab * (config.codebooks - 1), config.hidden)
        self.audio_decoder = RVQDepthDecoder(config)


def sample_top_k(logits: torch.Tensor, top_k: int, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row from the softmax of the `top_k` best of `logits` `[B, N]` -> `[B]`."""
    values = torch.nan_to_num(logits.float(), nan=-1e9, posinf=1e9, neginf=-1e9)
    threshold = torch.topk(values, min(int(top_k), values.shape[-1]), dim=-1).values[..., -1:]
    values = values.masked_fill(values < threshold, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(values, dim=-1), nan=0.0)
    probs = probs / probs.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _guided(logits: torch.Tensor, cfg_scale: float) -> torch.Tensor:
    conditioned, unconditioned = logits[0:1].float(), logits[1:2].float()
    return unconditioned + (conditioned - unconditioned) * cfg_scale


def execution_dtype(device: torch.device) -> torch.dtype:
    """ComfyUI runs the AR stage in bf16 where the device does it well, else float32."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


class MiniMaxMusic3AR(nn.Module):
    """The AR stage (see the module docstring); `model` holds the file's tensors."""

    def __init__(self, config: MusicARConfig) -> None:
        super().__init__()
        self.config = config
        self.model = _Body(config)

    # --- the LM ---

    def embed_prompt(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        body = self.model
        table = body.embed_tokens_prefill if self.config.pruned_embedding else body.embed_tokens
        return table.embed(ids, dtype)

    def embed_c0(self, codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.config.pruned_embedding:
            return self.model.embed_tokens_audio.embed(codes, dtype)
        return self.model.embed_tokens.embed(codes + AUDIO_CODE_OFFSET, dtype)

    def new_cache(self, capacity: int) -> list[LayerCache]:
        return [LayerCache(capacity) for _ in self.model.layers]

    def lm_forward(self, embeds: torch.Tensor, start: int, cache: list[LayerCache] | None) -> torch.Tensor:
        """embeds `[B, T, W]` at positions start.. -> final-normed states `[B, T, W]`."""
        cos, sin = rope_tables(start, embeds.shape[1], self.config.head_dim, embeds.device)
        x = embeds
        for index, block in enumerate(self.model.layers):
            x = block(x, cos, sin, None if cache is None else cache[index])
        return self.model.norm(x)

    # --- one frame ---

    def sample_c0(self, hidden: torch.Tensor, cfg_scale: float, top_k: int, generator: torch.Generator | None
                  ) -> tuple[torch.Tensor, bool]:
        """hidden `[2, W]` -> (the code `[1]` (0 for the end), whether it is the end)."""
        if self.config.pruned_lm_head:
            logits = self.model.lm_head_pruned(hidden).float()
            conditioned = logits[0:1]
            guided = _guided(logits, cfg_scale)
            threshold = torch.topk(conditioned, top_k, dim=-1).values[..., -1:]
            code = sample_top_k(guided.masked_fill(conditioned < threshold, float("-inf")), top_k, generator)
            end = bool(code.item() == 0)
            return torch.where(code == 0, 0, code - 1), end
        logits = self.model.lm_head(hidden).float()
        mask = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
        mask[AUDIO_CODE_OFFSET:AUDIO_CODE_OFFSET + self.config.c0_vocab] = False
        mask[AUDIO_END] = False
        logits = logits.masked_fill(mask, float("-inf"))
        conditioned = logits[0:1]
        threshold = torch.topk(conditioned, top_k, dim=-1).values[..., -1:]
        guided = _guided(logits, cfg_scale).masked_fill(conditioned < threshold, float("-inf")).masked_fill(
            mask, float("-inf"))
        code = sample_top_k(guided, top_k, generator)
        end = bool(code.item() == AUDIO_END)
        return torch.where(code == AUDIO_END, 0, code - AUDIO_CODE_OFFSET), end

    def depth_codes(self, hidden: torch.Tensor, c0: torch.Tensor, cfg_scale: float, top_k: int,
                    generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden `[2, W]`, c0 `[2]` -> (codes `[2, codebooks]`, the conditional row's depth states
        `[1, (codebooks - 1) W]`)."""
        decoder, dtype = self.model.audio_decoder, hidden.dtype
        vocab = self.config.audio_vocab
        sequence = [decoder.projection(hidden).unsqueeze(1), decoder.projection(self.embed_c0(c0, dtype)).unsqueeze(1)]
        codes, states = [c0], []
        for index in range(1, self.config.codebooks):
            out = decoder(torch.cat(sequence, dim=1))[:, -1]  # [2, W]
            states.append(out[:1])
            logits = decoder.audio_heads[index - 1](out)
            code = sample_top_k(_guided(logits, cfg_scale), top_k, generator).repeat(2)
            codes.append(code)
            if index < self.config.codebooks - 1:
                embedded = self.model.audio_extra_embedding.embed(code + (index - 1) * vocab, dtype)
                sequence.append(decoder.projection(embedded).unsqueeze(1))
        return torch.stack(codes, dim=1), torch.cat(states, dim=-1)

    def embed_frame(self, codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """codes `[2, codebooks]` -> the LM's next input `[2, 1, W]`."""
        c0 = self.embed_c0(codes[:, 0], dtype)
        offsets = torch.arange(self.config.codebooks - 1, device=codes.device) * self.config.audio_vocab
        extra = self.model.audio_extra_embedding.embed(codes[:, 1:] + offsets, dtype).sum(dim=1)
        return ((c0 + extra) * self.config.codebooks ** -0.5).unsqueeze(1)

    # --- the whole stage ---

    def generate(self, input_ids: Sequence[int] | torch.Tensor, seed: int, max_audio_frames: int,
                 cfg_scale: float = CFG_SCALE, top_k: int = CFG_TOP_K, dtype: torch.dtype | None = None,
                 progress: Progress | None = None) -> torch.Tensor:
        """The prompt's ids -> the per-frame conditioning `[frames, codebooks x W]` (on the CPU, in
        the execution dtype: ComfyUI's bf16 where the device does it well, else float32)."""
        ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
        if ids.shape[1] > MAX_PROMPT_TOKENS:
            raise MiniMaxMusic3GenerationError(f"MiniMax Music3 prompt has {ids.shape[1]} tokens; maximum is "
                                               f"{MAX_PROMPT_TOKENS}")
        if ids.shape[1] < 3:
            raise MiniMaxMusic3GenerationError("MiniMax Music3 prompt is too short (tokenize with its tokenizer)")
        reference = next(self.parameters())
        device = reference.device
        dtype = dtype or execution_dtype(device)
        ids = ids.to(device)
        unconditioned = ids.clone()
        unconditioned[:, 1:-2] = AUDIO_CFG
        limit = min(int(max_audio_frames), MAX_AUDIO_FRAMES)
        if limit < 1:
            raise MiniMaxMusic3GenerationError(f"MiniMax Music3: max_audio_frames must be at least 1, got {limit}")
        cache = self.new_cache(ids.shape[1] + limit + 1)
        with torch.no_grad():
            embeds = self.embed_prompt(torch.cat((ids, unconditioned), dim=0), dtype)
            position = embeds.shape[1]
            last = self.lm_forward(embeds, 0, cache)[:, -1]  # [2, W]
            generator = torch.Generator(device=device).manual_seed(derive_seed(seed, "ar"))
            frames: list[torch.Tensor] = []
            for step in range(limit + 1):
                c0, end = self.sample_c0(last, cfg_scale, top_k, generator)
                if end:
                    break
                codes, depth = self.depth_codes(last, c0.repeat(2), cfg_scale, top_k, generator)
                if step > 0:
                    frames.append(torch.cat((last[:1], depth), dim=-1)[0])
                    if progress is not None:
                        progress(len(frames), limit)
                    if len(frames) >= limit:
                        break
                last = self.lm_forward(self.embed_frame(codes, dtype), position, cache)[:, -1]
                position += 1
        if not frames:
            raise MiniMaxMusic3GenerationError("MiniMax Music3 generated zero audio frames")
        return torch.stack(frames).to("cpu")


def build_from_state(state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None,
                     config: MusicARConfig | None = None) -> MiniMaxMusic3AR:
    """The AR stage from tensors in the file's names (float; `dtype`: the storage dtype, None: as
    given)."""
    config = config or MusicARConfig.detect_from_weights(state)
    with torch.device("meta"):
        model = MiniMaxMusic3AR(config)
    wanted = set(model.state_dict())
    given = {name for name in state if name != "tokenizer_json"}
    missing, unexpected = sorted(wanted - given), sorted(given - wanted)
    if missing or unexpected:
        raise MiniMaxMusic3TextConfigError(f"MiniMax Music 3 text encoder: missing {missing[:8]}, unexpected "
                                           f"{unexpected[:8]}")
    model.load_state_dict({name: (state[name] if dtype is None else state[name].to(dtype)) for name in wanted},
                          strict=True, assign=True)
    return model.eval().requires_grad_(False)


__all__ = ["AUDIO_CODE_OFFSET", "AUDIO_FRAMES_PER_SECOND", "C0_VOCAB_SIZE", "CFG_SCALE", "CFG_TOP_K",
           "MAX_AUDIO_FRAMES", "MAX_PROMPT_TOKENS", "MiniMaxMusic3AR", "MiniMaxMusic3GenerationError",
           "MiniMaxMusic3TextConfigError", "MusicARConfig", "SPECIAL_TOKEN_IDS", "build_from_state",
           "derive_seed", "sample_top_k"]
