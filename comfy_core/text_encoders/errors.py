"""Typed errors of the text-encoder package. Every message names the key, file or input at fault."""
from __future__ import annotations


class TextEncoderError(Exception):
    """Base class of every error raised by `comfy_core.text_encoders`."""


class VocabularyError(TextEncoderError):
    """The CLIP BPE vocabulary file is missing or malformed."""


class TextEncoderDetectionError(TextEncoderError):
    """A checkpoint's text-encoder tensors do not have the expected names or shapes."""


class TextEncoderKeyError(TextEncoderError):
    """A state-dict key is missing, unexpected, or has the wrong shape for the configured encoder."""


class TokenizeError(TextEncoderError):
    """Tokens handed to an encoder are malformed (wrong chunk length, unknown encoder key, bad embedding)."""


class Qwen35DetectionError(TextEncoderDetectionError, ValueError):
    """A Qwen3.5 tower's tensors (language model or vision tower) are incomplete or inconsistent
    (names the key at fault). Here, not in qwen35.py, so its vision module need not import the tower."""
