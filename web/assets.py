"""The asset catalogue behind `--enable-assets`: records of files in input/, output/ and the model
folders, content-addressed by blake3, with tags, user metadata and keyset pagination.

After ComfyUI's app/assets (database models, services/ingest.py, services/path_utils.py,
seeder.py and docs/README.md, read at Comfy-Org/ComfyUI @07eea23 / @10998e6 / @050e9b3), written
here on the standard library's SQLite:

  asset_contents  bytes at one path: `path`, `hash` ('blake3:<hex>' or NULL until hashed),
                  `size_bytes`, `mtime_ns`, `is_missing`. At most one live (not missing) row per
                  path; two rows may share a hash (the same bytes in two places are two rows).
  asset_records   what a client sees (`id` is a UUID): name, MIME type, loader path, user and
                  extracted metadata, preview nomination, job id, times. Several records may
                  point at one content row.
  asset_tags      (record, tag) pairs; `asset_tag_names` remembers every tag ever used, so
                  GET /api/tags can list tags whose count fell to zero.

ComfyUI's rules kept here: every upload mints a new record (`created_new` is true) while the
bytes are deduplicated -- an upload whose hash is already stored (live, not in temp/, file
unchanged) points its new record at that content and writes nothing; new bytes go to
`<role folder>/<blake3 hex><ext>` (role = exactly one of the tags input / output / models, and
models needs one `model_type:<folder kind>` tag); deleting a record keeps its file and content
row; `missing` is a system tag projected from the content row and refused by the tag API; the
background scan (`SeedScanner`) records files already in the folders, hashing them only with
`--enable-asset-hashing`, and marks rows whose file vanished as missing.

The tables live in the server's database file (web/store.py's DB_NAME) beside the queue and
history; they are created if absent, so an existing database keeps working unchanged.
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from aiohttp import web

from web.asset_files import AssetError, AssetRoots, check_tags, guess_mime, hash_file, now_text
from web.confined_path import PathOutsideRoot, confined_path
from web.sqlite_db import SqliteDatabase

SORT_FIELDS = ("name", "created_at", "updated_at", "size", "last_access_time")
CURSOR_SORT_FIELDS = ("name", "created_at", "updated_at", "size")
PREVIEWABLE_PREFIXES = ("image/", "video/", "audio/", "text/")
_EXTENSION_RE = re.compile(r"^\.[A-Za-z0-9_+-]{1,15}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS asset_contents (
    id          TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    hash        TEXT,
    size_bytes  INTEGER NOT NULL,
    mtime_ns    INTEGER,
    is_missing  INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS asset_contents_live_path ON asset_contents(path) WHERE is_missing = 0;
CREATE INDEX IF NOT EXISTS asset_contents_hash ON asset_contents(hash);
CREATE TABLE IF NOT EXISTS asset_records (
    id                TEXT PRIMARY KEY,
    content_id        TEXT NOT NULL REFERENCES asset_contents(id),
    name              TEXT NOT NULL,
    mime_type         TEXT,
    loader_path       TEXT,
    user_metadata     TEXT NOT NULL DEFAULT '{}',
    system_metadata   TEXT,
    preview_id        TEXT,
    job_id            TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    last_access_time  TEXT
);
CREATE INDEX IF NOT EXISTS asset_records_content ON asset_records(content_id);
CREATE TABLE IF NOT EXISTS asset_tags (
    asset_id  TEXT NOT NULL,
    tag       TEXT NOT NULL,
    origin    TEXT NOT NULL DEFAULT 'manual',
    PRIMARY KEY (asset_id, tag)
);
CREATE INDEX IF NOT EXISTS asset_tags_tag ON asset_tags(tag);
CREATE TABLE IF NOT EXISTS asset_tag_names (name TEXT PRIMARY KEY);
"""


# The app's assets system (web/routes_assets.py AssetService: `.catalog`, `.scanner`, ...), or
# None when --enable-assets is off; /view and /upload/image (web/routes_files.py) read it too.
ASSETS_KEY: web.AppKey[Any] = web.AppKey("comfy_engine_assets", object)


