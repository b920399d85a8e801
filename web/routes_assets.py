"""The assets HTTP API (`--enable-assets`), as today's ComfyUI serves it (app/assets/api/routes.py,
schemas_in.py, schemas_out.py, upload.py @07eea23, Comfy-Org/ComfyUI); the catalogue itself is
web/assets.py (its file rules web/asset_files.py), the folder scan web/asset_scan.py.

Routes (registered once, under `/api` only, as ComfyUI's register_assets_routes does):
  HEAD   /api/assets/hash/{blake3:hex}     200 stored / 404 not
  GET    /api/assets                       list: tags_all/tags_any/tags_none (or include_tags/
                                           exclude_tags), name_contains, hash, sort, order, limit,
                                           offset or cursor `after` -> {assets,total,has_more,next_cursor}
  POST   /api/assets                       multipart upload (file, tags, name, user_metadata, hash,
                                           mime_type, preview_id) -> 201 + created_new
  POST   /api/assets/from-hash             a new record for stored bytes (needs --enable-asset-hashing)
  GET/PUT/DELETE /api/assets/{uuid}        one record; PUT edits name/user_metadata/preview_id; DELETE 204
  GET    /api/assets/{uuid}/content        the bytes (?disposition=inline|attachment, Range -> 206)
  POST/DELETE /api/assets/{uuid}/tags      {"tags": [...]} -> {added|removed, already_present|not_present, total_tags}
  GET    /api/tags                         {tags:[{name,count}], total, has_more}
  GET    /api/assets/tags/refine           {tag_counts: {tag: n}} over the filtered records
  POST   /api/assets/seed[?wait=true], GET /api/assets/seed/status, POST /api/assets/seed/cancel,
  POST   /api/assets/prune                 the folder scan (the editor's Assets sidebar lists what it finds)

Every failure is `{"error": {"code", "message", "details"}}`; with the assets system off every
route answers 503 SERVICE_DISABLED.
"""
from __future__ import annotations

import asyncio
import functools
import json
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from web.auth.access import admin_only, may_read_path, record_owner, sees_all
from web.asset_scan import SeedScanner
from web.asset_files import SEED_ROOTS, SYSTEM_TAGS, AssetError, AssetRoots, check_name, check_tags, parse_hash
from web.assets import (ASSETS_KEY, CURSOR_SORT_FIELDS, SORT_FIELDS, AssetCatalog, ListQuery, asset_service,
                        encode_cursor)
from web.routes_files import is_active_type
from web.state import AppState
from web.store import DB_NAME

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_MIME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(;[ -~]*)?$")
MAX_TAG_FILTER_TAGS = 100
MAX_TEXT_FIELD = 64 * 1024
_UPLOAD_CHUNK = 1 << 20


@dataclass
class AssetService:
    """What the routes share: the catalogue, its scanner and the limits from the config."""

    catalog: AssetCatalog
    scanner: SeedScanner
    hashing: bool
    max_upload_bytes: int
    uploads_dir: Path


def error_response(status: int, code: str, message: str, details: dict | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "details": details or {}}}, status=status)


Handler = Callable[[web.Request, AssetService], Awaitable[web.StreamResponse]]


def _gated(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """503 SERVICE_DISABLED when assets are off; AssetError -> its envelope."""
    @functools.wraps(handler)
    async def wrapper(request: web.Request) -> web.StreamResponse:
        service = asset_service(request.app)
        if service is None:
            return error_response(503, "SERVICE_DISABLED", "Assets system is disabled. Start the server with "
                                                           "--enable-assets to use this feature.")
        try:
            return await handler(request, service)
        except AssetError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.details)
    return wrapper


# -- parsing helpers ---------------------------------------------------------------------------
def asset_id_of(request: web.Request) -> str:
    raw = request.match_info["id"]
    if not UUID_RE.match(raw):
        raise AssetError(404, "ASSET_NOT_FOUND", f"{raw[:80]!r} is not an asset id (a UUID)", {"id": raw[:80]})
    return str(uuid.UUID(raw))


