"""Text generation with an LLM text encoder (ComfyUI's `TextGenerate`: prompt writing with the loaded
Qwen3 / Gemma / ... encoder), as ComfyUI's `comfy/text_encoders/llama.py` (`BaseGenerate`) runs it;
written here from that behaviour.

Autoregressive decoding (Radford et al. 2019) with a key/value cache: the prompt's embeddings are run
once (prefill), then one token at a time, each step attending over the cached keys and values of
every earlier position. Each step's logits are the final normed state of the last position times
the language-model head (the token table itself when the checkpoint ties them, as Qwen3-4B does).

Choosing the next token (`next_token`), ComfyUI's order:

1. greedy (`do_sample` off, or temperature 0): argmax of the raw logits; nothing else applies;
2. penalties on the tokens seen so far (the generated ones; a caller may seed the set with the
   prompt's): repetition (Keskar et al. 2019, "CTRL": a negative logit times the penalty, a
   positive one divided by it), then presence (the penalty subtracted);
3. temperature: logits divided by it (when it is not 1);
4. top-k (k > 0): the k largest logits, in descending order, and their token ids;
5. min-p (Nguyen et al. 2024, "Min P Sampling"): drop tokens whose probability is below
   `min_p` times the largest probability;
6. top-p / nucleus (Holtzman et al. 2020): in descending order, drop every token whose cumulative
   probability (through itself) exceeds `top_p`; the most likely always stays (transformers'
   `TopPLogitsWarper` would also keep the token that crosses `top_p`; ComfyUI's does not);
7. softmax, one multinomial draw with a `torch.Generator` seeded with `seed` on the logits'
   device, and the drawn position mapped back through the top-k ids.

Dropped tokens get `finfo.min`, not -inf, as ComfyUI's (their probability underflows to 0). The
penalty set starts empty and is created on the first sampled step (never in greedy mode); each
drawn token (of the first row) joins it. Generation stops after `max_length` tokens or on a stop
token, which is returned with the rest (the tokenizer's `decode` drops it as a special token).

The model side is any object with `new_cache`, `prompt_embeds`, `embed_ids`, `decode_step` and
`logits` (`comfy_core/text_encoders/qwen3.py: Qwen3TextEncoder` is one). Its cache is a `KVCache`,
or for a hybrid decoder (`qwen35.py`: Gated DeltaNet layers between attention layers) a
`HybridCache`, which holds a recurrent state for each linear-attention layer instead of keys and values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

from comfy_core.text_encoders.errors import TextEncoderError

Progress = Callable[[int, int], None]


class GenerationError(TextEncoderError, ValueError):
    """Text generation cannot run: an encoder without an LM head, bad sampling options, bad ids."""


@dataclass(frozen=True)
class SamplingOptions:
    """How the next token is chosen (ComfyUI's `CLIP.generate` keywords and defaults)."""

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 0.95
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.do_sample:
            return
        if self.seed is None or isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise GenerationError(f"sampling needs an integer seed, got {self.seed!r}")
        if not -(2 ** 63) <= self.seed < 2 ** 64:
            raise GenerationError(f"seed {self.seed} is outside torch's 64-bit seed range")
        if not self.temperature >= 0:
            raise GenerationError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise GenerationError(f"top_k must be an integer >= 0 (0 keeps every token), got {self.top_k!r}")
        if not 0.0 <= self.top_p <= 1.0:
            raise GenerationError(f"top_p must be in [0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise GenerationError(f"min_p must be in [0, 1], got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise GenerationError(f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty}")
        if not self.presence_penalty >= 0:
            raise GenerationError(f"presence_penalty must be >= 0 (0 is off), got {self.presence_penalty}")

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0.0

    @property
    def penalizes(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0


# --- the sampling maths (pure functions) -------------------------------------------------------------

def apply_penalties(logits: torch.Tensor, seen: torch.Tensor | None, repetition_penalty: float,
                    presence_penalty: float) -> torch.Tensor:
    """logits [B, V] with the seen tokens (`seen` [V] bool) penalised: repetition (negative logits
    times it, others divided by it), then presence (subtracted). A new tensor."""
    if seen is None:
        return logits
    penalised = logits
    if repetition_penalty != 1.0:
        penalised = torch.where(penalised < 0, penalised * repetition_penalty, penalised / repetition_penalty)
    if presence_penalty != 0.0:
        penalised = penalised - presence_penalty
    return torch.where(seen[None, :], penalised, logits)


def top_k_filter(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the k largest logits [B, k] in descending order, their token ids [B, k]); k = 0 keeps
    every token (ids None)."""
    if k <= 0:
        return logits, None
    return torch.topk(logits, min(k, logits.shape[-1]))


def min_p_filter(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """logits [B, N] with tokens below `min_p` times the top probability set to finfo.min."""
    if min_p <= 0.0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values  # [B, 1]
    return logits.masked_fill(probs < threshold, torch.finfo(logits.dtype).min)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """logits [B, N] keeping the nucleus: in descending order, a token is dropped (finfo.min) when
    the cumulative probability through it exceeds `top_p`; the most likely token always stays."""
    if top_p >= 1.0:
        return logits
    ordered, order = torch.sort(logits, descending=True)
    cumulative = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1)
    drop_sorted = cumulative > top_p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, torch.finfo(logits.dtype).min)


def sampling_probs(logits: torch.Tensor, options: SamplingOptions,
                   seen: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(probabilities [B, N], token ids of the N columns [B, N] or None for the whole vocabulary)
    after penalties, temperature, top-k, min-p and top-p, in that order."""
    logits = logits.float()
    if options.penalizes:
        logits = apply_penalties(logits, seen, options.repetition_penalty, options.presence_penalty)
    if options.temperature != 1.0:
        logits = logits / options.temperature
    logits, ids = top_k_filter(logits, options.top_k)
    logits = min_p_filter(logits, options.min_p)
    logits = top_p_filter(logits, options.top_p)
    return torch.softmax(logits, dim=-1), ids


def next_token(logits: torch.Tensor, options: SamplingOptions, generator: torch.Generator | None,
               seen: torch.Tensor | None = None) -> torch.Tensor:
    """The chosen token ids [B, 1] for logits [B, V]."""
    if options.greedy:
        return torch.argmax(logits, dim=-1, keepdim=True)
    probs, ids = sampling_probs(logits, options, seen)
    drawn = torch.multinomial(probs, num_samples=1, generator=generator)  # [B, 1] column
    return drawn if ids is None else ids.gather(1, drawn)


# --- the key/value cache -----------------------------------------------------------------------------

class KVCache:
    """Keys and values of every layer for the positions run so far, preallocated to `capacity`
    positions ([B, capacity, kv_heads, head_dim] per layer). All layers advance together: a step
    writes each layer's new entries at `length`, then `advance` moves on."""

    def __init__(self, layers: int, batch: int, capacity: int, kv_heads: int, head_dim: int,
                 device: torch.device | str, dtype: torch.dtype = torch.float32) -> None:
        shape = (batch, capacity, kv_heads, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.capacity = capacity
        self.length = 0

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the step's key/value [B, T, KV, d] of `layer`; every position's so far [B, length+T, KV, d]."""
        end = self.length + key.shape[1]
        if end > self.capacity:
            raise GenerationError(f"key/value cache holds {self.capacity} positions, {end} were asked for")
        self.keys[layer][:, self.length:end] = key
        self.values[layer][:, self.length:end] = value
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def advance(self, steps: int) -> None:
        self.length += steps


class HybridCache(KVCache):
    """The cache of a hybrid decoder (Qwen3.5: linear-attention layers between full-attention
    ones): keys and values for the full-attention layers only (`update` takes the model's layer
    index), and for each linear-attention layer a fixed-size recurrent state instead (its causal
    convolution's last inputs `conv[layer]` and its state matrices `recurrent[layer]`, None until
    the first step writes them), which does not grow with the positions."""

    def __init__(self, full_layers: Sequence[int], linear_layers: Sequence[int], batch: int, capacity: int,
                 kv_heads: int, head_dim: int, device: torch.device | str) -> None:
        super().__init__(len(full_layers), batch, capacity, kv_heads, head_dim, device)
        self._slot = {layer: index for index, layer in enumerate(full_layers)}
        self.conv: dict[int, torch.Tensor | None] = {layer: None for layer in linear_layers}
        self.recurrent: dict[int, torch.Tensor | None] = {layer: None for layer in linear_layers}
        self.rope_offset = 0  # rotary position minus cache position (M-RoPE prompts with images run behind)

    def update(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().update(self._slot[layer], key, value)


# --- the loop ----------------------------------------------------------------------------------------

@runtime_checkable
class CausalLM(Protocol):
    """What a text encoder offers to generate (see `Qwen3TextEncoder`)."""

    def new_cache(self, batch: int, capacity: int) -> KVCache: ...

    def prompt_embeds(self, row: Sequence[Any]) -> torch.Tensor: ...

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor: ...

    def decode_step(self, embeds: torch.Tensor, cache: KVCache) -> torch.Tensor: ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


def can_generate(model: Any) -> bool:
    """Whether `model` has the generation surface and says it can sample (an LM head or tied table)."""
    return isinstance(model, CausalLM) and bool(getattr(model, "can_generate", True))


def generate_tokens(model: CausalLM, embeds: torch.Tensor, max_length: int, options: SamplingOptions,
                    stop_tokens: Sequence[int] = (), initial_tokens: Sequence[int] = (),
                    progress: Progress | None = None, positions: torch.Tensor | None = None) -> list[int]:
    """Up to `max_length` new token ids after the prompt `embeds` [B, T, W] (float32; B = 1 as
    ComfyUI's loop, which follows the first row), ending early after a stop token (included).

    `initial_tokens`: ids the penalties count as seen from the start (ComfyUI's generic path gives
    none). `progress(done, max_length)` is called after each token; it may raise to stop.
    `positions`: the prompt's own rotary positions (Qwen2.5-VL's M-RoPE [3, T] for a prompt with
    images), given to the model's first `decode_step`; the model continues from them."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise GenerationError(f"max_length must be an integer >= 1, got {max_length!r}")
    if embeds.dim() == 2:
        embeds = embeds[None]
    if embeds.dim() != 3 or embeds.shape[1] < 1:
        raise GenerationError(f"prompt embeddings must be [batch, tokens >= 1, width], got {tuple(embeds.shape)}")
    cache = model.new_cache(embeds.shape[0], embeds.shape[1] + max_length)
    generator = None
    if not options.greedy:
        generator = torch.Generator(device=embeds.device).manual_seed(options.seed)
    stops = {int(t) for t in stop_tokens}
    seen: torch.Tensor | None = None
    generated: list[int] = []
    step_input = embeds
    for step in range(max_length):
        if step == 0 and positions is not None:
            hidden = model.decode_step(step_input, cache, positions)  # type: ignore[call-arg]
        else:
            hidden = model.decode_step(step_input, cache)  # [B, W], the last position's final normed state
        logits = model.logits(hidden)  # [B, V] float32
        if seen is None and not options.greedy and options.penalizes:
            seen = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            if len(initial_tokens):
                seen[torch.tensor([int(t) for t in initial_tokens], device=logits.device)] = True
        token = next_token(logits, options, generator, seen)  # [B, 1]
        if seen is not None:
            seen[token[0]] = True
        token_id = int(token[0, 0])
        generated.append(token_id)
        if progress is not None:
            progress(step + 1, max_length)
        if token_id in stops:
            break
        step_input = model.embed_ids(token)  # [B, 1, W]
    return generated


def generating_encoder(encoders: Any) -> tuple[str, Any]:
    """(slot, tower) of an encoder set that generates: the set's main tower (ComfyUI's
    `SD1ClipModel.clip`, else its first), which must have an LM head (`can_generate`)."""
    slot = getattr(encoders, "clip", None)
    children = dict(encoders.named_children())
    if slot not in children:
        slot = next(iter(children), None)
    tower = children.get(slot)
    if tower is None or not can_generate(tower):
        raise GenerationError(f"the text encoder {slot!r} ({type(tower).__name__}) cannot generate text: "
                              f"generation needs an LLM text encoder with a language-model head (Qwen3, Qwen2.5-VL)")
    return slot, tower


def generate_with_clip(clip: Any, tokens: Any, max_length: int, options: SamplingOptions,
                       progress: Progress | None = None) -> list[int]:
    """ComfyUI's `CLIP.generate`: the generated token ids for `clip.tokenize(...)`'s tokens, run by
    the CLIP's main tower with its patches (LoRA) applied, stopping at the tower's stop tokens.

    `tokens`: the tokenizer's dict (ComfyUI reads its first entry) or the rows themselves; a
    prompt is one row (ids, or embedding vectors the tower splices in)."""
    rows = next(iter(tokens.values()), None) if isinstance(tokens, dict) else tokens
    if not rows or len(rows) != 1:
        raise GenerationError(f"generation takes one token row, got {0 if not rows else len(rows)}")
    row = [item[0] if isinstance(item, tuple) else item for item in rows[0]]
    with clip.patcher.applied() as encoders:
        _, tower = generating_encoder(encoders)
        with torch.no_grad():
            if hasattr(tower, "prompt_inputs"):  # a prompt with its own positions (Qwen2.5-VL's images)
                embeds, positions = tower.prompt_inputs(row)
            else:
                embeds, positions = tower.prompt_embeds(row), None  # [1, T, W]
            return generate_tokens(tower, embeds, max_length, options, tuple(getattr(tower, "stop_tokens", ())),
                                   progress=progress, positions=positions)
