"""Which files are textual-inversion embeddings, without torch: the model-folder kind, the
file types, and the listing (`comfy_core.prompt.library` finds and loads them; the node
layer lists them in its combos before torch loads)."""
from __future__ import annotations

from typing import Any

EMBEDDINGS_KIND = "embeddings"  # comfy_core.folders.ModelFolders kind (ComfyUI's models/embeddings)
# The file extensions read as tensor embeddings (webui also reads images; we do not, see
# comfy_core.prompt.embedding.load_embedding).
EMBEDDING_EXTENSIONS: tuple[str, ...] = (".pt", ".bin", ".safetensors")


def embedding_files(folders: Any) -> list[str]:
    """Relative file names of every embedding file in `folders` (a ModelFolders), sorted;
    zero-byte files skipped, as webui does."""
    names = []
    for name in folders.filenames(EMBEDDINGS_KIND, EMBEDDING_EXTENSIONS):
        path = folders.full_path(EMBEDDINGS_KIND, name)
        if path is not None and path.stat().st_size > 0:
            names.append(name)
    return names
