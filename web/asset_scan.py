"""The background scan that puts files already in input/, output/ and the model folders into the
asset catalogue (POST /api/assets/seed, and once at start-up), after ComfyUI's app/assets/seeder.py
and scanner.py (@07eea23): one scan at a time on a daemon thread, states IDLE / RUNNING /
CANCELLING, counters scanned / total / created / skipped.

A scan of a root first marks missing every live content row under it whose file is gone, then
walks it: a file with no live row gets a content row (hashed only with `--enable-asset-hashing`)
and a record tagged from where it is (`input`, `output`, `models`, `model_type:<kind>`, known
input subfolders); a missing row at the same path with the same size and modification time is
recovered instead. Files that already have a live row are skipped (with hashing on, one still
without a hash gets it), so deleting a record through the API is never undone by a scan. Hidden
files and folders (a leading '.') are not walked: uploads in progress live there.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Iterator

from comfy_core.folders import MODEL_EXTENSIONS
from web.asset_files import SEED_ROOTS, check_tags, guess_mime, hash_file
from web.assets import AssetCatalog

log = logging.getLogger(__name__)


def _walk(base: Path, extensions: frozenset[str] | None = None) -> Iterator[Path]:
    if not base.is_dir():
        return
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(folder) / name
            if extensions is None or path.suffix.lower() in extensions:
                yield path


class SeedScanner:
    """One scan at a time over an AssetCatalog; `status()` is ComfyUI's /api/assets/seed/status."""

    def __init__(self, catalog: AssetCatalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._state = "IDLE"
        self._progress: dict[str, int] | None = None
        self._errors: list[str] = []
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()

    def start(self, roots: tuple[str, ...] = SEED_ROOTS) -> bool:
        """Start scanning `roots` (of models, input, output); False when a scan is running."""
        unknown = [r for r in roots if r not in SEED_ROOTS]
        if unknown:
            raise ValueError(f"unknown scan roots {unknown}; known: {list(SEED_ROOTS)}")
        with self._lock:
            if self._state != "IDLE":
                return False
            self._state = "RUNNING"
            self._progress = {"scanned": 0, "total": 0, "created": 0, "skipped": 0}
            self._errors = []
            self._cancel.clear()
            self._thread = threading.Thread(target=self._run, args=(tuple(roots),), name="asset-scan", daemon=True)
            self._thread.start()
        return True

    def cancel(self) -> bool:
        with self._lock:
            if self._state != "RUNNING":
                return False
            self._state = "CANCELLING"
            self._cancel.set()
            return True

    def wait(self, timeout: float | None = None) -> bool:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def status(self) -> dict:
        with self._lock:
            return {"state": self._state, "progress": dict(self._progress) if self._progress else None,
                    "errors": list(self._errors)}

    # -- the scan -----------------------------------------------------------------------------
    def _bases(self, roots: tuple[str, ...]) -> list[tuple[Path, frozenset[str] | None]]:
        found: list[tuple[Path, frozenset[str] | None]] = []
        catalog_roots = self.catalog.roots
        for root in roots:
            if root == "input":
                found.append((catalog_roots.input_dir, None))
            elif root == "output":
                found.append((catalog_roots.output_dir, None))
            else:
                seen = set()
                for bases in catalog_roots.model_folders.values():
                    for base in bases:
                        if base not in seen:
                            seen.add(base)
                            found.append((base, MODEL_EXTENSIONS))
        return found

    def _run(self, roots: tuple[str, ...]) -> None:
        try:
            bases = self._bases(roots)
            for base, _ in bases:
                self._mark_missing_under(base)
            paths = list(dict.fromkeys(p for base, ext in bases for p in _walk(base, ext)))
            with self._lock:
                self._progress["total"] = len(paths)
            for path in paths:
                if self._cancel.is_set():
                    break
                try:
                    created = self._seed_file(path)
                except OSError as exc:  # unreadable or vanished mid-scan: noted, the scan goes on
                    created = False
                    with self._lock:
                        self._errors.append(f"{path.name}: {exc}")
                with self._lock:
                    self._progress["scanned"] += 1
                    self._progress["created" if created else "skipped"] += 1
        except Exception as exc:  # noqa: BLE001 -- a failed scan is reported in status, never crashes the server
            log.exception("asset scan failed")
            with self._lock:
                self._errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._state = "IDLE"

    def _mark_missing_under(self, base: Path) -> None:
        catalog = self.catalog
        prefix = str(base) + os.sep
        with catalog._write():
            rows = catalog.db.execute("SELECT id, path FROM asset_contents WHERE is_missing = 0 AND "
                                      "substr(path, 1, ?) = ?", (len(prefix), prefix)).fetchall()
            gone = [content_id for content_id, path in rows if not os.path.isfile(path)]
            catalog.db.executemany("UPDATE asset_contents SET is_missing = 1 WHERE id = ?", [(i,) for i in gone])

    def _seed_file(self, path: Path) -> bool:
        """Catalogue one file; True when a record was created."""
        catalog = self.catalog
        stat = os.stat(path)
        with catalog._lock:
            live = catalog.db.execute("SELECT id, hash FROM asset_contents WHERE path = ? AND is_missing = 0",
                                      (str(path),)).fetchone()
        if live is not None:
            if catalog.hashing and live[1] is None:
                digest, size, mtime_ns = hash_file(path)
                with catalog._write():
                    catalog.db.execute("UPDATE asset_contents SET hash = ?, size_bytes = ?, mtime_ns = ? WHERE id = ?",
                                       (digest, size, mtime_ns, live[0]))
            return False
        digest = hash_file(path)[0] if catalog.hashing else None
        with catalog._write():
            missing = catalog.db.execute(
                "SELECT id FROM asset_contents WHERE path = ? AND is_missing = 1 AND size_bytes = ? AND mtime_ns = ? "
                "AND EXISTS (SELECT 1 FROM asset_records r WHERE r.content_id = asset_contents.id) "
                "ORDER BY created_at DESC LIMIT 1", (str(path), stat.st_size, stat.st_mtime_ns)).fetchone()
            if missing is not None:
                catalog.db.execute("UPDATE asset_contents SET is_missing = 0, hash = COALESCE(?, hash) WHERE id = ?",
                                   (digest, missing[0]))
                return False
            content_id = catalog._insert_content(path, digest, stat.st_size, stat.st_mtime_ns)
            catalog._insert_record(content_id, path, path.name, check_tags(catalog.roots.path_tags(path)),
                                   mime_type=guess_mime(path.name))
        return True
