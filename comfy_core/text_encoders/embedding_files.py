"""`embedding:NAME` in a ComfyUI prompt: find the file and read its vectors as ComfyUI does.

Behaviour re-implemented from ComfyUI 0.3.64's `comfy/sd1_clip.py` (`load_embed`,
`expand_directory_list`, `bundled_embed`); AUTOMATIC1111's own rules are `comfy_core.prompt`'s.

- Where: every embeddings folder and every folder below it (links followed). `NAME` is joined to
  each; a path that leaves the folder is skipped; the exact file is taken, else `NAME` plus
  `.safetensors`, `.pt` or `.bin`, first found wins.
- What: `.safetensors` read with safetensors, anything else with `torch.load(weights_only=True)`;
  a pickle that refuses (an old AUTOMATIC1111 `.pt` holding classes outside torch's allow-list)
  is read as the zip archive it is, without unpickling (`vectors_from_zip`, ComfyUI's
  `safe_load_embed_zip`).
  From the dict: the first tensor of `string_to_param` (webui's `.pt`); a list of dicts
  (old diffusers dumps): every tensor of the encoder's width, concatenated; the encoder's key
  (`clip_l`, `clip_g`, `clip_h`: SDXL files carry both halves); a LoRA-bundled embedding
  (`bundle_emb.*.string_to_param.*`, then `bundle_emb.*.<key>`); else the first tensor (kohya's
  `emb_params`, diffusers' `{"<token>": vector}`).
- A file that cannot be read is logged and counts as not found (the prompt then keeps going).

Textual inversion: Gal et al. 2022, "An Image is Worth One Word".
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Hashable, Iterable, Sequence

import torch

log = logging.getLogger(__name__)

EXTENSIONS = (".safetensors", ".pt", ".bin")


def search_folders(folders: Iterable[str | os.PathLike]) -> list[Path]:
    """The folders and all their subfolders (links followed), each once, roots first."""
    seen: dict[str, Path] = {}
    for folder in folders:
        root = Path(folder)
        seen.setdefault(os.path.abspath(root), root)
        for sub, _dirs, _files in os.walk(root, followlinks=True):
            seen.setdefault(os.path.abspath(sub), Path(sub))
    return list(seen.values())


def find_embedding_file(name: str, folders: Iterable[str | os.PathLike]) -> Path | None:
    """The file `embedding:name` names, or None (see the module docstring for the search)."""
    for folder in search_folders(folders):
        base = os.path.abspath(folder)
        candidate = os.path.abspath(os.path.join(base, name))
        try:
            if os.path.commonpath((base, candidate)) != base:
                continue  # `..` or an absolute name: never outside the folder
        except ValueError:
            continue
        if os.path.isfile(candidate):
            return Path(candidate)
        for extension in EXTENSIONS:
            if os.path.isfile(candidate + extension):
                return Path(candidate + extension)
    return None


def read_embedding_file(path: str | os.PathLike) -> Any:
    """The raw content of an embedding file (a dict of tensors, or what `torch.load` returns)."""
    path = str(path)
    if path.lower().endswith(".safetensors"):
        # not safetensors' load_file: it leaks a little per tensor on every call (load_tensor_file)
        from comfy_core.checkpoint.reader import load_tensor_file

        return load_tensor_file(path)[0]
    return torch.load(path, weights_only=True, map_location="cpu")


def _bundled(data: dict, prefix: str, suffix: str) -> torch.Tensor | None:
    parts = [v for k, v in data.items() if k.startswith(prefix) and k.endswith(suffix)]
    return torch.cat(parts, dim=0) if parts else None


def embedding_vectors(data: Any, embedding_key: str | None, width: int) -> torch.Tensor | None:
    """The vectors ComfyUI takes from a loaded embedding file's content for one encoder."""
    if isinstance(data, list):
        rows = [t.reshape(-1, t.shape[-1]) for item in data for t in item.values()
                if isinstance(t, torch.Tensor) and t.shape[-1] == width]
        return torch.cat(rows, dim=0) if rows else None
    if not isinstance(data, dict) or not data:
        return None
    if "string_to_param" in data:
        return next(iter(data["string_to_param"].values()))
    if embedding_key is not None and embedding_key in data:
        return data[embedding_key]
    found = _bundled(data, "bundle_emb.", ".string_to_param.*")
    if found is None:
        found = _bundled(data, "bundle_emb.", f".{embedding_key}")
    if found is None:
        found = next(iter(data.values()))
    return found


SD1_WIDTH, SD2_WIDTH = 768, 1024


def vectors_from_zip(path: str | os.PathLike) -> torch.Tensor | None:
    """The vectors of a textual-inversion `.pt` read as the zip archive it is, without unpickling
    (ComfyUI's `safe_load_embed_zip`): the archive's `data/` records (PyTorch's storage files),
    last first; the first holding at least 768 float32 values is the embedding, `[n, 768]` (SD1)
    when its length divides by 768, else `[n, 1024]` (SD2; a record of neither raises
    ValueError). None when no record qualifies."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        records = [name for name in archive.namelist() if "data/" in name]
        for name in reversed(records):
            data = archive.read(name)
            count = len(data) // 4
            if count < SD1_WIDTH:
                continue
            width = SD1_WIDTH if count % SD1_WIDTH == 0 else SD2_WIDTH
            if len(data) != count * 4 or count % width:
                raise ValueError(f"{path}: record {name} holds {len(data)} bytes, not whole "
                                 f"{SD1_WIDTH}- or {SD2_WIDTH}-wide float32 vectors")
            return torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(count // width, width)
    return None


def load_embedding(path: str | os.PathLike, embedding_key: str | None, width: int) -> torch.Tensor | None:
    """The vectors an embedding file gives one encoder (see the module docstring); raises on a
    file that cannot be read either way."""
    try:
        return embedding_vectors(read_embedding_file(path), embedding_key, width)
    except Exception:
        if str(path).lower().endswith(".safetensors"):
            raise
        return vectors_from_zip(path)  # ComfyUI's fallback for pickles torch.load refuses


class FolderEmbeddingLookup:
    """`lookup(name, embedding_key, width)` over embeddings folders, for `CLIP.set_embedding_lookup`.

    Files are read on every lookup, as ComfyUI does (an edited file is used by the next prompt
    that encodes). Its cache signature is the folder list: a prompt that encodes again is keyed
    by the same CLIP whatever the lookup object.
    """

    def __init__(self, folders: Sequence[str | os.PathLike]) -> None:
        self.folders = tuple(Path(f) for f in folders)

    def __call__(self, name: str, embedding_key: str, width: int) -> torch.Tensor | None:
        path = find_embedding_file(name, self.folders)
        if path is None:
            return None
        try:
            return load_embedding(path, embedding_key, width)
        except Exception as exc:  # noqa: BLE001 -- as ComfyUI: a bad file is skipped, not fatal
            log.warning("error loading embedding %s (%s), skipping it: %s", name, path, exc)
            return None

    def cache_signature(self) -> Hashable:
        return ("comfy-embedding-folders", tuple(str(f) for f in self.folders))

    def __repr__(self) -> str:
        return f"FolderEmbeddingLookup({[str(f) for f in self.folders]})"
