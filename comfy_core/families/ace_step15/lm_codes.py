"""ACE-Step 1.5's audio-code language model pass: the 5 Hz LM (Qwen3 1.7B / 4B with 64,000 audio
code tokens after Qwen's vocabulary) writes one FSQ code per 0.2 s of audio, which the DiT reads as
its structure hints. Written here from ComfyUI's behaviour (`comfy/text_encoders/ace15.py:
generate_audio_codes`, `sample_manual_loop_no_classes`), so a seed gives ComfyUI's codes:

- the prompt and the negative prompt (classifier-free guidance on the LM, Ho & Salimans 2022, when
  `cfg_scale` is not 1) are left-padded with the pad token 151643 to one length and run as a batch
  of two; the pads are masked out of attention (their positions still count for RoPE);
- each step takes the last position's final normed state and scores only the audio-code rows of
  the token table (ids 151669 .. 215668) and, once `min_tokens` steps have passed, the end token
  151645 (its score put first); guided scores `uncond + cfg (cond - uncond)`;
- filtering in ComfyUI's order: top-k (k > 0), min-p (> 0; Nguyen et al. 2024), top-p (< 1;
  Holtzman et al. 2020: the sorted tokens past the cumulative probability `top_p` dropped, the one
  that crosses it kept), dropped scores set to the dtype's lowest value;
- temperature > 0: scores / temperature written into a row as wide as the whole vocabulary (lowest
  value elsewhere) and one `torch.multinomial` draw with a `torch.Generator` seeded with `seed` on
  the model's device (the row's width matters: it is how many random numbers a draw uses);
  temperature 0: the argmax;
- the drawn token (the conditional row's) is fed to both rows; generation stops at `max_tokens` or
  on the end token; the codes are the drawn ids minus 151669.

ComfyUI passes `min_tokens` as the maximum too (duration x 5 codes), so the end token never
becomes eligible and a song of N seconds gets exactly 5 N codes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from comfy_core.text_encoders.decoder_llm import prenorm_block, rotary_tables
from comfy_core.text_encoders.generate import GenerationError, KVCache
from comfy_core.models.float32_compute import compute_in_float32

AUDIO_START = 151669  # first audio-code token
AUDIO_END = 215669  # one past the last (64,000 codes)
EOS = 151645  # <|im_end|>
PAD = 151643  # <|endoftext|>

Progress = Callable[[int, int], None]


def filter_scores(scores: torch.Tensor, top_k: int, min_p: float, top_p: float) -> torch.Tensor:
    """scores `[1, N]` -> the same with the filtered-out entries at the dtype's lowest value
    (see the module doc for the order and rules)."""
    low = torch.finfo(scores.dtype).min
    scores = scores.clone()
    if top_k is not None and top_k > 0:
        kth = torch.topk(scores, min(int(top_k), scores.shape[-1])).values[..., -1:]
        scores[scores < kth] = low
    if min_p is not None and min_p > 0:
        probs = torch.softmax(scores, dim=-1)
        scores[probs < min_p * probs.max(dim=-1, keepdim=True).values] = low
    if top_p is not None and top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        beyond = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1) > top_p
        beyond[..., 1:] = beyond[..., :-1].clone()
        beyond[..., 0] = False
        drop = torch.zeros_like(beyond).scatter_(1, order, beyond)
        scores[drop] = low
    return scores


def choose_code(code_scores: torch.Tensor, eos_scores: torch.Tensor | None, cfg_scale: float, temperature: float,
                top_k: int, min_p: float, top_p: float, vocab_size: int,
                generator: torch.Generator | None) -> int:
    """One step's token id from the audio-code scores `[B, codes]` (row 0 the prompt, row 1 the
    negative when guided) and the end token's `[B]` (None while it is not eligible)."""
    if cfg_scale != 1.0:
        scores = code_scores[1:2] + cfg_scale * (code_scores[0:1] - code_scores[1:2])
        eos = None if eos_scores is None else eos_scores[1:2] + cfg_scale * (eos_scores[0:1] - eos_scores[1:2])
    else:
        scores = code_scores[0:1]
        eos = None if eos_scores is None else eos_scores[0:1]
    if eos is not None:
        scores = torch.cat([eos[:, None], scores], dim=1)  # the end token's score first
    scores = filter_scores(scores, top_k, min_p, top_p)
    if temperature > 0:
        scores = scores / temperature
        row = scores.new_full((1, vocab_size), torch.finfo(scores.dtype).min)
        if eos is not None:
            row[:, EOS] = scores[:, 0]
            scores = scores[:, 1:]
        row[:, AUDIO_START:AUDIO_START + scores.shape[1]] = scores
        return int(torch.multinomial(torch.softmax(row, dim=-1), 1, generator=generator)[0, 0])
    best = int(torch.argmax(scores, dim=-1)[0])
    if eos is not None:
        return EOS if best == 0 else best - 1 + AUDIO_START
    return best + AUDIO_START