def asset_service(app: web.Application) -> Any:
    """The app's AssetService, or None when the assets system is off (or the app has none)."""
    return app.get(ASSETS_KEY)


@dataclass
class AssetRecord:
    """One record joined with its content row, and its tags (sorted; `missing` projected)."""

    id: str
    name: str
    mime_type: str | None
    loader_path: str | None
    user_metadata: dict
    system_metadata: dict | None
    preview_id: str | None
    job_id: str | None
    created_at: str
    updated_at: str
    last_access_time: str | None
    content_id: str
    path: Path
    hash: str | None
    size: int
    is_missing: bool
    tags: list[str]


@dataclass(frozen=True)
class ListQuery:
    """GET /api/assets after validation (web/routes_assets.py builds it)."""

    tags_all: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    tags_none: tuple[str, ...] = ()
    name_contains: str | None = None
    hash: str | None = None
    limit: int = 20
    offset: int = 0
    sort: str = "created_at"
    order: str = "desc"
    after: str | None = None


_SORT_SQL = {"name": "r.name", "created_at": "r.created_at", "updated_at": "r.updated_at",
             "size": "c.size_bytes", "last_access_time": "r.last_access_time"}
_RECORD_COLUMNS = ("r.id, r.name, r.mime_type, r.loader_path, r.user_metadata, r.system_metadata, r.preview_id, "
                   "r.job_id, r.created_at, r.updated_at, r.last_access_time, c.id, c.path, c.hash, c.size_bytes, "
                   "c.is_missing")


