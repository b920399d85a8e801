"""The assets API (`--enable-assets`, web/routes_assets.py over web/assets.py): every route, content
dedup, tags, filters, offset and cursor pagination, content ranges, hash lookup (HEAD, from-hash,
/view?filename=blake3:), /upload/image's `asset`, the folder scan, the disabled mode's 503
envelope, a database that already holds a queue, and hostile input (bad ids, hashes, names)."""
from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import uuid

import aiohttp
import pytest
from blake3 import blake3
from PIL import Image

from tests.web.web_harness import start_test_server
from web.asset_files import AssetError, AssetRoots
from web.assets import AssetCatalog, ListQuery
from web.store import DB_NAME, PromptStore


@pytest.fixture
async def assets_server(tmp_path):
    srv = await start_test_server(tmp_path, enable_assets=True)
    try:
        await _idle(srv)
        yield srv
    finally:
        await srv.close()


@pytest.fixture
async def hashing_server(tmp_path):
    srv = await start_test_server(tmp_path, enable_assets=True, enable_asset_hashing=True)
    try:
        await _idle(srv)
        yield srv
    finally:
        await srv.close()


def _hash(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def _png(color=(200, 10, 10), size=(4, 3)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


async def _idle(srv) -> None:
    for _ in range(500):
        async with srv.session.get(f"{srv.url}/api/assets/seed/status") as resp:
            if resp.status != 200 or (await resp.json())["state"] == "IDLE":
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the asset scan did not finish")


async def _call(srv, method: str, path: str, **kw) -> tuple[int, dict | None]:
    async with srv.session.request(method, f"{srv.url}{path}", **kw) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if text else None)


async def _upload(srv, data: bytes | None, *, filename: str = "pic.png", tags=("input",), **fields) -> tuple:
    form = aiohttp.FormData(default_to_multipart=True)
    if data is not None:
        form.add_field("file", data, filename=filename, content_type="application/octet-stream")
    for tag in tags:
        form.add_field("tags", tag)
    for key, value in fields.items():
        form.add_field(key, value)
    return await _call(srv, "POST", "/api/assets", data=form)


def _raw_multipart(parts: list[tuple[str, str | None, bytes]]) -> tuple[bytes, dict]:
    """A body written by hand (aiohttp's client would escape a hostile file name; a browser does not)."""
    boundary = "----assettestboundary"
    body = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def _error(body: dict | None) -> str:
    assert body is not None and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]["code"]


# -- disabled ----------------------------------------------------------------------------------
async def test_every_route_answers_503_service_disabled_when_assets_are_off(server):
    some_id = str(uuid.uuid4())
    routes = [("GET", "/api/assets"), ("POST", "/api/assets"), ("POST", "/api/assets/from-hash"),
              ("GET", f"/api/assets/{some_id}"), ("PUT", f"/api/assets/{some_id}"),
              ("DELETE", f"/api/assets/{some_id}"), ("GET", f"/api/assets/{some_id}/content"),
              ("POST", f"/api/assets/{some_id}/tags"), ("DELETE", f"/api/assets/{some_id}/tags"),
              ("GET", "/api/tags"), ("GET", "/api/assets/tags/refine"), ("POST", "/api/assets/seed"),
              ("GET", "/api/assets/seed/status"), ("POST", "/api/assets/seed/cancel"), ("POST", "/api/assets/prune")]
    for method, path in routes:
        status, body = await _call(server, method, path)
        assert status == 503 and _error(body) == "SERVICE_DISABLED", (method, path)
    status, _ = await _call(server, "HEAD", f"/api/assets/hash/{_hash(b'x')}")
    assert status == 503
    assert (await server.get_json("/features"))["assets"] is False
    status, _ = await _call(server, "GET", "/view", params={"filename": _hash(b"x")})
    assert status == 404
    form = aiohttp.FormData()
    form.add_field("image", _png(), filename="a.png", content_type="image/png")
    status, body = await _call(server, "POST", "/upload/image", data=form)
    assert status == 200 and "asset" not in body