def _step(model: Any, embeds: torch.Tensor, cache: KVCache, key_mask: torch.Tensor) -> torch.Tensor:
    """Run embeds `[B, T, W]` at the cache's next positions through every block (keys of masked
    positions excluded) -> the last position's final normed state `[B, W]` float32."""
    config = model.config
    start, length = cache.length, embeds.shape[1]
    total = start + length
    cos, sin = rotary_tables(total, config.head_dim, config.rope_theta, embeds.device)
    cos, sin = cos[start:], sin[start:]
    low = torch.finfo(torch.float32).min / 4
    causal = torch.full((length, total), low, device=embeds.device).triu_(start + 1)  # [T, S]
    bias = causal[None, None] + (1.0 - key_mask[:, None, None, :total].float()) * low  # [B, 1, T, S]
    x = embeds.float()
    for index, block in enumerate(model.transformer.model.layers):
        x = prenorm_block(block, x, cos, sin, bias, config, qk_norm=True, cache=cache, layer=index)
    cache.advance(length)
    return compute_in_float32(model.transformer.model.norm, x[:, -1]).float()


def generate_audio_codes(model: Any, prompt: Sequence[int], negative: Sequence[int], *, min_tokens: int,
                         max_tokens: int, seed: int, cfg_scale: float = 2.0, temperature: float = 0.85,
                         top_p: float = 0.9, top_k: int = 0, min_p: float = 0.0,
                         progress: Progress | None = None) -> list[int]:
    """The audio codes the LM `model` (a `Qwen3TextEncoder`) writes after `prompt` (token ids; the
    `negative` ids guide it when `cfg_scale` is not 1); see the module doc."""
    vocab = model.config.vocab_size
    if vocab < AUDIO_END:
        raise GenerationError(f"ACE-Step 1.5: the language model's vocabulary has {vocab} tokens, the audio codes "
                              f"need {AUDIO_END} (is the 5 Hz LM loaded, not only the 0.6B text encoder?)")
    rows = [list(prompt)]
    if cfg_scale != 1.0:
        longest = max(len(prompt), len(negative))
        rows = [[PAD] * (longest - len(r)) + list(r) for r in (prompt, negative)]
    length = len(rows[0])
    mask = torch.ones((len(rows), length + max_tokens), dtype=torch.long)
    for index, row in enumerate(rows):  # left pads: 0 until the first other token
        for position, token in enumerate(row):
            if token != PAD:
                break
            mask[index, position] = 0
    table = model.token_embedding()
    device = table.weight.device
    mask = mask.to(device)
    cache = model.new_cache(len(rows), length + max_tokens)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    embeds = model.embed_ids(torch.tensor(rows, dtype=torch.long, device=device))
    codes: list[int] = []
    with torch.no_grad():
        for step in range(max_tokens):
            hidden = _step(model, embeds, cache, mask)  # [B, W]
            weight = table.weight
            code_scores = hidden @ weight[AUDIO_START:AUDIO_END].to(device=hidden.device, dtype=hidden.dtype).T
            eos_scores = None
            if min_tokens < step:
                eos_scores = (hidden @ weight[EOS].to(device=hidden.device, dtype=hidden.dtype))
            token = choose_code(code_scores, eos_scores, cfg_scale, temperature, top_k, min_p, top_p, vocab, generator)
            if token == EOS:
                break
            codes.append(token - AUDIO_START)
            if progress is not None:
                progress(step + 1, max_tokens)
            embeds = model.embed_ids(torch.full((len(rows), 1), token, dtype=torch.long, device=device))
    return codes


__all__ = ["AUDIO_END", "AUDIO_START", "EOS", "PAD", "choose_code", "filter_scores", "generate_audio_codes"]
