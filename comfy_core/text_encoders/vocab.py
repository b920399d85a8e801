"""The CLIP BPE vocabulary, derived offline from OpenAI's `bpe_simple_vocab_16e6.txt.gz`.

The file ships (MIT licence) inside the `openai-clip` package. We find it through the import system's
spec lookup, which does not execute the package (`import clip` would pull in torchvision).

Derivation (Radford et al. 2021, "Learning Transferable Visual Models From Natural Language
Supervision"; the layout is the one of OpenAI's `clip/simple_tokenizer.py`, re-derived here):
the file is a header line followed by merge rules "a b"; CLIP uses the first 49152 - 256 - 2 = 48894
of them. The vocabulary is the 256 byte symbols in GPT-2's byte-to-unicode order, the same 256 with
the end-of-word marker `</w>`, one entry per merge (the concatenation), then `<|startoftext|>` and
`<|endoftext|>`: 49408 entries.
"""
from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from comfy_core.text_encoders.errors import VocabularyError

VOCAB_FILENAME = "bpe_simple_vocab_16e6.txt.gz"
NUM_MERGES = 49152 - 256 - 2  # 48894: the merges CLIP was trained with
VOCAB_SIZE = 49408
BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class ClipVocabulary:
    """Token -> id table and the ordered merge rules of the CLIP BPE."""

    vocab: dict[str, int]
    merges: list[tuple[str, str]]

    @property
    def bos_id(self) -> int:
        return self.vocab[BOS_TOKEN]

    @property
    def eos_id(self) -> int:
        return self.vocab[EOS_TOKEN]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table.

    Printable Latin-1 bytes map to themselves, in byte order; the remaining 68 bytes map to
    code points 256, 257, ... in byte order. The order matters: it fixes the first 256 ids.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    # Insertion order is the id order: printable bytes first, then the others.
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def build_vocabulary(merge_lines: list[str]) -> ClipVocabulary:
    """Build the 49408-entry vocabulary from the merge lines (without the header)."""
    if len(merge_lines) < NUM_MERGES:
        raise VocabularyError(f"CLIP BPE file has {len(merge_lines)} merge lines, expected at least {NUM_MERGES}")
    merges: list[tuple[str, str]] = []
    for number, line in enumerate(merge_lines[:NUM_MERGES], start=2):
        parts = line.split()
        if len(parts) != 2:
            raise VocabularyError(f"CLIP BPE file line {number}: expected 'a b', got {line!r}")
        merges.append((parts[0], parts[1]))
    symbols = list(bytes_to_unicode().values())
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(pair) for pair in merges]
    tokens += [BOS_TOKEN, EOS_TOKEN]
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != VOCAB_SIZE:
        raise VocabularyError(f"derived CLIP vocabulary has {len(vocab)} distinct entries, expected {VOCAB_SIZE}")
    return ClipVocabulary(vocab=vocab, merges=merges)


def find_vocabulary_file() -> Path:
    """Locate `bpe_simple_vocab_16e6.txt.gz` inside the installed `openai-clip` package, without importing it."""
    spec = importlib.util.find_spec("clip")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / VOCAB_FILENAME
        if candidate.is_file():
            return candidate
    raise VocabularyError(
        f"cannot find {VOCAB_FILENAME}: install the `openai-clip` package (requirements.txt), "
        f"or pass the file's path explicitly")


def load_vocabulary(path: str | Path | None = None) -> ClipVocabulary:
    """Read and derive the vocabulary from the gzip BPE file (default: the one in `openai-clip`)."""
    path = Path(path) if path is not None else find_vocabulary_file()
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise VocabularyError(f"cannot read CLIP BPE file {path}: {exc}") from exc
    lines = text.split("\n")
    # Line 0 is a header ("bpe_simple_vocab_16e6.txt#version: 0.2"), not a merge.
    return build_vocabulary(lines[1:])
