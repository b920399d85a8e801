"""A prompt's outputs as assets (issue 29): with --enable-assets, each file a node reports in its
UI output (`{"images": [{"filename", "subfolder", "type"}, ...]}`, `gifs`, `audio`, `video`, ...
any list of such items) is registered as an asset owned by the prompt, and the item the client
sees gains the asset's `id`, plus `preview_id` (the asset itself) for an image browsers can show.

After today's ComfyUI comfy_execution/asset_enrichment.py and app/assets/services/ingest.py /
preview_rules.py (@228da55 / @17b829e / @f1376fc, Comfy-Org/ComfyUI): the `executed` message
and the history entry (so /history and /jobs outputs) carry the enriched copy, while the cached
UI record stays without ids, so a later run served from the cache registers again under its own
prompt id. An item is skipped (left without id) when its type has no folder, its path leaves
that folder, or the file is not there; a registration that fails is logged and the item is sent
as it is, never failing the prompt. Items of type `temp` (PreviewImage) are registered too, with
the `temp` tag, as ComfyUI does.

web/prompt_run.py calls `enrich` in a worker thread (it reads files and writes SQLite) while the
`executed` message keeps its place in the client's queue.
"""
from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web.asset_files import guess_mime
from web.confined_path import PathOutsideRoot, confined_path

if TYPE_CHECKING:  # annotations only
    from web.assets import AssetCatalog

log = logging.getLogger(__name__)

# Image types a browser shows as they are (ComfyUI's preview_rules._BROWSER_IMAGE_TYPES); such an
# output is its own preview. EXR/HDR never are.
BROWSER_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp",
                                 "image/svg+xml", "image/x-icon", "image/vnd.microsoft.icon"})
_NEVER_OWN_PREVIEW = frozenset({".exr", ".hdr"})


def is_own_image_preview(path: Path) -> bool:
    """True when the file is an image a browser displays, so it previews itself."""
    if path.suffix.lower() in _NEVER_OWN_PREVIEW:
        return False
    return (guess_mime(path.name) or "").lower() in BROWSER_IMAGE_TYPES


class OutputAssets:
    """Registers the files in a node's UI output in `catalog` (thread-safe; call off the loop)."""

    def __init__(self, catalog: "AssetCatalog") -> None:
        self.catalog = catalog

    def folder_of(self, kind: Any) -> Path | None:
        roots = self.catalog.roots
        return {"output": roots.output_dir, "temp": roots.temp_dir, "input": roots.input_dir}.get(kind) \
            if isinstance(kind, str) else None

    def file_of(self, item: dict) -> Path | None:
        """The file an output item names, inside its type's folder, or None (skip it)."""
        base = self.folder_of(item.get("type"))
        filename, subfolder = item.get("filename"), item.get("subfolder") or ""
        if base is None or not isinstance(filename, str) or not isinstance(subfolder, str):
            return None
        try:
            path = confined_path(base, f"{subfolder}/{filename}" if subfolder else filename, what="output file")
        except PathOutsideRoot:
            return None
        return path if path.is_file() else None

    def enrich(self, output: dict, job_id: str) -> dict:
        """A copy of `output` whose file items carry their new asset's `id` (and `preview_id`)."""
        enriched = copy.deepcopy(output)
        for items in enriched.values():
            if not isinstance(items, list):
                continue
            for item in items:
                if not isinstance(item, dict) or "filename" not in item or "type" not in item:
                    continue
                try:
                    path = self.file_of(item)
                    if path is None:
                        continue
                    asset_id = self.catalog.register_output(path, job_id)
                except Exception:  # noqa: BLE001 -- an output that cannot be registered is still delivered
                    log.warning("prompt %s: output %r could not be registered as an asset", job_id,
                                item.get("filename"), exc_info=True)
                    continue
                item["id"] = asset_id
                if is_own_image_preview(path):
                    item["preview_id"] = asset_id
        return enriched


def output_assets(app: Any) -> OutputAssets | None:
    """The registrar for the queue worker of `app`, or None when --enable-assets is off."""
    from web.assets import asset_service

    service = asset_service(app)
    return None if service is None else OutputAssets(service.catalog)