# -- upload, dedup, record ---------------------------------------------------------------------
async def test_upload_stores_content_addressed_and_dedups_content_not_records(assets_server, tmp_path):
    srv = assets_server
    assert (await srv.get_json("/features"))["assets"] is True
    data = _png()
    status, first = await _upload(srv, data, filename="red.png", user_metadata='{"k": 1}')
    assert status == 201 and first["created_new"] is True
    digest = _hash(data)
    assert first["hash"] == digest and first["size"] == len(data) and first["mime_type"] == "image/png"
    assert first["name"] == "red.png" and first["tags"] == ["input", "uploaded"]
    assert first["user_metadata"] == {"k": 1} and first["metadata"] == {"width": 4, "height": 3}
    hex_name = digest.split(":")[1] + ".png"
    assert first["display_name"] == hex_name and first["loader_path"] == hex_name
    assert first["preview_url"] == f"/api/view?type=input&filename={hex_name}"
    assert (tmp_path / "input" / hex_name).read_bytes() == data
    assert first["created_at"] == first["updated_at"] and "last_access_time" not in first
    status, again = await _upload(srv, data, filename="other.png", tags=("output", "mine"))
    assert status == 201 and again["created_new"] is True and again["id"] != first["id"]
    assert again["hash"] == digest and again["display_name"] == hex_name  # the stored bytes reused
    assert again["tags"] == ["mine", "output", "uploaded"]
    assert not (tmp_path / "output" / hex_name).exists()
    assert [p.name for p in (tmp_path / "input").iterdir()] == [hex_name]
    assert not any((tmp_path / "temp" / "uploads").iterdir())
    assert await srv.get_json(f"/api/assets/{first['id']}") == {k: v for k, v in first.items() if k != "created_new"}
    listed = await srv.get_json("/api/assets")
    assert listed["total"] == 2 and {a["id"] for a in listed["assets"]} == {first["id"], again["id"]}


async def test_models_upload_goes_to_the_kind_folder(assets_server, tmp_path):
    data = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    status, body = await _upload(assets_server, data, filename="tiny.safetensors",
                                 tags=("models", "model_type:checkpoints"))
    assert status == 201, body
    hex_name = _hash(data).split(":")[1] + ".safetensors"
    assert (tmp_path / "models" / "checkpoints" / hex_name).read_bytes() == data
    assert body["loader_path"] == hex_name and body["display_name"] == f"checkpoints/{hex_name}"
    assert body["tags"] == ["model_type:checkpoints", "models", "uploaded"] and "preview_url" not in body


@pytest.mark.parametrize("tags, why", [((), "tags are required"), (("input", "output"), "exactly one"),
                                       (("models",), "model_type"), (("models", "model_type:nope"), "unknown")])
async def test_upload_destination_tags_are_checked(assets_server, tags, why):
    status, body = await _upload(assets_server, b"abc", tags=tags)
    assert status == 400 and _error(body) == "INVALID_BODY" and why in body["error"]["message"]


async def test_upload_refuses_bad_forms(assets_server, tmp_path):
    srv = assets_server
    status, body = await _call(srv, "POST", "/api/assets", json={"file": "x"})
    assert status == 415 and _error(body) == "UNSUPPORTED_MEDIA_TYPE"
    status, body = await _upload(srv, b"")
    assert status == 400 and _error(body) == "EMPTY_UPLOAD"
    status, body = await _upload(srv, None)
    assert status == 400 and _error(body) == "MISSING_FILE"
    status, body = await _upload(srv, b"abc", id=str(uuid.uuid4()))
    assert status == 400 and _error(body) == "UNSUPPORTED_FIELD"
    status, body = await _upload(srv, b"abc", hash=_hash(b"abd"))
    assert status == 400 and _error(body) == "HASH_MISMATCH"
    status, body = await _upload(srv, b"abc", hash="sha256:00")
    assert status == 400 and _error(body) == "INVALID_HASH"
    for fields in ({"user_metadata": "[1]"}, {"user_metadata": "{nope"}, {"mime_type": "text/html\r\nX: y"},
                   {"preview_id": "../x"}, {"preview_id": str(uuid.uuid4())}, {"name": "../../etc/passwd"},
                   {"name": "a\x01b"}, {"name": "x" * 513}):
        status, body = await _upload(srv, b"abc", **fields)
        assert status == 400 and _error(body) == "INVALID_BODY", fields
    for hostile in ("../evil.png", "..\\\\evil.png", "sub/evil.png", "bad\x01.png"):
        raw, headers = _raw_multipart([("tags", None, b"input"), ("file", hostile, b"abc")])
        status, body = await _call(srv, "POST", "/api/assets", data=raw, headers=headers)
        assert status == 400 and _error(body) == "INVALID_BODY", hostile
    assert list((tmp_path / "input").iterdir()) == [] and (await srv.get_json("/api/assets"))["total"] == 0


