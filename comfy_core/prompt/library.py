"""Embedding files in the model folders: listing, finding by name, loading what fits a CLIP.

`ModelFolders` kind "embeddings" (ComfyUI's `models/embeddings`). Names are file paths relative
to a folder without the extension, as ComfyUI's `GET /embeddings` lists them and as both
ComfyUI (`embedding:name`) and webui (bare names) use them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from comfy_core.prompt.embedding import Embedding, load_embedding
# The listing needs no torch (the node layer's combos use it): it lives in embedding_names.
from comfy_core.prompt.embedding_names import EMBEDDING_EXTENSIONS, EMBEDDINGS_KIND, embedding_files
from comfy_core.prompt.errors import EmbeddingError


def list_embeddings(folders: Any) -> list[str]:
    """Embedding names for `GET /embeddings`: relative paths without the extension."""
    return [name.rsplit(".", 1)[0] for name in embedding_files(folders)]


def find_embedding_file(folders: Any, name: str) -> Path | None:
    """The file `embedding:name` refers to: `name` itself, else `name` + .safetensors/.pt/.bin."""
    for candidate in (name, *(name + ext for ext in (".safetensors", ".pt", ".bin"))):
        if Path(candidate).suffix.lower() not in EMBEDDING_EXTENSIONS:
            continue
        path = folders.full_path(EMBEDDINGS_KIND, candidate)
        if path is not None:
            return path
    return None


def folder_resolver(folders: Any) -> Callable[[str], Embedding | None]:
    """`name -> Embedding | None` over the embeddings folders (each file read once per resolver)."""
    loaded: dict[str, Embedding | None] = {}

    def resolve(name: str) -> Embedding | None:
        if name not in loaded:
            path = find_embedding_file(folders, name)
            loaded[name] = load_embedding(path, name=Path(name).name) if path is not None else None
        return loaded[name]
    return resolve


def folder_embeddings(folders: Any, fits: Callable[[Embedding], bool]) -> list[Embedding]:
    """Every readable embedding in the folders that `fits` the CLIP, named by its file stem.

    As webui, files that cannot be read or do not fit the model are left out (webui lists them as
    "skipped"); use `embedding:name` or ApplyEmbedding to get an error for one file.
    """
    found = []
    for name in embedding_files(folders):
        path = folders.full_path(EMBEDDINGS_KIND, name)
        try:
            embedding = load_embedding(path)
        except EmbeddingError:
            continue
        if fits(embedding):
            found.append(embedding)
    return found


def folder_fingerprint(folders: Any) -> tuple:
    """Names, sizes and modification times of the embedding files (for the node's IS_CHANGED)."""
    entries = []
    for name in embedding_files(folders):
        stat = folders.full_path(EMBEDDINGS_KIND, name).stat()
        entries.append((name, stat.st_size, stat.st_mtime_ns))
    return tuple(entries)