def _int_param(query: Any, name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise AssetError(400, "INVALID_QUERY", f"{name} must be an integer, got {raw[:40]!r}",
                         {"parameter": name}) from None
    if not low <= value <= high:
        raise AssetError(400, "INVALID_QUERY", f"{name} must be between {low} and {high}, got {value}",
                         {"parameter": name})
    return value


def _choice(query: Any, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = query.get(name, default)
    if value not in choices:
        raise AssetError(400, "INVALID_QUERY", f"{name} must be one of {list(choices)}, got {value[:40]!r}",
                         {"parameter": name})
    return value


def _bool_param(query: Any, name: str, default: bool) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if raw.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise AssetError(400, "INVALID_QUERY", f"{name} must be true or false, got {raw[:40]!r}", {"parameter": name})


def _tag_param(query: Any, name: str) -> list[str]:
    """Repeated and/or comma-separated values (`tags_all=a,b&tags_all=c`)."""
    values = [part for raw in query.getall(name, []) for part in raw.split(",")]
    tags = check_tags(values, name)
    if len(tags) > MAX_TAG_FILTER_TAGS:
        raise AssetError(400, "INVALID_TAG_FILTER", f"'{name}' lists {len(tags)} tags; the maximum is "
                                                    f"{MAX_TAG_FILTER_TAGS}.",
                         {"parameter": name, "count": len(tags), "max": MAX_TAG_FILTER_TAGS})
    return tags


def tag_filters(query: Any) -> tuple[list[str], list[str], list[str]]:
    """(all, any, none) from the new names or the deprecated include_tags/exclude_tags, with
    ComfyUI's rules for mixing them (_resolve_tag_filters)."""
    include, exclude = _tag_param(query, "include_tags"), _tag_param(query, "exclude_tags")
    every, some, none = _tag_param(query, "tags_all"), _tag_param(query, "tags_any"), _tag_param(query, "tags_none")
    if not (every or some or none):
        return include, [], exclude
    if include and every:
        raise AssetError(400, "INVALID_TAG_FILTER", "Cannot combine 'include_tags' with 'tags_all'; use 'tags_all'.",
                         {"parameters": ["include_tags", "tags_all"]})
    if exclude and none:
        raise AssetError(400, "INVALID_TAG_FILTER", "Cannot combine 'exclude_tags' with 'tags_none'; use "
                                                    "'tags_none'.", {"parameters": ["exclude_tags", "tags_none"]})
    all_name, all_list = ("tags_all", every) if every else ("include_tags", include)
    none_name, none_list = ("tags_none", none) if none else ("exclude_tags", exclude)
    conflicting = sorted(set(all_list) & set(none_list))
    if conflicting:
        raise AssetError(400, "INVALID_TAG_FILTER", f"Query can never match: {conflicting} required by "
                                                    f"'{all_name}' but rejected by '{none_name}'.",
                         {"conflicting_tags": conflicting, "parameters": [all_name, none_name]})
    return all_list, some, none_list


def _optional_text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise AssetError(400, "INVALID_BODY", f"{name} must be a string")
    return value.strip() or None


def _mime(value: Any) -> str | None:
    text = _optional_text(value, "mime_type")
    if text is not None and not _MIME_RE.match(text):
        raise AssetError(400, "INVALID_BODY", f"mime_type {text[:60]!r} is not a media type like 'image/png'")
    return text


def _preview_id(value: Any) -> str | None:
    text = _optional_text(value, "preview_id")
    if text is not None and not UUID_RE.match(text):
        raise AssetError(400, "INVALID_BODY", f"preview_id {text[:60]!r} is not an asset id (a UUID)")
    return str(uuid.UUID(text)) if text is not None else None


def _metadata(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AssetError(400, "INVALID_BODY", "user_metadata must be a JSON object")
    return value


def _upload_tags(raw_fields: list[str]) -> list[str]:
    """Tags form fields: each a JSON array, a comma-separated list or one tag."""
    items: list[Any] = []
    for raw in raw_fields:
        text = raw.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except ValueError:
                raise AssetError(400, "INVALID_BODY", "tags: a field starting with '[' must be a JSON array") from None
            if not isinstance(parsed, list):
                raise AssetError(400, "INVALID_BODY", "tags: a field starting with '[' must be a JSON array")
            items.extend(parsed)
        else:
            items.extend(text.split(","))
    return check_tags(items)


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise AssetError(400, "INVALID_JSON", "Request body must be valid JSON.") from None
    if not isinstance(body, dict):
        raise AssetError(400, "INVALID_BODY", "Request body must be a JSON object.")
    return body


def _created(service: AssetService, record: Any) -> web.Response:
    # Every upload and from-hash call mints a new record in today's ComfyUI (docs/README.md,
    # "Upload the same bytes with the same name"): content is deduplicated, records are not.
    return web.json_response({**service.catalog.public(record), "created_new": True}, status=201)


# -- handlers ----------------------------------------------------------------------------------
async def head_hash(request: web.Request, service: AssetService) -> web.Response:
    digest = parse_hash(request.match_info["hash"])
    exists = await asyncio.to_thread(service.catalog.hash_exists, digest)
    return web.Response(status=200 if exists else 404)


# --users (web/auth/): a user sees the records whose file they may read (their own uploads and
# outputs, shared input files, models) or whose asset id they registered; admins see all. The same
# rule as v2's assets (web/routes_v2.py) and as this catalogue's content download.
_EVERY = 2 ** 62  # "no limit" for a page fetched whole to be filtered per user


def _visible(request: web.Request, record: Any) -> bool:
    return may_read_path(request, record.path, record.id, shared_outside=True)


async def _visible_record(request: web.Request, service: AssetService) -> Any:
    """The record of the route's id, or the catalogue's 404 when unknown or (--users) not the caller's."""
    record = await asyncio.to_thread(service.catalog.require, asset_id_of(request))
    if not sees_all(request) and not await asyncio.to_thread(_visible, request, record):
        raise AssetError(404, "ASSET_NOT_FOUND", f"asset {record.id} not found", {"id": record.id})
    return record


def _user_page(request: web.Request, catalog: AssetCatalog, query: ListQuery) -> tuple[list, int, str | None]:
    """list_page for a caller who sees only some records: the filters, order, offset and cursor
    applied to the records visible to them (blocking: call it in a worker thread)."""
    from dataclasses import replace

    every = replace(query, limit=_EVERY, offset=0)
    visible = [r for r in catalog.list_page(replace(every, after=None))[0] if _visible(request, r)]
    if query.after is not None:  # keyset continuation: the catalogue applies the cursor
        rest = [r for r in catalog.list_page(every)[0] if _visible(request, r)]
    else:
        rest = visible[query.offset:]
    records = rest[:query.limit]
    next_cursor = None
    if query.sort in CURSOR_SORT_FIELDS and len(rest) > query.limit:
        last = records[-1]
        value = {"name": last.name, "created_at": last.created_at, "updated_at": last.updated_at,
                 "size": last.size}[query.sort]
        next_cursor = encode_cursor(query.sort, query.order, value, last.id)
    return records, len(visible), next_cursor


async def list_assets(request: web.Request, service: AssetService) -> web.Response:
    q = request.query
    if "metadata_filter" in q:
        raise AssetError(400, "UNSUPPORTED_PARAM", "metadata_filter is no longer supported")
    every, some, none = tag_filters(q)
    _bool_param(q, "include_public", True)  # accepted, as ComfyUI: there is no shared pool to include
    digest = q.get("hash")
    query = ListQuery(tags_all=tuple(every), tags_any=tuple(some), tags_none=tuple(none),
                      name_contains=q.get("name_contains") or None,
                      hash=digest.strip().lower() if digest else None,
                      limit=_int_param(q, "limit", 20, 1, 500), offset=_int_param(q, "offset", 0, 0, 10**12),
                      sort=_choice(q, "sort", "created_at", SORT_FIELDS), order=_choice(q, "order", "desc", ("asc", "desc")),
                      after=q.get("after"))
    if sees_all(request):
        records, total, next_cursor = await asyncio.to_thread(service.catalog.list_page, query)
    else:
        records, total, next_cursor = await asyncio.to_thread(_user_page, request, service.catalog, query)
    has_more = next_cursor is not None if query.after is not None else query.offset + len(records) < total
    body: dict[str, Any] = {"assets": [service.catalog.public(r) for r in records], "total": total,
                            "has_more": has_more}
    if next_cursor is not None:
        body["next_cursor"] = next_cursor
    return web.json_response(body)


async def get_asset(request: web.Request, service: AssetService) -> web.Response:
    record = await _visible_record(request, service)
    return web.json_response(service.catalog.public(record))


async def asset_content(request: web.Request, service: AssetService) -> web.StreamResponse:
    record = await _visible_record(request, service)  # --users: another user's file reads as unknown
    disposition = request.query.get("disposition", "attachment").strip().lower()
    if disposition not in ("inline", "attachment"):
        disposition = "attachment"  # ComfyUI's reading: anything else downloads
    if record.is_missing or not record.path.is_file():
        raise AssetError(404, "FILE_NOT_FOUND", "Underlying file not found on disk.", {"id": record.id})
    content_type = (record.mime_type or "application/octet-stream").split(";", 1)[0].strip().lower()
    headers = {"X-Content-Type-Options": "nosniff"}
    if is_active_type(content_type):
        # The answer depends on Sec-Fetch-Dest: no cache may replay it to another destination.
        headers["Vary"] = "Sec-Fetch-Dest"
        headers["Cache-Control"] = "no-store"
        if not (content_type == "image/svg+xml" and request.headers.get("Sec-Fetch-Dest") == "image"):
            content_type, disposition = "application/octet-stream", "attachment"
    headers["Content-Disposition"] = f"{disposition}; filename*=UTF-8''{quote(record.name, safe='')}"
    headers["Content-Type"] = content_type or "application/octet-stream"
    await asyncio.to_thread(service.catalog.touch, record.id)
    # FileResponse answers `Range: bytes=a-b` with 206 + Content-Range (and 416 past the end),
    # as /view does (web/routes_files.py).
    return web.FileResponse(record.path, headers=headers)


async def upload_asset(request: web.Request, service: AssetService) -> web.Response:
    if not (request.content_type or "").lower().startswith("multipart/"):
        raise AssetError(415, "UNSUPPORTED_MEDIA_TYPE", "Use multipart/form-data for uploads.")
    work = service.uploads_dir / uuid.uuid4().hex
    try:
        return await _upload(request, service, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _read_text(part: Any, name: str) -> str:
    data = bytearray()
    while chunk := await part.read_chunk(8192):
        data += chunk
        if len(data) > MAX_TEXT_FIELD:
            raise AssetError(400, "INVALID_BODY", f"form field {name!r} is longer than {MAX_TEXT_FIELD} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AssetError(400, "INVALID_BODY", f"form field {name!r} is not UTF-8 text") from None


async def _upload(request: web.Request, service: AssetService, work: Path) -> web.Response:
    from blake3 import blake3

    fields: dict[str, Any] = {"tags": []}
    received: tuple[Path, str, int, str | None] | None = None
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            name = part.name or ""
            if name == "file":
                if received is not None:
                    raise AssetError(400, "INVALID_BODY", "send one 'file' part per upload")
                work.mkdir(parents=True, exist_ok=True)
                temp = work / ".upload.part"
                digest, size = blake3(), 0
                with open(temp, "wb") as fh:
                    while chunk := await part.read_chunk(_UPLOAD_CHUNK):
                        size += len(chunk)
                        if size > service.max_upload_bytes:
                            raise AssetError(413, "UPLOAD_TOO_LARGE", f"the file is larger than the "
                                                                      f"{service.max_upload_bytes}-byte upload limit")
                        digest.update(chunk)
                        fh.write(chunk)
                received = (temp, f"blake3:{digest.hexdigest()}", size, part.filename)
            elif name == "id":
                raise AssetError(400, "UNSUPPORTED_FIELD", "Client-provided 'id' is not supported. Asset IDs are "
                                                           "assigned by the server.")
            elif name == "tags":
                fields["tags"].append(await _read_text(part, name))
            elif name in ("name", "user_metadata", "hash", "mime_type", "preview_id"):
                fields[name] = await _read_text(part, name)
    except (ValueError, HttpProcessingError, AssertionError) as exc:
        raise AssetError(400, "INVALID_BODY", f"malformed multipart body: {exc}") from None
    digest_given = parse_hash(fields["hash"]) if (fields.get("hash") or "").strip() else None
    known = digest_given is not None and await asyncio.to_thread(service.catalog.hash_exists, digest_given)
    if received is None and not known:
        raise AssetError(400, "MISSING_FILE", "Form must include a 'file' part or a known 'hash'.")
    if received is not None and received[2] == 0 and not known:
        raise AssetError(400, "EMPTY_UPLOAD", "Uploaded file is empty.")
    tags = _upload_tags(fields["tags"])
    raw_metadata = (fields.get("user_metadata") or "").strip()
    try:
        metadata = _metadata(json.loads(raw_metadata)) if raw_metadata else {}
    except ValueError:
        raise AssetError(400, "INVALID_BODY", "user_metadata must be JSON") from None
    mime_type, preview_id = _mime(fields.get("mime_type")), _preview_id(fields.get("preview_id"))
    client_name = (received[3] or "").strip() if received is not None else ""
    given_name = fields.get("name")
    if given_name is not None and given_name.strip():
        name = check_name(given_name)
    elif client_name:
        name = check_name(client_name, "file name")
    else:
        name = digest_given.split(":", 1)[1] if received is None else "upload"
    if received is None:  # a known hash and no bytes: a record for what is stored
        if not service.hashing:
            raise AssetError(400, "FEATURE_DISABLED", "Asset hashing is disabled.")
        record = await asyncio.to_thread(service.catalog.create_from_hash, digest_given, name=name, tags=tags,
                                         user_metadata=metadata, mime_type=mime_type, preview_id=preview_id)
        if record is None:
            raise AssetError(404, "ASSET_NOT_FOUND", f"Asset content {digest_given} does not exist")
        return _created(service, record)
    temp, digest, size, _ = received
    if digest_given is not None and digest_given != digest:
        raise AssetError(400, "HASH_MISMATCH", "Uploaded file hash does not match provided hash.",
                         {"expected": digest_given, "received": digest})
    record = await asyncio.to_thread(service.catalog.ingest_upload, temp, digest, size, name=name, tags=tags,
                                     client_filename=client_name or None, user_metadata=metadata,
                                     mime_type=mime_type, preview_id=preview_id)
    record_owner(request, record.path, record.id)  # --users: the uploader's file and record (web/auth/)
    return _created(service, record)


async def from_hash(request: web.Request, service: AssetService) -> web.Response:
    body = await _json_body(request)
    try:
        digest = parse_hash(body.get("hash"))
    except AssetError as exc:
        raise AssetError(400, "INVALID_BODY", exc.message, {"field": "hash"}) from None
    tags = body.get("tags", [])
    if not isinstance(tags, list):
        raise AssetError(400, "INVALID_BODY", "tags must be a list of strings")
    name = check_name(body["name"]) if body.get("name") is not None else digest.split(":", 1)[1]
    metadata, mime_type = _metadata(body.get("user_metadata")), _mime(body.get("mime_type"))
    preview_id, tags = _preview_id(body.get("preview_id")), check_tags(tags)
    if not service.hashing:
        raise AssetError(400, "FEATURE_DISABLED", "Asset hashing is disabled.")
    record = await asyncio.to_thread(service.catalog.create_from_hash, digest, name=name, tags=tags,
                                     user_metadata=metadata, mime_type=mime_type, preview_id=preview_id)
    if record is None:
        raise AssetError(404, "ASSET_NOT_FOUND", f"Asset content {digest} does not exist")
    record_owner(request, None, record.id)  # --users: knowing the hash, the caller has the bytes (as v2)
    return _created(service, record)


async def update_asset(request: web.Request, service: AssetService) -> web.Response:
    asset_id = (await _visible_record(request, service)).id
    body = await _json_body(request)
    name, metadata, preview = body.get("name"), body.get("user_metadata"), body.get("preview_id")
    if name is None and metadata is None and preview is None:
        raise AssetError(400, "INVALID_BODY", "Provide at least one of: name, user_metadata, preview_id.")
    record = await asyncio.to_thread(
        service.catalog.update, asset_id, name=check_name(name) if name is not None else None,
        user_metadata=_metadata(metadata) if metadata is not None else None, preview_id=_preview_id(preview))
    return web.json_response(service.catalog.public(record))


async def delete_asset(request: web.Request, service: AssetService) -> web.Response:
    asset_id = (await _visible_record(request, service)).id
    if not await asyncio.to_thread(service.catalog.delete, asset_id):
        raise AssetError(404, "ASSET_NOT_FOUND", f"asset {asset_id} not found", {"id": asset_id})
    return web.Response(status=204)


async def _tag_body(request: web.Request) -> list[str]:
    body = await _json_body(request)
    raw = body.get("tags")
    if not isinstance(raw, list) or not raw:
        raise AssetError(400, "INVALID_BODY", "body must be {\"tags\": [at least one tag]}")
    tags = check_tags(raw)
    if not tags:
        raise AssetError(400, "INVALID_BODY", "tags are all empty")
    for tag in tags:
        if tag in SYSTEM_TAGS:
            raise AssetError(400, "SYSTEM_TAG_FORBIDDEN", f"Tag '{tag}' is system-managed and cannot be modified "
                                                          "via the API", {"tag": tag})
    return tags


async def add_tags(request: web.Request, service: AssetService) -> web.Response:
    asset_id = (await _visible_record(request, service)).id
    tags = await _tag_body(request)
    return web.json_response(await asyncio.to_thread(service.catalog.add_tags, asset_id, tags))


async def remove_tags(request: web.Request, service: AssetService) -> web.Response:
    asset_id = (await _visible_record(request, service)).id
    tags = await _tag_body(request)
    return web.json_response(await asyncio.to_thread(service.catalog.remove_tags, asset_id, tags))


async def list_tags(request: web.Request, service: AssetService) -> web.Response:
    q = request.query
    prefix = (q.get("prefix") or "").strip() or None
    if prefix is not None and len(prefix) > 256:
        raise AssetError(400, "INVALID_QUERY", "prefix is longer than 256 characters", {"parameter": "prefix"})
    limit, offset = _int_param(q, "limit", 100, 1, 1000), _int_param(q, "offset", 0, 0, 10_000_000)
    order = _choice(q, "order", "count_desc", ("count_desc", "name_asc"))
    include_zero = _bool_param(q, "include_zero", True)
    if sees_all(request):
        rows, total = await asyncio.to_thread(service.catalog.tag_usage, prefix=prefix, limit=limit, offset=offset,
                                              order=order, include_zero=include_zero)
    else:
        rows, total = await asyncio.to_thread(_user_tag_usage, request, service.catalog, prefix, limit, offset,
                                              order, include_zero)
    return web.json_response({"tags": [{"name": n, "count": c} for n, c in rows], "total": total,
                              "has_more": offset + len(rows) < total})


def _user_tag_usage(request: web.Request, catalog: AssetCatalog, prefix: str | None, limit: int, offset: int,
                    order: str, include_zero: bool) -> tuple[list[tuple[str, int]], int]:
    """tag_usage counted over the records the caller sees (--users). A tag no record carries at
    all is listed with 0 (with include_zero), as for everyone; one only others' records carry is
    not listed (its name would tell of their files)."""
    counts: dict[str, int] = {}
    for record in catalog.list_page(ListQuery(limit=_EVERY))[0]:
        if _visible(request, record):
            for tag in record.tags:
                if tag != "missing":  # projected from the file's state, not a stored tag (as tag_usage)
                    counts[tag] = counts.get(tag, 0) + 1
    if include_zero:
        for tag, uses in catalog.tag_usage(prefix=prefix, limit=_EVERY, offset=0, order="name_asc",
                                           include_zero=True)[0]:
            if uses == 0:
                counts.setdefault(tag, 0)
    rows = [(tag, uses) for tag, uses in counts.items() if not prefix or tag.startswith(prefix)]
    rows.sort(key=(lambda row: (-row[1], row[0])) if order == "count_desc" else (lambda row: row[0]))
    return rows[offset:offset + limit], len(rows)


def _user_histogram(request: web.Request, catalog: AssetCatalog, query: ListQuery, limit: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in catalog.list_page(query)[0]:
        if _visible(request, record):
            for tag in record.tags:
                if tag != "missing":  # projected from the file's state, not a stored tag (as tag_usage)
                    counts[tag] = counts.get(tag, 0) + 1
    return dict(sorted(counts.items(), key=lambda row: (-row[1], row[0]))[:limit])


async def refine_tags(request: web.Request, service: AssetService) -> web.Response:
    q = request.query
    if "metadata_filter" in q:
        raise AssetError(400, "UNSUPPORTED_PARAM", "metadata_filter is no longer supported")
    every, some, none = tag_filters(q)
    if not sees_all(request):
        query = ListQuery(tags_all=tuple(every), tags_any=tuple(some), tags_none=tuple(none),
                          name_contains=q.get("name_contains") or None, limit=_EVERY)
        return web.json_response({"tag_counts": await asyncio.to_thread(
            _user_histogram, request, service.catalog, query, _int_param(q, "limit", 100, 1, 1000))})
    counts = await asyncio.to_thread(service.catalog.tag_histogram, tags_all=every, tags_any=some, tags_none=none,
                                     name_contains=q.get("name_contains") or None,
                                     limit=_int_param(q, "limit", 100, 1, 1000))
    return web.json_response({"tag_counts": counts})


@admin_only  # --users (web/auth/): catalogue-wide maintenance
async def seed(request: web.Request, service: AssetService) -> web.Response:
    roots: Any = list(SEED_ROOTS)
    if request.can_read_body:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            body = None  # ComfyUI: an unreadable body scans every root
        if isinstance(body, dict) and "roots" in body:
            roots = body["roots"]
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise AssetError(400, "INVALID_BODY", "roots must be a list of 'models', 'input', 'output'")
    valid = tuple(r for r in roots if r in SEED_ROOTS)
    if not valid:
        raise AssetError(400, "INVALID_BODY", "No valid roots specified")
    if not service.scanner.start(valid):
        return web.json_response({"status": "already_running"}, status=409)
    if request.query.get("wait", "").lower() in ("true", "1", "yes"):
        await asyncio.to_thread(service.scanner.wait)
        status = service.scanner.status()
        return web.json_response({"status": "completed", "progress": status["progress"], "errors": status["errors"]})
    return web.json_response({"status": "started"}, status=202)


async def seed_status(request: web.Request, service: AssetService) -> web.Response:
    return web.json_response(service.scanner.status())


@admin_only
async def seed_cancel(request: web.Request, service: AssetService) -> web.Response:
    return web.json_response({"status": "cancelling" if service.scanner.cancel() else "idle"})


@admin_only
async def prune(request: web.Request, service: AssetService) -> web.Response:
    if service.scanner.status()["state"] != "IDLE":
        return web.json_response({"status": "scan_running", "marked": 0}, status=409)
    marked = await asyncio.to_thread(service.catalog.mark_missing_outside_roots)
    return web.json_response({"status": "completed", "marked": marked})


# -- wiring ------------------------------------------------------------------------------------
def _routes() -> list[tuple[str, str, Handler]]:
    # Literal paths before `{id}` ones; `{id}` is checked as a UUID by the handlers (JSON 404).
    return [
        ("HEAD", "/api/assets/hash/{hash}", head_hash),
        ("GET", "/api/assets", list_assets), ("POST", "/api/assets", upload_asset),
        ("POST", "/api/assets/from-hash", from_hash),
        ("GET", "/api/assets/tags/refine", refine_tags), ("GET", "/api/tags", list_tags),
        ("POST", "/api/assets/seed", seed), ("GET", "/api/assets/seed/status", seed_status),
        ("POST", "/api/assets/seed/cancel", seed_cancel), ("POST", "/api/assets/prune", prune),
        ("GET", "/api/assets/{id}", get_asset), ("PUT", "/api/assets/{id}", update_asset),
        ("DELETE", "/api/assets/{id}", delete_asset), ("GET", "/api/assets/{id}/content", asset_content),
        ("POST", "/api/assets/{id}/tags", add_tags), ("DELETE", "/api/assets/{id}/tags", remove_tags),
    ]


def add_asset_routes(app: web.Application, state: AppState) -> None:
    """Serve the assets API on `app`; with `state.config.enable_assets` open the catalogue in the
    server's database file, scan the folders once the server starts, close it on cleanup."""
    service = None
    if state.config.enable_assets:
        env = state.env
        catalog = AssetCatalog(Path(env.user_dir) / DB_NAME, AssetRoots.from_env(env),
                               hashing=state.config.enable_asset_hashing).open()
        service = AssetService(catalog, SeedScanner(catalog), state.config.enable_asset_hashing,
                               state.config.max_upload_bytes, Path(env.temp_dir) / "uploads")

        async def scan_on_start(app: web.Application) -> None:
            service.scanner.start()

        async def close(app: web.Application) -> None:
            service.scanner.cancel()
            await asyncio.to_thread(service.scanner.wait, 10.0)
            service.catalog.close()

        app.on_startup.append(scan_on_start)
        app.on_cleanup.append(close)
    app[ASSETS_KEY] = service
    for method, path, handler in _routes():
        if method == "GET":
            app.router.add_get(path, _gated(handler))  # HEAD too, as aiohttp's (and ComfyUI's) default
        else:
            app.router.add_route(method, path, _gated(handler))