async def test_upload_over_the_limit_is_413(tmp_path):
    srv = await start_test_server(tmp_path, enable_assets=True, max_upload_size_mb=0.001)
    try:
        status, body = await _upload(srv, b"x" * 2000)
        assert status == 413 and _error(body) == "UPLOAD_TOO_LARGE"
        assert list((tmp_path / "input").iterdir()) == []
    finally:
        await srv.close()


# -- hash lookup -------------------------------------------------------------------------------
async def test_head_hash_from_hash_and_view_by_hash(assets_server):
    srv = assets_server
    data = _png((1, 2, 3))
    _, record = await _upload(srv, data, filename="blue.png")
    assert (await _call(srv, "HEAD", f"/api/assets/hash/{_hash(data)}"))[0] == 200
    assert (await _call(srv, "HEAD", f"/api/assets/hash/{_hash(data).upper()}"))[0] == 200
    assert (await _call(srv, "HEAD", f"/api/assets/hash/{_hash(b'nothing')}"))[0] == 404
    for bad in ("blake3:xyz", "md5:" + "0" * 64, "blake3:" + "0" * 63):
        assert (await _call(srv, "HEAD", f"/api/assets/hash/{bad}"))[0] == 400
    status, body = await _call(srv, "POST", "/api/assets/from-hash", json={"hash": _hash(data)})
    assert status == 400 and _error(body) == "FEATURE_DISABLED"  # from-hash needs --enable-asset-hashing
    async with srv.session.get(f"{srv.url}/view", params={"filename": _hash(data)}) as resp:
        assert resp.status == 200 and await resp.read() == data
        assert 'filename="blue.png"' in resp.headers["Content-Disposition"]
    assert (await _call(srv, "GET", "/view", params={"filename": _hash(b"none")}))[0] == 404
    status, body = await _call(srv, "GET", "/view", params={"filename": "blake3:../../etc/passwd"})
    assert status == 400
    assert (await _call(srv, "GET", "/view", params={"filename": "blake3:" + "a" * 64, "type": "input"}))[0] == 404
    assert record["hash"] == _hash(data)


async def test_from_hash_makes_a_new_record_for_stored_bytes(hashing_server, tmp_path):
    srv = hashing_server
    data = b"shared bytes"
    _, original = await _upload(srv, data, filename="a.bin")
    status, body = await _call(srv, "POST", "/api/assets/from-hash",
                               json={"hash": _hash(data), "name": "copy.bin", "tags": ["mine"],
                                     "user_metadata": {"a": 1}})
    assert status == 201 and body["created_new"] is True and body["id"] != original["id"]
    assert body["hash"] == _hash(data) and body["display_name"] == original["display_name"]
    assert body["tags"] == ["mine"] and body["user_metadata"] == {"a": 1} and body["name"] == "copy.bin"
    status, body = await _call(srv, "POST", "/api/assets/from-hash", json={"hash": _hash(b"unknown")})
    assert status == 404 and _error(body) == "ASSET_NOT_FOUND"
    status, body = await _call(srv, "POST", "/api/assets/from-hash", data=b"{not json",
                               headers={"Content-Type": "application/json"})
    assert status == 400 and _error(body) == "INVALID_JSON"
    for bad in ({"hash": "blake3:zz"}, {"hash": _hash(data), "tags": "x"}, {"hash": _hash(data), "name": "a/b"},
                [1, 2]):
        status, body = await _call(srv, "POST", "/api/assets/from-hash", json=bad)
        assert status == 400 and _error(body) == "INVALID_BODY", bad
    # a hash and no file in the multipart form: a record for the stored bytes
    status, body = await _upload(srv, None, hash=_hash(data), tags=("x",))
    assert status == 201 and body["hash"] == _hash(data) and body["tags"] == ["x"]
    (tmp_path / "input" / original["display_name"]).unlink()  # gone from disk: nothing to point at
    status, body = await _call(srv, "POST", "/api/assets/from-hash", json={"hash": _hash(data)})
    assert status == 404


