"""An AUTOMATIC1111 prompt -> CONDITIONING entries (ComfyUI's `[[tensor, dict], ...]`).

- `AND` parts (and a trailing `:weight`, even without AND) become entries carrying our
  `composable_weight` key, combined by the sampler as `uncond + cfg * sum_i w_i (cond_i - uncond)`
  (Liu et al. 2022, composable diffusion; webui's `combine_denoised`). A single part of weight 1
  carries no key, so it behaves as plain ComfyUI conditioning.
- Each part's schedule (`[a:b:N]`, `[a|b]`) is encoded as one webui batch, every row of it,
  repeats included (webui's `get_learned_conditioning`: `[(cat:3)|dog|bird]` at 4 steps is the
  batch cat, dog, bird, cat, and "Original" emphasis shares its mean over those 4 rows). AND
  parts, and the negative prompt, are separate batches; parts with the same text are encoded
  once (webui de-duplicates them). Neighbouring rows with the same text become one entry per
  schedule step range, with `start_percent` / `end_percent` chosen so the sampler switches at
  the step webui switches at (`timeline.schedule_ranges`, for the given steps and scheduler).
- A negative prompt is neither AND-split nor weight-stripped (webui passes it straight through).

Embeddings registered on a CLIP (ApplyEmbedding) live in its patcher's options under
`EMBEDDINGS_OPTION`, so a clone carries them and the input CLIP is never changed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from comfy_core.patching.clip import encoder_slots
from comfy_core.prompt.attention import parse_prompt_attention
from comfy_core.prompt.chunking import DEFAULT_COMMA_BACKTRACK
from comfy_core.prompt.embedding import Embedding
from comfy_core.prompt.emphasis import DEFAULT_EMPHASIS, check_emphasis_mode, parses_brackets
from comfy_core.prompt.encode import ResolveEmbedding, encode_texts
from comfy_core.prompt.errors import EmbeddingWidthError
from comfy_core.prompt.multicond import split_and
from comfy_core.prompt.schedule import prompt_schedule
from comfy_core.prompt.timeline import schedule_ranges

EMBEDDINGS_OPTION = "a1111_embeddings"
COMPOSABLE_WEIGHT = "composable_weight"


@dataclass(frozen=True)
class EmbeddingSet:
    """Immutable embeddings registered on a CLIP; later names replace earlier ones (as webui).

    Shared, not copied, when a patcher's options are deep-copied by `clone()`.
    """

    embeddings: tuple[Embedding, ...] = ()

    def with_embedding(self, embedding: Embedding) -> "EmbeddingSet":
        kept = tuple(e for e in self.embeddings if e.name != embedding.name)
        return EmbeddingSet(kept + (embedding,))

    def __deepcopy__(self, memo: dict) -> "EmbeddingSet":
        return self

    def __len__(self) -> int:
        return len(self.embeddings)

    def cache_signature(self) -> tuple:
        """By content: the same embeddings loaded again give the same CLIP signature."""
        return tuple(e.signature() for e in self.embeddings)


def registered_embeddings(clip: Any) -> tuple[Embedding, ...]:
    registered = clip.patcher.model_options.get(EMBEDDINGS_OPTION)
    return registered.embeddings if registered is not None else ()


def encoder_widths(clip: Any) -> dict[str, int]:
    """Slot -> width of each encoder of the CLIP, in module order."""
    return {slot: int(getattr(clip.patcher.model, slot).width) for slot in encoder_slots(clip.patcher)}


def check_embedding_fits(embedding: Embedding, widths: Mapping[str, int]) -> None:
    """Raise `EmbeddingWidthError` (naming the file and both widths) unless it fits every encoder.

    The compared width is webui's: 768 for SD1, 1024 for SD2, 768 + 1280 = 2048 for SDXL.
    """
    expected = sum(widths.values())
    actual = sum(embedding.widths.values())
    if actual != expected:
        detail = " + ".join(f"{k} {w}" for k, w in embedding.widths.items() if k)
        raise EmbeddingWidthError(
            f"embedding {embedding.name!r} ({embedding.source or 'in memory'}) has width {actual}"
            f"{f' ({detail})' if detail else ''}, but this CLIP's text encoders "
            f"({', '.join(f'{k} {w}' for k, w in widths.items())}) expect width {expected}")
    for slot, width in widths.items():
        embedding.vectors_for(slot, width)


def fits(embedding: Embedding, widths: Mapping[str, int]) -> bool:
    try:
        check_embedding_fits(embedding, widths)
    except EmbeddingWidthError:
        return False
    return True


def with_embedding(clip: Any, embedding: Embedding) -> Any:
    """A clone of `clip` with `embedding` registered; `clip` itself is unchanged."""
    check_embedding_fits(embedding, encoder_widths(clip))
    clone = clip.clone()
    current = clone.patcher.model_options.get(EMBEDDINGS_OPTION) or EmbeddingSet()
    clone.patcher.set_option(EMBEDDINGS_OPTION, current.with_embedding(embedding))
    return clone


@dataclass(frozen=True)
class PromptOptions:
    """How a prompt is turned into conditioning (the node's widgets)."""

    steps: int = 20
    scheduler: str = "normal"
    emphasis: str = DEFAULT_EMPHASIS
    comma_backtrack: int = DEFAULT_COMMA_BACKTRACK
    negative: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. SDXL width/height/crop/target keys

    def __post_init__(self) -> None:
        check_emphasis_mode(self.emphasis)
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def _merge_repeats(schedule: list[list]) -> list[list]:
    """Join neighbouring schedule entries with the same text (same conditioning, fewer entries)."""
    merged: list[list] = []
    for end, text in schedule:
        if merged and merged[-1][1] == text:
            merged[-1][0] = end
        else:
            merged.append([end, text])
    return merged


def prompt_texts(text: str, steps: int, negative: bool = False) -> list[tuple[str, float | None, list[list]]]:
    """Each AND part's text, weight (None for a negative prompt) and webui schedule (all rows)."""
    parts = [(text, None)] if negative else split_and(text)
    return [(part, weight, prompt_schedule(part, steps)) for part, weight in parts]


def check_prompt(text: str, steps: int = 20, negative: bool = False, emphasis: str = DEFAULT_EMPHASIS) -> None:
    """Raise `PromptSyntaxError` for a prompt that cannot be encoded (what the node validates)."""
    if not parses_brackets(emphasis):
        return
    for _, _, schedule in prompt_texts(text, steps, negative):
        for _, entry_text in schedule:
            parse_prompt_attention(entry_text)


def encode_prompt(clip: Any, text: str, options: PromptOptions = PromptOptions(), *,
                  embeddings: Sequence[Embedding] = (), resolve: ResolveEmbedding | None = None) -> list[list]:
    """CONDITIONING for one A1111 prompt (see the module docstring).

    `embeddings` are matched by name in addition to those registered on `clip`;
    `resolve` finds ComfyUI `embedding:name` references.
    """
    all_embeddings = (*embeddings, *registered_embeddings(clip))
    parts = prompt_texts(text, options.steps, options.negative)
    composable = len(parts) > 1 or any(weight not in (None, 1.0) for _, weight, _ in parts)
    conditioning: list[list] = []
    batches: dict[str, Any] = {}  # part text -> its encoded batch (the same text, the same batch)
    for part, weight, schedule in parts:
        if part not in batches:
            batches[part] = encode_texts(clip, [entry_text for _, entry_text in schedule],
                                         emphasis=options.emphasis, embeddings=all_embeddings,
                                         resolve=resolve, comma_backtrack=options.comma_backtrack,
                                         zero_if_empty=options.negative)
        encoded = batches[part]
        entries = _merge_repeats(schedule)
        ranges = (schedule_ranges([end for end, _ in entries], options.steps, options.scheduler)
                  if len(entries) > 1 else [None])
        for (_, entry_text), span in zip(entries, ranges):
            row = encoded.row(entry_text)
            meta: dict[str, Any] = {"pooled_output": encoded.pooled[row:row + 1], **options.extra}
            if span is not None:
                meta["start_percent"], meta["end_percent"] = span
            if composable:
                meta[COMPOSABLE_WEIGHT] = float(weight if weight is not None else 1.0)
            conditioning.append([encoded.cond[row:row + 1], meta])  # [1, 77 * chunks, C]
    return conditioning
