"""Typed errors of the prompt language and of textual-inversion embeddings.

Both subclass `ValueError`, so scripts written for AUTOMATIC1111's web UI (which let Python's
`float()` raise `ValueError` on a bad weight) keep working when they catch that.
"""
from __future__ import annotations


class PromptSyntaxError(ValueError):
    """A prompt the language cannot accept; `position` is the 0-based character offset."""

    def __init__(self, message: str, *, text: str, position: int) -> None:
        self.text = text
        self.position = position
        self.reason = message
        excerpt = text[max(0, position - 20):position + 20]
        super().__init__(f"prompt syntax error at character {position}: {message} (near {excerpt!r})")


class EmbeddingError(ValueError):
    """A textual-inversion embedding file that cannot be read or used (names the file)."""


class EmbeddingNotFoundError(EmbeddingError):
    """`embedding:name` in a prompt names no file in the embeddings folders."""


class EmbeddingWidthError(EmbeddingError):
    """An embedding whose vector width does not match the text encoder it is applied to."""