# -- one record --------------------------------------------------------------------------------
async def test_get_put_delete_and_bad_ids(assets_server, tmp_path):
    srv = assets_server
    _, record = await _upload(srv, _png(), filename="r.png")
    _, preview = await _upload(srv, _png((0, 255, 0)), filename="p.png")
    rid = record["id"]
    status, body = await _call(srv, "PUT", f"/api/assets/{rid.upper()}",
                               json={"name": "renamed.png", "user_metadata": {"x": [1]}, "preview_id": preview["id"]})
    assert status == 200 and body["id"] == rid and body["name"] == "renamed.png" and body["user_metadata"] == {"x": [1]}
    assert body["preview_id"] == preview["id"] and body["preview_url"] == preview["preview_url"]
    assert body["updated_at"] > record["updated_at"] and body["created_at"] == record["created_at"]
    for bad in ({}, {"name": "a/b"}, {"user_metadata": [1]}, {"preview_id": str(uuid.uuid4())},
                {"preview_id": rid}, {"name": ""}):
        status, answer = await _call(srv, "PUT", f"/api/assets/{rid}", json=bad)
        assert status == 400 and _error(answer) == "INVALID_BODY", bad
    status, answer = await _call(srv, "PUT", f"/api/assets/{rid}", data=b"[", headers={"Content-Type": "application/json"})
    assert status == 400 and _error(answer) == "INVALID_JSON"
    # deleting the preview clears the nomination; deleting keeps the file
    assert (await _call(srv, "DELETE", f"/api/assets/{preview['id']}"))[0] == 204
    assert "preview_id" not in await srv.get_json(f"/api/assets/{rid}")
    assert (tmp_path / "input" / preview["display_name"]).is_file()
    assert (await _call(srv, "DELETE", f"/api/assets/{preview['id']}"))[0] == 404
    for bad in ("not-a-uuid", "..%2Fetc", str(uuid.uuid4()), "1" * 36):
        for method in ("GET", "PUT", "DELETE"):
            status, answer = await _call(srv, method, f"/api/assets/{bad}", json={"name": "x"})
            assert status == 404 and _error(answer) == "ASSET_NOT_FOUND", (method, bad)
        status, answer = await _call(srv, "GET", f"/api/assets/{bad}/content")
        assert status == 404 and _error(answer) == "ASSET_NOT_FOUND"


async def test_content_download_ranges_and_active_types(assets_server):
    srv = assets_server
    data = bytes(range(64))
    _, record = await _upload(srv, data, filename="bytes.bin")
    url = f"{srv.url}/api/assets/{record['id']}/content"
    async with srv.session.get(url) as resp:
        assert resp.status == 200 and await resp.read() == data
        assert resp.headers["Content-Disposition"] == "attachment; filename*=UTF-8''bytes.bin"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    async with srv.session.get(url, params={"disposition": "inline"}, headers={"Range": "bytes=2-5"}) as resp:
        assert resp.status == 206 and await resp.read() == data[2:6]
        assert resp.headers["Content-Range"] == "bytes 2-5/64"
        assert resp.headers["Content-Disposition"].startswith("inline;")
    async with srv.session.get(url, headers={"Range": "bytes=100-200"}) as resp:
        assert resp.status == 416
    assert "last_access_time" in await srv.get_json(f"/api/assets/{record['id']}")
    _, svg = await _upload(srv, b"<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>",
                           filename="x.svg", name='e"vil\u00e9.svg')
    async with srv.session.get(f"{srv.url}/api/assets/{svg['id']}/content", params={"disposition": "inline"}) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/octet-stream"
        assert resp.headers["Content-Disposition"] == "attachment; filename*=UTF-8''e%22vil%C3%A9.svg"
        assert resp.headers["Vary"] == "Sec-Fetch-Dest"
    async with srv.session.get(f"{srv.url}/api/assets/{svg['id']}/content", headers={"Sec-Fetch-Dest": "image"}) as resp:
        assert resp.headers["Content-Type"] == "image/svg+xml"


