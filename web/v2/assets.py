"""v2 assets over the asset catalogue of web/assets.py, whether or not `--enable-assets` is on:

- on, v2 uses the app's catalogue (web/routes_assets.py's AssetService): a v2 upload is an asset
  `/api/assets` lists, and outputs carry the ids the queue worker gave them;
- off, v2 opens the same catalogue tables in the server's database file itself, when first
  needed, without the folder scan; `/api/assets` keeps answering 503, and what v2 recorded shows
  there once the flag is turned on.

Uploaded bytes land where `/api/assets` puts them (`input/<blake3 hex><ext>`, deduplicated by
hash; every upload is a new record, as ComfyUI's catalogue). A `core/ASSET` reference in a
submitted workflow (`{"__type": "core/ASSET", "info": {"id", "hash"?, "file_path"?}}`) becomes
the value a loader node takes: the path below input/, or `name [output]` / `name [temp]` (the
annotated names ComfyUI's loaders read) for bytes that live there; `id` wins, `hash` is the
fallback, as comfy-api-proxy resolves them. Output files become assets once, on first read
(the ids are kept in web/v2/store.py), so every read and every event shows the same ids.

Methods that read files or SQLite are blocking: call them in a worker thread.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from web.asset_files import AssetError, AssetRoots, guess_mime
from web.asset_outputs import OutputAssets
from web.assets import AssetCatalog, AssetRecord, asset_service
from web.store import DB_NAME
from web.v2.shapes import NO_EXPIRY, content_url, iso_text, output_kind
from web.v2.store import V2Store

ASSET_TYPE = "core/ASSET"
ROLE_TAGS = ("input", "models", "output")


class V2Assets:
    def __init__(self, app: Any, env: Any, store: V2Store) -> None:
        self.app = app
        self.env = env
        self.store = store
        self._own: AssetCatalog | None = None
        self._lock = threading.Lock()  # opening the own catalogue
        self._outputs_lock = threading.Lock()  # one registration per output file

    @property
    def shared(self) -> bool:
        """True when --enable-assets is on (the app's catalogue is used)."""
        return asset_service(self.app) is not None

    def catalog(self) -> AssetCatalog:
        service = asset_service(self.app)
        if service is not None:
            return service.catalog
        with self._lock:
            if self._own is None:
                self._own = AssetCatalog(Path(self.env.user_dir) / DB_NAME, AssetRoots.from_env(self.env)).open()
            return self._own

    def close(self) -> None:
        with self._lock:
            if self._own is not None:
                self._own.close()
                self._own = None

    # -- records as v2 assets -----------------------------------------------------------------
    @staticmethod
    def asset_json(record: AssetRecord, base: str, *, created_new: bool | None = None) -> dict:
        body: dict[str, Any] = {
            "id": record.id, "hash": record.hash, "size_bytes": record.size,
            "content_type": record.mime_type or guess_mime(record.name) or "application/octet-stream",
            "file_path": record.name, "created_at": iso_text(record.created_at),
            "url": content_url(base, record.id), "url_expires_at": NO_EXPIRY, "expires_at": None,
            "job_id": record.job_id,
        }
        if created_new is not None:
            body["created_new"] = created_new
        return body

    def get(self, asset_id: str) -> AssetRecord | None:
        return self.catalog().get(asset_id)

    # -- core/ASSET references ----------------------------------------------------------------
    def loader_value(self, record: AssetRecord) -> str | None:
        """What a loader node takes for `record`'s bytes, or None when they are not reachable."""
        if record.is_missing or not record.path.is_file():
            return None
        roots = self.catalog().roots
        kinds = roots.model_kinds_of(record.path)
        if kinds:
            return kinds[0][1]
        where = roots.namespace_of(record.path)
        if where is None or where[0] == "models":
            return None
        return where[1] if where[0] == "input" else f"{where[1]} [{where[0]}]"

    def resolve(self, info: Any) -> str | None:
        """The loader value for one reference's `info`, or None (unknown, gone, malformed)."""
        if not isinstance(info, dict):
            return None
        catalog = self.catalog()
        asset_id = info.get("id")
        record = catalog.get(asset_id) if isinstance(asset_id, str) else None
        value = self.loader_value(record) if record is not None else None
        if value is None and isinstance(info.get("hash"), str):
            found = catalog.resolve_hash(info["hash"].strip().lower())
            if found is not None:
                value = self._path_value(found[0])
        return value

    def _path_value(self, path: Path) -> str | None:
        roots = self.catalog().roots
        kinds = roots.model_kinds_of(path)
        if kinds:
            return kinds[0][1]
        where = roots.namespace_of(path)
        if where is None or where[0] == "models":
            return None
        return where[1] if where[0] == "input" else f"{where[1]} [{where[0]}]"

    def rewrite(self, node: Any, missing: list[str]) -> Any:
        """`node` with every core/ASSET reference replaced by its loader value; the references
        that cannot be resolved are listed in `missing` (and left in place)."""
        if isinstance(node, dict) and node.get("__type") == ASSET_TYPE:
            info = node.get("info")
            value = self.resolve(info)
            if value is None:
                missing.append(str(info.get("id")) if isinstance(info, dict) else "<malformed core/ASSET reference>")
                return node
            return value
        if isinstance(node, dict):
            return {k: self.rewrite(v, missing) for k, v in node.items()}
        if isinstance(node, list):
            return [self.rewrite(v, missing) for v in node]
        return node

    # -- uploads ------------------------------------------------------------------------------
    def ingest(self, temp: Path, digest: str, size: int, *, file_path: str, content_type: str | None,
               tags: list[str]) -> tuple[AssetRecord, bool]:
        """Catalogue an upload received into `temp`: (record, created_new). Without a role tag
        the bytes are an input (what workflows load)."""
        catalog = self.catalog()
        existed = catalog.hash_exists(digest)
        if not any(t in ROLE_TAGS for t in tags):
            tags = [*tags, "input"]
        record = catalog.ingest_upload(temp, digest, size, name=file_path, tags=tags, client_filename=file_path,
                                       mime_type=content_type)
        return record, not existed

    def from_hash(self, digest: str, *, file_path: str | None, tags: list[str]) -> AssetRecord | None:
        return self.catalog().create_from_hash(digest, name=file_path or digest.split(":", 1)[1], tags=tags,
                                               user_metadata={}, mime_type=None, preview_id=None)

    # -- job outputs --------------------------------------------------------------------------
    def output_record(self, job_id: str, item: dict) -> AssetRecord | None:
        """The asset of one output file item: the id the worker gave it, else the one v2 gave it
        before, else a new registration (kept); None when the file is not there."""
        catalog = self.catalog()
        given = item.get("id")
        if isinstance(given, str):
            record = catalog.get(given)
            if record is not None:
                return record
        key = f"{item.get('type')}/{item.get('subfolder') or ''}/{item.get('filename')}"
        with self._outputs_lock:
            known = self.store.output_asset(job_id, key)
            record = catalog.get(known) if known else None
            if record is not None:
                return record
            path = OutputAssets(catalog).file_of(item)
            if path is None:
                return None
            asset_id = catalog.register_output(path, job_id)
            self.store.set_output_asset(job_id, key, asset_id)
            return catalog.get(asset_id)

    def outputs(self, job_id: str, ui_outputs: Any, base: str, nodes: set[str] | None = None) -> list[dict]:
        """v2 `Output`s of a history entry's (or one `executed` message's) UI outputs: one per
        file item, in node order; plain values (numbers, raw text) are not files and are left out."""
        found: list[dict] = []
        if not isinstance(ui_outputs, dict):
            return found
        for node_id, ui in ui_outputs.items():
            if not isinstance(ui, dict) or (nodes is not None and str(node_id) not in nodes):
                continue
            for list_name, items in ui.items():
                if not isinstance(items, list):
                    continue
                for item in items:
                    if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
                        continue
                    try:
                        record = self.output_record(job_id, item)
                    except (AssetError, OSError):
                        record = None
                    if record is None:
                        continue
                    found.append({
                        "node_id": str(node_id), "name": item["filename"], "type": output_kind(list_name),
                        "content_type": record.mime_type or guess_mime(item["filename"]) or "application/octet-stream",
                        "size_bytes": record.size, "id": record.id, "hash": record.hash,
                        "url": content_url(base, record.id), "url_expires_at": NO_EXPIRY, "job_id": job_id,
                    })
        return found
