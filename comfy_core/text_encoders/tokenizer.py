"""The raw CLIP BPE tokenizer: text -> ids, without BOS/EOS, no padding, no truncation.

This is the tokenizer ComfyUI uses for every CLIP encoder (SD1 CLIP-L, SD2 ViT-H, SDXL L and
bigG; transformers' `CLIPTokenizer`): NFC normalisation, whitespace collapsed, lower case, CLIP's
pre-tokenisation regex, byte-level BPE with `</w>` word ends, the two special tokens kept whole.
The pipeline is built here on the `tokenizers` library (which transformers' class wraps) from the
vocabulary derived in `vocab.py`, so no file or hub access happens, and transformers is not
imported: its import is 0.7-1.2 s on a 2-core machine, on the way of a cold server's first prompt.
transformers' own `CLIPTokenizer` over the same vocabulary is built only when a pack asks for it
(`backend`, ComfyUI's `SDTokenizer.tokenizer`); tests hold the two equal.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from comfy_core.text_encoders.vocab import BOS_TOKEN, EOS_TOKEN, ClipVocabulary, load_vocabulary

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import CLIPTokenizer

# Far above any prompt: we chunk ourselves, so the library must neither truncate nor warn.
_NO_LIMIT = 1 << 30


class ClipTokenizer:
    """Text -> CLIP BPE ids. Cheap to share: it holds no per-prompt state."""

    def __init__(self, vocabulary: ClipVocabulary) -> None:
        self.vocabulary = vocabulary
        self._pipeline = _clip_pipeline(vocabulary)
        self._backend: "CLIPTokenizer | None" = None
        self._backend_lock = threading.Lock()
        self.bos_id = vocabulary.bos_id
        self.eos_id = vocabulary.eos_id
        self._inverse = {index: token for token, index in vocabulary.vocab.items()}

    def __copy__(self) -> "ClipTokenizer":
        return self  # immutable and shared by design (a copy of a CLIP object shares its tokenizer)

    def __deepcopy__(self, memo: dict) -> "ClipTokenizer":
        return self

    @classmethod
    def from_file(cls, path: str | Path | None = None) -> "ClipTokenizer":
        """Build from a `bpe_simple_vocab_16e6.txt.gz` (default: the one shipped by `openai-clip`)."""
        return cls(load_vocabulary(path))

    @staticmethod
    def shared_default() -> "ClipTokenizer":
        """One tokenizer over the default vocabulary for the whole process (it is immutable):
        every checkpoint load after the first skips re-reading and re-deriving the vocabulary."""
        return _shared_default()

    def encode(self, text: str) -> list[int]:
        """The BPE ids of `text`, without BOS/EOS."""
        return self._pipeline.encode(text, add_special_tokens=False).ids

    def encode_words(self, words: Sequence[str]) -> list[int]:
        """The BPE ids of text already cleaned and pre-tokenized elsewhere, one word at a time.

        The hook for callers that clean and split text their own way before BPE (the
        AUTOMATIC1111 nodes replicate webui's tokenizers: `comfy_core.prompt.webui_tokenizer`).
        Each word is BPE-encoded on its own, so no word boundary is merged or moved; a word
        that is already lower-case NFC text without whitespace passes this library's
        normaliser and pre-tokenizer unchanged. `encode` (ComfyUI's path) does not use it.
        """
        if not words:
            return []
        return self._pipeline.encode(list(words), is_pretokenized=True, add_special_tokens=False).ids

    def encode_with_specials(self, text: str) -> list[int]:
        """BOS + ids + EOS, unpadded (what `CLIPTokenizer(text)` returns)."""
        return [self.bos_id, *self.encode(text), self.eos_id]

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of one id (e.g. `cat</w>`), for untokenize/debugging."""
        return self._inverse[token_id]

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocabulary.vocab)

    @property
    def backend(self) -> "CLIPTokenizer":
        """transformers' `CLIPTokenizer` over the same vocabulary: ComfyUI's `SDTokenizer.tokenizer`,
        which packs call directly (`tokenizer(texts, add_special_tokens=False)["input_ids"]`).
        Built on first use (it imports transformers)."""
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    from transformers import CLIPTokenizer

                    self._backend = CLIPTokenizer(vocab=dict(self.vocabulary.vocab),
                                                  merges=list(self.vocabulary.merges), model_max_length=_NO_LIMIT)
        return self._backend

    @property
    def lazy_backend(self) -> "LazyBackend":
        """`backend` as an object that builds it on first use: what `SDTokenizer.tokenizer` holds,
        so a tokenizer nobody calls directly never imports transformers."""
        return LazyBackend(self)

    @property
    def inverse_vocab(self) -> dict[int, str]:
        """id -> vocabulary entry (ComfyUI's `SDTokenizer.inv_vocab`); shared, do not modify."""
        return self._inverse


class LazyBackend:
    """Stands for a `ClipTokenizer`'s transformers `CLIPTokenizer`: attribute reads and calls go to
    it, built on the first one (packs read ComfyUI's `SDTokenizer.tokenizer` as an instance
    attribute: `vars(tokenizer)` must hold it)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: ClipTokenizer) -> None:
        object.__setattr__(self, "_owner", owner)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._owner.backend, name, value)  # packs patch the library tokenizer's methods

    def __delattr__(self, name: str) -> None:
        delattr(self._owner.backend, name)

    def __getattr__(self, name: str) -> Any:
        # Only names this object lacks arrive here; dunder lookups (copy, pickle) and a half-built
        # copy's `_owner` are not forwarded, so copying a tokenizer neither builds nor recurses.
        if name.startswith("__") or name == "_owner":
            raise AttributeError(name)
        return getattr(self._owner.backend, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.backend(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._owner.backend)

    def __copy__(self) -> "LazyBackend":
        return self

    def __deepcopy__(self, memo: dict) -> "LazyBackend":
        return self

    def __repr__(self) -> str:
        return f"LazyBackend({'built' if self._owner._backend is not None else 'not built yet'})"


# CLIP's pre-tokenisation: the special tokens whole, English contractions, letter runs, single
# digits, runs of other non-space characters (OpenAI's clip/simple_tokenizer.py pattern).
_CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def _clip_pipeline(vocabulary: ClipVocabulary) -> "Tokenizer":
    """CLIP's tokenizer on the `tokenizers` library: the same normaliser, pre-tokenizer, BPE model
    and special tokens transformers' `CLIPTokenizer` sets up (a 30 ms build)."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    pipeline = Tokenizer(BPE(vocab=dict(vocabulary.vocab), merges=list(vocabulary.merges), dropout=None,
                             continuing_subword_prefix="", end_of_word_suffix="</w>", fuse_unk=False,
                             unk_token=EOS_TOKEN))
    pipeline.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    pipeline.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False)])
    pipeline.add_special_tokens([BOS_TOKEN, EOS_TOKEN])  # kept whole wherever they appear in a prompt
    return pipeline


_SHARED_LOCK = threading.Lock()
_shared: ClipTokenizer | None = None


def _shared_default() -> ClipTokenizer:
    # Built once even when two threads ask first at the same time (the server's warm-up thread
    # and a prompt's loader): the second waits for the first's tokenizer.
    global _shared
    if _shared is None:
        with _SHARED_LOCK:
            if _shared is None:
                _shared = ClipTokenizer.from_file()
    return _shared