# -- tags --------------------------------------------------------------------------------------
async def test_tags_add_remove_list_and_refine(assets_server):
    srv = assets_server
    _, a = await _upload(srv, b"aaa", filename="a.bin")
    _, b = await _upload(srv, b"bbb", filename="b.bin")
    status, body = await _call(srv, "POST", f"/api/assets/{a['id']}/tags", json={"tags": [" cat ", "dog", "cat", "input"]})
    assert status == 200 and body == {"added": ["cat", "dog"], "already_present": ["input"],
                                      "total_tags": ["cat", "dog", "input", "uploaded"]}
    await _call(srv, "POST", f"/api/assets/{b['id']}/tags", json={"tags": ["cat"]})
    tags = await srv.get_json("/api/tags")
    assert tags["tags"] == [{"name": "cat", "count": 2}, {"name": "input", "count": 2},
                            {"name": "uploaded", "count": 2}, {"name": "dog", "count": 1}]
    assert tags["total"] == 4 and tags["has_more"] is False
    assert [t["name"] for t in (await srv.get_json("/api/tags?order=name_asc&limit=2"))["tags"]] == ["cat", "dog"]
    assert (await srv.get_json("/api/tags?order=name_asc&limit=2"))["has_more"] is True
    assert [t["name"] for t in (await srv.get_json("/api/tags?prefix=up"))["tags"]] == ["uploaded"]
    status, body = await _call(srv, "DELETE", f"/api/assets/{a['id']}/tags", json={"tags": ["dog", "bird"]})
    assert status == 200 and body == {"removed": ["dog"], "not_present": ["bird"],
                                      "total_tags": ["cat", "input", "uploaded"]}
    assert {"name": "dog", "count": 0} in (await srv.get_json("/api/tags"))["tags"]
    assert "dog" not in [t["name"] for t in (await srv.get_json("/api/tags?include_zero=false"))["tags"]]
    refine = await srv.get_json("/api/assets/tags/refine?tags_all=cat&name_contains=A.B")
    assert refine == {"tag_counts": {"cat": 1, "input": 1, "uploaded": 1}}
    for bad in ({"tags": []}, {"tags": "cat"}, {"tags": [1]}, {"tags": ["  "]}, {}, {"tags": ["a\nb"]}):
        status, body = await _call(srv, "POST", f"/api/assets/{a['id']}/tags", json=bad)
        assert status == 400 and _error(body) == "INVALID_BODY", bad
    status, body = await _call(srv, "POST", f"/api/assets/{a['id']}/tags", json={"tags": ["missing"]})
    assert status == 400 and _error(body) == "SYSTEM_TAG_FORBIDDEN" and body["error"]["details"] == {"tag": "missing"}
    for query in ("limit=0", "order=up", "include_zero=maybe", "offset=-1", "limit=x"):
        status, body = await _call(srv, "GET", f"/api/tags?{query}")
        assert status == 400 and _error(body) == "INVALID_QUERY", query


