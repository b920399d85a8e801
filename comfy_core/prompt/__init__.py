"""AUTOMATIC1111's prompt language: parsing, schedules, AND, chunking, emphasis, embeddings.

The library functions keep webui 1.10's signatures and return shapes, so tooling written for
webui works unchanged:

    parse_prompt_attention(text) -> [[text, weight], ...]
    get_learned_conditioning_prompt_schedules(prompts, base_steps, hires_steps=None,
                                              use_old_scheduling=False) -> [[[step, text], ...], ...]
    get_multicond_prompt_list(prompts) -> (res_indexes, prompt_flat_list, prompt_indexes)

Encoding into CONDITIONING lives in `comfy_core.prompt.encode`; nothing here needs torch except
the embedding, emphasis and encoding modules. Nothing happens at import.
"""
from comfy_core.prompt.attention import parse_prompt_attention
from comfy_core.prompt.errors import (EmbeddingError, EmbeddingNotFoundError, EmbeddingWidthError,
                                      PromptSyntaxError)
from comfy_core.prompt.multicond import get_multicond_prompt_list
from comfy_core.prompt.schedule import get_learned_conditioning_prompt_schedules

__all__ = [
    "EmbeddingError", "EmbeddingNotFoundError", "EmbeddingWidthError", "PromptSyntaxError",
    "get_learned_conditioning_prompt_schedules", "get_multicond_prompt_list", "parse_prompt_attention",
]
