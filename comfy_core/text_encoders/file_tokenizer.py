"""A tokenizer a text-encoder file carries itself: tokenizer.json's UTF-8 bytes stored as a uint8
tensor under `tokenizer_json` (Comfy-Org's repackaged Gemma 4, GPT-OSS and MiniMax Music 3 files,
whose vocabularies ship with no package here). One reader for all of them."""
from __future__ import annotations

from typing import Any

import torch

TOKENIZER_KEY = "tokenizer_json"


def tokenizer_json_bytes(data: Any) -> bytes:
    """tokenizer.json's bytes from the stored tensor (any shape, read as uint8), bytes or str."""
    if isinstance(data, torch.Tensor):
        return data.detach().to("cpu", torch.uint8).reshape(-1).numpy().tobytes()
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def load_tokenizer_json(data: Any, error: type[Exception], what: str) -> Any:
    """A `tokenizers.Tokenizer` from the stored tokenizer.json; `error(f"{what}: ...")` when the
    data is no tokenizer."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(tokenizer_json_bytes(data).decode("utf-8"))
    except Exception as exc:  # the tokenizers package raises its own exception types; a bad UTF-8 too
        raise error(f"{what}: not a tokenizer.json ({exc})") from None


__all__ = ["TOKENIZER_KEY", "load_tokenizer_json", "tokenizer_json_bytes"]