# -- listing -----------------------------------------------------------------------------------
async def test_list_filters(assets_server):
    srv = assets_server
    ids = {}
    for name, extra in (("alpha.png", ("red",)), ("Beta.png", ("red", "big")), ("gamma.bin", ("big",))):
        _, body = await _upload(srv, name.encode(), filename=name, tags=("input", *extra))
        ids[name] = body["id"]

    async def names(query: str) -> set[str]:
        return {a["name"] for a in (await srv.get_json(f"/api/assets?{query}"))["assets"]}

    assert await names("tags_all=red,big") == {"Beta.png"}
    assert await names("tags_all=red&tags_all=big") == {"Beta.png"}
    assert await names("include_tags=red&exclude_tags=big") == {"alpha.png"}
    assert await names("tags_any=red,big&tags_none=red") == {"gamma.bin"}
    assert await names("name_contains=ETA") == {"Beta.png"}
    assert await names(f"hash={_hash(b'gamma.bin').upper()}") == {"gamma.bin"}
    assert await names("tags_all=nothing") == set()
    for query, code in (("include_tags=a&tags_all=b", "INVALID_TAG_FILTER"),
                        ("exclude_tags=a&tags_none=b", "INVALID_TAG_FILTER"),
                        ("tags_all=a&tags_none=a", "INVALID_TAG_FILTER"),
                        ("tags_all=" + ",".join(f"t{i}" for i in range(101)), "INVALID_TAG_FILTER"),
                        ("metadata_filter={}", "UNSUPPORTED_PARAM"), ("limit=0", "INVALID_QUERY"),
                        ("limit=501", "INVALID_QUERY"), ("sort=path", "INVALID_QUERY"), ("order=sideways", "INVALID_QUERY"),
                        ("offset=-3", "INVALID_QUERY"), ("include_public=perhaps", "INVALID_QUERY")):
        status, body = await _call(srv, "GET", f"/api/assets?{query}")
        assert status == 400 and _error(body) == code, query


async def test_sort_offset_and_cursor_pagination(assets_server):
    srv = assets_server
    names = ["e.bin", "a.bin", "d.bin", "c.bin", "b.bin"]
    for index, name in enumerate(names):
        await _upload(srv, name.encode() * (index + 1), filename=name)
    page = await srv.get_json("/api/assets?sort=name&order=asc&limit=2&offset=1")
    assert [a["name"] for a in page["assets"]] == ["b.bin", "c.bin"] and page["total"] == 5 and page["has_more"]
    last = await srv.get_json("/api/assets?sort=name&order=asc&limit=2&offset=4")
    assert [a["name"] for a in last["assets"]] == ["e.bin"] and last["has_more"] is False
    for sort, order, expected in (("name", "asc", sorted(names)), ("name", "desc", sorted(names, reverse=True)),
                                  ("size", "desc", list(reversed(names))), ("created_at", "asc", names)):
        seen, cursor = [], None
        while True:
            query = f"sort={sort}&order={order}&limit=2" + (f"&after={cursor}" if cursor else "")
            page = await srv.get_json(f"/api/assets?{query}")
            seen += [a["name"] for a in page["assets"]]
            cursor = page.get("next_cursor")
            assert page["has_more"] is (cursor is not None) and page["total"] == 5
            if cursor is None:
                break
        assert seen == expected, (sort, order)
    cursor = (await srv.get_json("/api/assets?sort=name&order=asc&limit=2"))["next_cursor"]
    for query in (f"sort=size&order=asc&after={cursor}", f"sort=name&order=desc&after={cursor}",
                  f"sort=last_access_time&after={cursor}", "after=%%%", "after=bm90IGpzb24", f"after={cursor}x"):
        status, body = await _call(srv, "GET", f"/api/assets?{query}")
        assert status == 400 and _error(body) == "INVALID_CURSOR", query