def encode_cursor(sort: str, order: str, value: Any, record_id: str) -> str:
    raw = json.dumps({"s": sort, "o": order, "v": value, "id": record_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(text: str, sort: str, order: str) -> tuple[Any, str]:
    """(sort value, record id) of an `after` cursor made for this sort and order, or AssetError
    400 INVALID_CURSOR."""
    if sort not in CURSOR_SORT_FIELDS:
        raise AssetError(400, "INVALID_CURSOR", f"cursor pagination is not supported for sort={sort!r}")
    try:
        payload = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise AssetError(400, "INVALID_CURSOR", f"cursor cannot be read: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("id"), str):
        raise AssetError(400, "INVALID_CURSOR", "cursor cannot be read")
    if payload.get("s") != sort or payload.get("o") != order:
        raise AssetError(400, "INVALID_CURSOR", f"cursor was made for sort={payload.get('s')!r} "
                                                f"order={payload.get('o')!r}, not sort={sort!r} order={order!r}")
    value = payload.get("v")
    if (sort == "size" and (not isinstance(value, int) or isinstance(value, bool))) or \
            (sort != "size" and not isinstance(value, str)):
        raise AssetError(400, "INVALID_CURSOR", "cursor value has the wrong type")
    return value, payload["id"]


class AssetCatalog(SqliteDatabase):
    """The catalogue over one SQLite file. Methods are short transactions, thread-safe; the
    ones that read files (hashing) are meant for a worker thread."""

    def __init__(self, db_path: Path, roots: AssetRoots, *, hashing: bool = False) -> None:
        super().__init__(db_path, _SCHEMA, "asset catalogue")
        self.db_path = self.path
        self.roots = roots
        self.hashing = hashing

    def _write(self):
        return _Transaction(self)

    # -- reading ------------------------------------------------------------------------------
    def _records(self, where: str, params: Iterable[Any], suffix: str = "") -> list[AssetRecord]:
        rows = self.db.execute(f"SELECT {_RECORD_COLUMNS} FROM asset_records r JOIN asset_contents c "
                               f"ON c.id = r.content_id WHERE {where} {suffix}", tuple(params)).fetchall()
        if not rows:
            return []
        ids = [row[0] for row in rows]
        tags: dict[str, list[str]] = {i: [] for i in ids}
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for asset_id, tag in self.db.execute(
                    f"SELECT asset_id, tag FROM asset_tags WHERE asset_id IN ({','.join('?' * len(part))})", part):
                tags[asset_id].append(tag)
        out = []
        for row in rows:
            record_tags = sorted(tags[row[0]] + (["missing"] if row[15] else []))
            out.append(AssetRecord(row[0], row[1], row[2], row[3], _json_or(row[4], {}), _json_or(row[5], None),
                                   row[6], row[7], row[8], row[9], row[10], row[11], Path(row[12]), row[13],
                                   row[14], bool(row[15]), record_tags))
        return out

    def get(self, asset_id: str) -> AssetRecord | None:
        with self._lock:
            found = self._records("r.id = ?", (asset_id,))
        return found[0] if found else None

    def require(self, asset_id: str) -> AssetRecord:
        record = self.get(asset_id)
        if record is None:
            raise AssetError(404, "ASSET_NOT_FOUND", f"asset {asset_id} not found", {"id": asset_id})
        return record

    def _qualifying_content(self, digest: str) -> tuple[str, Path] | None:
        """The oldest live content row with this hash whose file is still there unchanged and
        not in temp/ (what dedup, from-hash and /view by hash may use)."""
        rows = self.db.execute("SELECT id, path, size_bytes, mtime_ns FROM asset_contents WHERE hash = ? AND "
                               "is_missing = 0 ORDER BY created_at, id", (digest,)).fetchall()
        for content_id, path_text, size, mtime_ns in rows:
            path = Path(path_text)
            if path.is_relative_to(self.roots.temp_dir):
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue
            if stat.st_size == size and (mtime_ns is None or stat.st_mtime_ns == mtime_ns):
                return content_id, path
        return None

    def hash_exists(self, digest: str) -> bool:
        with self._lock:
            return self._qualifying_content(digest) is not None

    def resolve_hash(self, digest: str) -> tuple[Path, str, str | None] | None:
        """(file, download name, MIME type) for `/view?filename=blake3:...`, or None."""
        with self._lock:
            found = self._qualifying_content(digest)
            if found is None:
                return None
            row = self.db.execute("SELECT name, mime_type FROM asset_records WHERE content_id = ? "
                                  "ORDER BY created_at, id LIMIT 1", (found[0],)).fetchone()
        if row is None:
            return found[1], found[1].name, guess_mime(found[1].name)
        return found[1], row[0], row[1] or guess_mime(row[0])

    # -- writing ------------------------------------------------------------------------------
    def _insert_content(self, path: Path, digest: str | None, size: int, mtime_ns: int | None) -> str:
        """A new live content row at `path`; a live row already there (other bytes) is retired."""
        self.db.execute("UPDATE asset_contents SET is_missing = 1 WHERE path = ? AND is_missing = 0", (str(path),))
        content_id = str(uuid.uuid4())
        self.db.execute("INSERT INTO asset_contents (id, path, hash, size_bytes, mtime_ns, is_missing, created_at) "
                        "VALUES (?, ?, ?, ?, ?, 0, ?)", (content_id, str(path), digest, size, mtime_ns, now_text()))
        return content_id

    def _insert_record(self, content_id: str, path: Path, name: str, tags: list[str], *, mime_type: str | None,
                       user_metadata: Mapping[str, Any] | None = None, preview_id: str | None = None,
                       job_id: str | None = None) -> str:
        if preview_id is not None:
            self._check_preview(preview_id)
        asset_id = str(uuid.uuid4())
        stamp = now_text()
        mime = mime_type or guess_mime(name) or guess_mime(path.name) or "application/octet-stream"
        self.db.execute(
            "INSERT INTO asset_records (id, content_id, name, mime_type, loader_path, user_metadata, system_metadata,"
            " preview_id, job_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (asset_id, content_id, name, mime, self.roots.loader_path(path), json.dumps(dict(user_metadata or {})),
             _json_text(_system_metadata(path, mime)), preview_id, job_id, stamp, stamp))
        self._tag(asset_id, tags, origin="automatic")
        return asset_id

    def _tag(self, asset_id: str, tags: Iterable[str], origin: str) -> None:
        for tag in tags:
            self.db.execute("INSERT OR IGNORE INTO asset_tags (asset_id, tag, origin) VALUES (?, ?, ?)",
                            (asset_id, tag, origin))
            self.db.execute("INSERT OR IGNORE INTO asset_tag_names (name) VALUES (?)", (tag,))

    def _check_preview(self, preview_id: str) -> None:
        if self.db.execute("SELECT 1 FROM asset_records WHERE id = ?", (preview_id,)).fetchone() is None:
            raise AssetError(400, "INVALID_BODY", f"preview_id {preview_id!r} is not an existing asset")

    def ingest_upload(self, temp_path: Path, digest: str, size: int, *, name: str, tags: list[str],
                      client_filename: str | None, user_metadata: Mapping[str, Any] | None = None,
                      mime_type: str | None = None, preview_id: str | None = None) -> AssetRecord:
        """Catalogue bytes received into `temp_path` (already hashed): reuse stored content with
        the same hash, else move the file to its content-addressed place. Always a new record;
        the temp file is gone afterwards either way."""
        try:
            record_tags = check_tags([*tags, "uploaded"])
            with self._write():
                found = self._qualifying_content(digest)
                if found is not None:
                    asset_id = self._insert_record(found[0], found[1], name, record_tags, mime_type=mime_type,
                                                   user_metadata=user_metadata, preview_id=preview_id)
                    return self._records("r.id = ?", (asset_id,))[0]
                if not tags:
                    raise AssetError(400, "INVALID_BODY", "tags are required for new asset uploads "
                                                          "(one of input, models, output)")
                base = self.roots.destination(tags)
                suffix = Path(client_filename or name or "").suffix
                extension = suffix if _EXTENSION_RE.match(suffix) else ""
                try:
                    dest = confined_path(base, f"{digest.split(':', 1)[1]}{extension}", what="asset file")
                except PathOutsideRoot as exc:
                    raise AssetError(400, "INVALID_BODY", str(exc)) from None
                if preview_id is not None:
                    self._check_preview(preview_id)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(temp_path), str(dest))  # a rename, or a copy across file systems
                stat = os.stat(dest)
                content_id = self._insert_content(dest, digest, size, stat.st_mtime_ns)
                asset_id = self._insert_record(content_id, dest, name, record_tags,
                                               mime_type=mime_type or guess_mime(client_filename or name),
                                               user_metadata=user_metadata, preview_id=preview_id)
                return self._records("r.id = ?", (asset_id,))[0]
        finally:
            Path(temp_path).unlink(missing_ok=True)

    def register_in_place(self, path: Path, name: str) -> AssetRecord:
        """A record for a file just written through /upload/image or /upload/mask, where it is.
        Dedup is by path only, as ComfyUI's register_file_in_place: the live row at this path
        is reused when it holds the same hash, else retired."""
        path = Path(path).resolve()
        digest, size, mtime_ns = hash_file(path)
        tags = check_tags([*self.roots.path_tags(path), "uploaded"])
        with self._write():
            row = self.db.execute("SELECT id, hash FROM asset_contents WHERE path = ? AND is_missing = 0",
                                  (str(path),)).fetchone()
            if row is not None and row[1] == digest:
                content_id = row[0]
                self.db.execute("UPDATE asset_contents SET size_bytes = ?, mtime_ns = ? WHERE id = ?",
                                (size, mtime_ns, content_id))
            else:
                content_id = self._insert_content(path, digest, size, mtime_ns)
            asset_id = self._insert_record(content_id, path, name, tags, mime_type=guess_mime(name))
            return self._records("r.id = ?", (asset_id,))[0]

    def register_output(self, path: Path, job_id: str | None) -> str:
        """A new record, owned by the prompt `job_id`, for a file a prompt wrote (or replayed
        from its cache) in output/ or temp/; returns its id (web/asset_outputs.py calls it).

        As ComfyUI's register_executed_output / register_cached_output: the name is the file's,
        the tags are the ones its folder gives (`output`, `temp`), and every run gets a record of
        its own. The live content row at the path is reused when the file is the one it
        describes (same size and mtime: a cached run, which wrote nothing); otherwise the bytes
        are new and that row is retired, so the older records show `missing`. Hashed only with
        --enable-asset-hashing (ComfyUI defers the hash too)."""
        path = Path(path)
        stat = os.stat(path)
        tags = check_tags(self.roots.path_tags(path))
        with self._write():
            row = self.db.execute("SELECT id, size_bytes, mtime_ns FROM asset_contents WHERE path = ? AND "
                                  "is_missing = 0", (str(path),)).fetchone()
            if row is not None and row[1] == stat.st_size and row[2] == stat.st_mtime_ns:
                return self._insert_record(row[0], path, path.name, tags, mime_type=None, job_id=job_id)
        digest, size, mtime_ns = None, stat.st_size, stat.st_mtime_ns
        if self.hashing:
            digest, size, mtime_ns = hash_file(path)  # outside the lock: other requests go on meanwhile
        with self._write():
            content_id = self._insert_content(path, digest, size, mtime_ns)
            return self._insert_record(content_id, path, path.name, tags, mime_type=None, job_id=job_id)

    def create_from_hash(self, digest: str, *, name: str, tags: list[str], user_metadata: Mapping[str, Any],
                         mime_type: str | None, preview_id: str | None) -> AssetRecord | None:
        """A new record for bytes already stored (None when no usable content has the hash)."""
        with self._write():
            found = self._qualifying_content(digest)
            if found is None:
                return None
            asset_id = self._insert_record(found[0], found[1], name, tags, mime_type=mime_type,
                                           user_metadata=user_metadata, preview_id=preview_id)
            return self._records("r.id = ?", (asset_id,))[0]

    def update(self, asset_id: str, *, name: str | None, user_metadata: Mapping[str, Any] | None,
               preview_id: str | None) -> AssetRecord:
        with self._write():
            self.require(asset_id)
            sets, params = [], []
            if name is not None:
                sets.append("name = ?")
                params.append(name)
            if user_metadata is not None:
                sets.append("user_metadata = ?")
                params.append(json.dumps(dict(user_metadata)))
            if preview_id is not None:
                if preview_id == asset_id:
                    raise AssetError(400, "INVALID_BODY", "an asset cannot be its own preview")
                self._check_preview(preview_id)
                sets.append("preview_id = ?")
                params.append(preview_id)
            sets.append("updated_at = ?")
            params.append(now_text())
            self.db.execute(f"UPDATE asset_records SET {', '.join(sets)} WHERE id = ?", (*params, asset_id))
            return self.require(asset_id)

    def delete(self, asset_id: str) -> bool:
        """Remove the record (its file and content row stay, as ComfyUI); previews naming it clear."""
        with self._write():
            if self.db.execute("DELETE FROM asset_records WHERE id = ?", (asset_id,)).rowcount == 0:
                return False
            self.db.execute("DELETE FROM asset_tags WHERE asset_id = ?", (asset_id,))
            self.db.execute("UPDATE asset_records SET preview_id = NULL WHERE preview_id = ?", (asset_id,))
            return True

    def mark_missing_outside_roots(self) -> int:
        """POST /api/assets/prune: live rows whose path is outside every known folder become
        missing (records kept; a later scan recovers them if the folder comes back)."""
        roots = self.roots
        bases = [roots.input_dir, roots.output_dir, roots.temp_dir, roots.models_dir,
                 *(b for bases in roots.model_folders.values() for b in bases)]
        with self._write():
            rows = self.db.execute("SELECT id, path FROM asset_contents WHERE is_missing = 0").fetchall()
            outside = [(cid,) for cid, path in rows if not any(Path(path).is_relative_to(b) for b in bases)]
            self.db.executemany("UPDATE asset_contents SET is_missing = 1 WHERE id = ?", outside)
        return len(outside)

    def touch(self, asset_id: str) -> None:
        """Content was read: last_access_time moves forward (updated_at does not)."""
        with self._write():
            self.db.execute("UPDATE asset_records SET last_access_time = ? WHERE id = ?", (now_text(), asset_id))

    def add_tags(self, asset_id: str, tags: list[str]) -> dict:
        with self._write():
            present = set(self.require(asset_id).tags)
            added = [t for t in tags if t not in present]
            self._tag(asset_id, added, origin="manual")
            if added:
                self.db.execute("UPDATE asset_records SET updated_at = ? WHERE id = ?", (now_text(), asset_id))
            return {"added": added, "already_present": [t for t in tags if t in present],
                    "total_tags": self.require(asset_id).tags}

    def remove_tags(self, asset_id: str, tags: list[str]) -> dict:
        with self._write():
            present = set(self.require(asset_id).tags)
            removed = [t for t in tags if t in present]
            for tag in removed:
                self.db.execute("DELETE FROM asset_tags WHERE asset_id = ? AND tag = ?", (asset_id, tag))
            if removed:
                self.db.execute("UPDATE asset_records SET updated_at = ? WHERE id = ?", (now_text(), asset_id))
            return {"removed": removed, "not_present": [t for t in tags if t not in present],
                    "total_tags": self.require(asset_id).tags}

    # -- listing ------------------------------------------------------------------------------
    @staticmethod
    def _filters(tags_all: Iterable[str], tags_any: Iterable[str], tags_none: Iterable[str],
                 name_contains: str | None, digest: str | None = None) -> tuple[str, list[Any]]:
        """SQL for the tag (`missing` read from the content row), name and hash filters."""
        where, params = ["1 = 1"], []
        has_tag = "EXISTS (SELECT 1 FROM asset_tags t WHERE t.asset_id = r.id AND t.tag = ?)"
        for tag in tags_all:
            where.append("c.is_missing = 1" if tag == "missing" else has_tag)
            params.extend([] if tag == "missing" else [tag])
        any_terms = [("c.is_missing = 1" if tag == "missing" else has_tag) for tag in tags_any]
        if any_terms:
            where.append("(" + " OR ".join(any_terms) + ")")
            params.extend(tag for tag in tags_any if tag != "missing")
        for tag in tags_none:
            where.append("c.is_missing = 0" if tag == "missing" else f"NOT {has_tag}")
            params.extend([] if tag == "missing" else [tag])
        if name_contains:
            where.append("instr(lower(r.name), lower(?)) > 0")
            params.append(name_contains)
        if digest:
            where.append("c.hash = ?")
            params.append(digest)
        return " AND ".join(where), params

    def list_page(self, query: ListQuery) -> tuple[list[AssetRecord], int, str | None]:
        """(records of this page, total matching the filters, next cursor or None). With
        `after`, `offset` is ignored (keyset pagination on (sort value, id))."""
        where, params = self._filters(query.tags_all, query.tags_any, query.tags_none, query.name_contains,
                                      query.hash)
        key = _SORT_SQL[query.sort]
        direction = "ASC" if query.order == "asc" else "DESC"
        join = "FROM asset_records r JOIN asset_contents c ON c.id = r.content_id"
        with self._lock:
            total = self.db.execute(f"SELECT COUNT(*) {join} WHERE {where}", params).fetchone()[0]
            page_where, page_params, offset = where, list(params), query.offset
            if query.after is not None:
                value, last_id = decode_cursor(query.after, query.sort, query.order)
                cmp = ">" if query.order == "asc" else "<"
                page_where += f" AND ({key} {cmp} ? OR ({key} = ? AND r.id {cmp} ?))"
                page_params += [value, value, last_id]
                offset = 0
            cursor_capable = query.sort in CURSOR_SORT_FIELDS
            fetch = query.limit + 1 if cursor_capable else query.limit
            records = self._records(page_where, [*page_params, fetch, offset],
                                    f"ORDER BY {key} {direction}, r.id {direction} LIMIT ? OFFSET ?")
        next_cursor = None
        if cursor_capable and len(records) > query.limit:
            records = records[:query.limit]
            last = records[-1]
            value = {"name": last.name, "created_at": last.created_at, "updated_at": last.updated_at,
                     "size": last.size}[query.sort]
            next_cursor = encode_cursor(query.sort, query.order, value, last.id)
        return records, total, next_cursor

    def tag_usage(self, *, prefix: str | None, limit: int, offset: int, order: str,
                  include_zero: bool) -> tuple[list[tuple[str, int]], int]:
        """[(tag, number of records carrying it)] and the number of tags, for GET /api/tags."""
        sql = ("SELECT n.name, (SELECT COUNT(*) FROM asset_tags t WHERE t.tag = n.name) AS uses "
               "FROM asset_tag_names n WHERE 1 = 1")
        params: list[Any] = []
        if prefix:
            sql += " AND substr(n.name, 1, ?) = ?"
            params += [len(prefix), prefix]
        if not include_zero:
            sql += " AND uses > 0"
        ordering = "uses DESC, n.name ASC" if order == "count_desc" else "n.name ASC"
        with self._lock:
            total = self.db.execute(f"SELECT COUNT(*) FROM ({sql})", params).fetchone()[0]
            rows = self.db.execute(f"{sql} ORDER BY {ordering} LIMIT ? OFFSET ?", [*params, limit, offset]).fetchall()
        return [(name, uses) for name, uses in rows], total

    def tag_histogram(self, *, tags_all: Iterable[str], tags_any: Iterable[str], tags_none: Iterable[str],
                      name_contains: str | None, limit: int) -> dict[str, int]:
        """{tag: records among the filtered ones carrying it}, most used first (GET
        /api/assets/tags/refine)."""
        where, params = self._filters(tags_all, tags_any, tags_none, name_contains)
        with self._lock:
            rows = self.db.execute(
                f"SELECT t.tag, COUNT(*) AS uses FROM asset_tags t JOIN asset_records r ON r.id = t.asset_id "
                f"JOIN asset_contents c ON c.id = r.content_id WHERE {where} GROUP BY t.tag "
                f"ORDER BY uses DESC, t.tag ASC LIMIT ?", [*params, limit]).fetchall()
        return {tag: uses for tag, uses in rows}

    # -- the view a client gets ---------------------------------------------------------------
    def view_url(self, path: Path) -> str | None:
        """`/api/view?...` for a file in input/, output/ or temp/ (models have no /view type)."""
        from urllib.parse import quote

        where = self.roots.namespace_of(path)
        if where is None or where[0] == "models":
            return None
        subfolder, _, filename = where[1].rpartition("/")
        url = f"/api/view?type={where[0]}&filename={quote(filename, safe='')}"
        return url + (f"&subfolder={quote(subfolder, safe='')}" if subfolder else "")

    def public(self, record: AssetRecord) -> dict:
        """ComfyUI's Asset response (schemas_out.Asset), None fields left out."""
        preview_url = None
        if record.preview_id:
            preview = self.get(record.preview_id)
            preview_url = self.view_url(preview.path) if preview is not None and not preview.is_missing else None
        elif not record.is_missing and (record.mime_type or "").lower().startswith(PREVIEWABLE_PREFIXES):
            preview_url = self.view_url(record.path)
        where = self.roots.namespace_of(record.path)
        out = {"id": record.id, "name": record.name, "hash": record.hash, "loader_path": record.loader_path,
               "display_name": where[1] if where else None, "size": record.size, "mime_type": record.mime_type,
               "tags": record.tags, "preview_url": preview_url, "preview_id": record.preview_id,
               "user_metadata": record.user_metadata, "is_immutable": False, "metadata": record.system_metadata,
               "job_id": record.job_id, "prompt_id": record.job_id, "created_at": record.created_at,
               "updated_at": record.updated_at, "last_access_time": record.last_access_time}
        return {k: v for k, v in out.items() if v is not None}


class _Transaction:
    """`with catalog._write():` one IMMEDIATE transaction under the catalogue's lock."""

    def __init__(self, catalog: AssetCatalog) -> None:
        self.catalog = catalog
        self.outer = False

    def __enter__(self) -> None:
        self.catalog._lock.acquire()
        db = self.catalog.db
        self.outer = not db.in_transaction
        if self.outer:
            db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self.outer:
                self.catalog.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.catalog._lock.release()


def _json_or(text: Any, default: Any) -> Any:
    try:
        value = json.loads(text) if text is not None else default
    except (TypeError, ValueError):
        return default
    return value if isinstance(value, dict) else default


def _json_text(value: dict | None) -> str | None:
    return None if value is None else json.dumps(value)


def _system_metadata(path: Path, mime: str | None) -> dict | None:
    """What is read from the file at registration: an image's width and height."""
    if not (mime or "").startswith("image/"):
        return None
    try:
        from PIL import Image

        with Image.open(path) as img:
            return {"width": img.width, "height": img.height}
    except (OSError, ValueError):
        return None