# -- /upload/image and the folder scan ---------------------------------------------------------
async def test_upload_image_answers_with_its_asset(assets_server, tmp_path):
    srv = assets_server
    data = _png((9, 9, 9))
    form = aiohttp.FormData()
    form.add_field("image", data, filename="paste.png", content_type="image/png")
    form.add_field("subfolder", "pasted")
    status, body = await _call(srv, "POST", "/upload/image", data=form)
    assert status == 200 and body["name"] == "paste.png" and body["subfolder"] == "pasted"
    asset = body["asset"]
    assert set(asset) == {"id", "name", "asset_hash", "size", "mime_type", "tags"}
    assert asset["asset_hash"] == _hash(data) and asset["size"] == len(data) and asset["mime_type"] == "image/png"
    assert asset["tags"] == ["input", "pasted", "uploaded"]
    record = await srv.get_json(f"/api/assets/{asset['id']}")
    assert record["display_name"] == "pasted/paste.png" and record["loader_path"] == "pasted/paste.png"
    assert record["preview_url"] == "/api/view?type=input&filename=paste.png&subfolder=pasted"
    form = aiohttp.FormData()
    form.add_field("image", data, filename="paste.png", content_type="image/png")
    form.add_field("subfolder", "pasted")
    status, again = await _call(srv, "POST", "/upload/image", data=form)
    assert again["name"] == "paste.png" and again["asset"]["id"] != asset["id"]  # same file, a new record
    assert (await srv.get_json("/api/assets?tags_all=pasted"))["total"] == 2


async def test_seed_scan_lists_existing_files_and_marks_vanished_ones_missing(assets_server, tmp_path):
    srv = assets_server
    (tmp_path / "input" / "photo.png").write_bytes(_png())
    (tmp_path / "output" / "run1").mkdir(parents=True)
    (tmp_path / "output" / "run1" / "out.png").write_bytes(_png((5, 5, 5)))
    (tmp_path / "output" / ".hidden").write_bytes(b"x")
    ckpt = tmp_path / "models" / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "tiny.safetensors").write_bytes(b"weights")
    (ckpt / "notes.txt").write_bytes(b"not a model")
    status, body = await _call(srv, "POST", "/api/assets/seed?wait=true")
    assert status == 200 and body["status"] == "completed"
    assert body["progress"] == {"scanned": 3, "total": 3, "created": 3, "skipped": 0} and body["errors"] == []
    listed = {a["name"]: a for a in (await srv.get_json("/api/assets"))["assets"]}
    assert set(listed) == {"photo.png", "out.png", "tiny.safetensors"}
    assert listed["tiny.safetensors"]["tags"] == ["model_type:checkpoints", "models"]
    assert listed["tiny.safetensors"]["loader_path"] == "tiny.safetensors" and "hash" not in listed["photo.png"]
    assert listed["out.png"]["display_name"] == "run1/out.png" and listed["out.png"]["tags"] == ["output"]
    status, body = await _call(srv, "POST", "/api/assets/seed?wait=true", json={"roots": ["input"]})
    assert body["progress"] == {"scanned": 1, "total": 1, "created": 0, "skipped": 1}
    (tmp_path / "input" / "photo.png").unlink()
    await _call(srv, "POST", "/api/assets/seed?wait=true", json={"roots": ["input"]})
    missing = await srv.get_json("/api/assets?tags_all=missing")
    assert [a["name"] for a in missing["assets"]] == ["photo.png"] and "preview_url" not in missing["assets"][0]
    assert "missing" in missing["assets"][0]["tags"]
    assert (await srv.get_json("/api/assets?tags_none=missing"))["total"] == 2
    status, body = await _call(srv, "GET", f"/api/assets/{missing['assets'][0]['id']}/content")
    assert status == 404 and _error(body) == "FILE_NOT_FOUND"
    status, body = await srv.get_json("/api/assets/seed/status"), None
    assert status == {"state": "IDLE", "progress": {"scanned": 0, "total": 0, "created": 0, "skipped": 0},
                      "errors": []}
    assert await srv.get_json("/api/assets/seed/status") == status
    assert (await _call(srv, "POST", "/api/assets/seed/cancel"))[1] == {"status": "idle"}
    assert (await _call(srv, "POST", "/api/assets/prune"))[1] == {"status": "completed", "marked": 0}
    for roots in (["nowhere"], "input", [1]):
        status, body = await _call(srv, "POST", "/api/assets/seed", json={"roots": roots})
        assert status == 400 and _error(body) == "INVALID_BODY", roots


async def test_seed_with_hashing_records_hashes(hashing_server, tmp_path):
    (tmp_path / "input" / "h.bin").write_bytes(b"hash me")
    await _call(hashing_server, "POST", "/api/assets/seed?wait=true", json={"roots": ["input"]})
    (record,) = (await hashing_server.get_json("/api/assets"))["assets"]
    assert record["hash"] == _hash(b"hash me")


# -- storage -----------------------------------------------------------------------------------
async def test_catalogue_tables_join_an_existing_database_and_survive_a_restart(tmp_path):
    user = tmp_path / "user"
    store = PromptStore.open(user)
    store.db.execute("INSERT INTO history (prompt_id, entry, status, number, create_ms, end_ms) "
                     "VALUES ('p1', '{\"prompt\": []}', 'success', 1, 1, 2)")
    store.close()
    srv = await start_test_server(tmp_path, enable_assets=True)
    try:
        await _idle(srv)
        _, record = await _upload(srv, b"keep me", filename="k.bin")
        assert "p1" in await srv.get_json("/history")
    finally:
        await srv.close()
    srv = await start_test_server(tmp_path, enable_assets=True)
    try:
        await _idle(srv)
        assert (await srv.get_json(f"/api/assets/{record['id']}"))["hash"] == _hash(b"keep me")
        assert "p1" in await srv.get_json("/history")
    finally:
        await srv.close()
    tables = {row[0] for row in sqlite3.connect(user / DB_NAME).execute("SELECT name FROM sqlite_master")}
    assert {"queue", "history", "asset_contents", "asset_records", "asset_tags"} <= tables


def test_catalogue_refuses_a_destination_outside_its_roots(tmp_path):
    roots = AssetRoots(tmp_path / "in", tmp_path / "out", tmp_path / "tmp", tmp_path / "models", {})
    catalog = AssetCatalog(tmp_path / "db.sqlite3", roots).open()
    try:
        with pytest.raises(AssetError) as info:
            roots.destination(["models", "model_type:../../etc"])
        assert info.value.status == 400
        temp = tmp_path / "part"
        temp.write_bytes(b"x")
        with pytest.raises(AssetError):
            catalog.ingest_upload(temp, _hash(b"x"), 1, name="x", tags=[], client_filename=None)
        assert not temp.exists()  # the received bytes never linger
    finally:
        catalog.close()


def test_the_flags_reach_the_server_config(tmp_path):
    import main

    parser = main.build_serve_parser()
    argv = ["--base-directory", str(tmp_path), "--enable-assets", "--enable-asset-hashing"]
    config = main.config_from_args(parser.parse_args(argv), argv)
    assert config.enable_assets is True and config.enable_asset_hashing is True
    config = main.config_from_args(parser.parse_args([]), [])
    assert config.enable_assets is False and config.enable_asset_hashing is False
    argv = ["--enable-assets", "--disable-assets"]  # today's ComfyUI: --disable-assets wins
    assert main.config_from_args(parser.parse_args(argv), argv).enable_assets is False


def test_prune_marks_rows_outside_every_folder_missing(tmp_path):
    roots = AssetRoots(tmp_path / "in", tmp_path / "out", tmp_path / "tmp", tmp_path / "models", {})
    catalog = AssetCatalog(tmp_path / "db.sqlite3", roots).open()
    try:
        elsewhere = tmp_path / "elsewhere.bin"
        elsewhere.write_bytes(b"x")
        (tmp_path / "in").mkdir()
        inside = tmp_path / "in" / "kept.bin"
        inside.write_bytes(b"y")
        with catalog._write():
            for path in (elsewhere, inside):
                content = catalog._insert_content(path, None, 1, None)
                catalog._insert_record(content, path, path.name, [], mime_type=None)
        assert catalog.mark_missing_outside_roots() == 1
        records = {r.name: r for r in catalog.list_page(ListQuery())[0]}
        assert records["elsewhere.bin"].tags == ["missing"] and records["kept.bin"].tags == []
        assert catalog.mark_missing_outside_roots() == 0
    finally:
        catalog.close()
