"""--users and the v1 asset catalogue (web/routes_assets.py): a user lists, reads and changes only
their own assets and the shared ones (files put in input/ by hand; docs/auth.md); admins see all."""
from __future__ import annotations

import asyncio
import io

import aiohttp
from PIL import Image

from tests.web.auth_harness import CHEAP, PASSWORD, bearer
from tests.web.web_harness import start_test_server
from web.auth.settings import AuthSettings


def _png(red: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (3, 3), (red, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


async def _json(client, method: str, url: str, **kw) -> tuple[int, dict | None]:
    async with client.request(method, url, **kw) as resp:
        return resp.status, (await resp.json() if resp.content_type == "application/json" else None)


async def _upload(client, url: str, name: str, red: int, tag: str) -> dict:
    form = aiohttp.FormData()
    form.add_field("file", _png(red), filename=name, content_type="image/png")
    form.add_field("tags", "input")
    form.add_field("tags", tag)
    status, body = await _json(client, "POST", f"{url}/api/assets", data=form)
    assert status in (200, 201), body
    return body


async def test_v1_asset_listing_and_metadata_are_the_owners(tmp_path):
    (tmp_path / "input").mkdir(parents=True)
    (tmp_path / "input" / "shared.png").write_bytes(_png(200))  # placed by hand: everyone's
    server = await start_test_server(tmp_path, auth=AuthSettings(), enable_assets=True)
    server.state.auth.store.hasher = CHEAP
    for name, role in (("alice", "user"), ("bob", "user"), ("admin", "admin")):
        server.state.auth.store.add_user(name, PASSWORD, role)
    url = server.url
    try:
        async with bearer(server, "alice") as alice, bearer(server, "bob") as bob, bearer(server, "admin") as admin:
            for _ in range(500):
                status, listing = await _json(admin, "GET", f"{url}/api/assets?name_contains=shared")
                if listing["assets"]:
                    break
                await asyncio.sleep(0.02)
            shared = listing["assets"][0]["id"]
            a1 = (await _upload(alice, url, "a1.png", 1, "alicetag"))["id"]
            a2 = (await _upload(alice, url, "a2.png", 2, "alicetag"))["id"]
            b1 = (await _upload(bob, url, "b1.png", 3, "bobtag"))["id"]

            async def ids(client, query: str = "") -> tuple[set[str], dict]:
                status, body = await _json(client, "GET", f"{url}/api/assets?limit=50{query}")
                assert status == 200, body
                return {a["id"] for a in body["assets"]}, body

            seen, body = await ids(alice)
            assert seen == {shared, a1, a2} and body["total"] == 3
            assert (await ids(bob))[0] == {shared, b1}
            assert (await ids(admin))[0] == {shared, a1, a2, b1}
            assert (await ids(alice, "&include_tags=bobtag"))[0] == set()

            # paging counts only what the caller sees: offsets and cursors
            status, page = await _json(alice, "GET", f"{url}/api/assets?limit=2&sort=name&order=asc")
            assert [a["name"] for a in page["assets"]] == ["a1.png", "a2.png"] and page["has_more"]
            assert page["total"] == 3
            status, rest = await _json(alice, "GET", f"{url}/api/assets?limit=2&sort=name&order=asc"
                                                     f"&after={page['next_cursor']}")
            assert [a["id"] for a in rest["assets"]] == [shared] and rest["has_more"] is False
            status, rest = await _json(alice, "GET", f"{url}/api/assets?limit=2&offset=2&sort=name&order=asc")
            assert [a["id"] for a in rest["assets"]] == [shared] and rest["has_more"] is False

            # one record: another user's reads as unknown, for reading and for changing
            assert (await _json(alice, "GET", f"{url}/api/assets/{a1}"))[0] == 200
            assert (await _json(alice, "GET", f"{url}/api/assets/{shared}"))[0] == 200
            assert (await _json(admin, "GET", f"{url}/api/assets/{b1}"))[0] == 200
            for method, path, body in (("GET", "", None), ("PUT", "", {"name": "x.png"}),
                                       ("POST", "/tags", {"tags": ["x"]}), ("DELETE", "/tags", {"tags": ["bobtag"]}),
                                       ("GET", "/content", None), ("DELETE", "", None)):
                status, answer = await _json(alice, method, f"{url}/api/assets/{b1}{path}", json=body)
                assert status == 404 and answer["error"]["code"] == "ASSET_NOT_FOUND", (method, path)
            status, mine = await _json(bob, "GET", f"{url}/api/assets/{b1}")
            assert mine["name"] == "b1.png" and "bobtag" in mine["tags"]  # untouched

            # tags: counted over what the caller sees
            status, tags = await _json(alice, "GET", f"{url}/api/tags")
            counts = {t["name"]: t["count"] for t in tags["tags"]}
            assert counts["alicetag"] == 2 and "bobtag" not in counts and counts["input"] == 3
            assert tags["total"] == len(tags["tags"])
            status, tags = await _json(admin, "GET", f"{url}/api/tags")
            counts = {t["name"]: t["count"] for t in tags["tags"]}
            assert counts["bobtag"] == 1 and counts["input"] == 4
            status, refined = await _json(alice, "GET", f"{url}/api/assets/tags/refine?include_tags=input")
            assert refined["tag_counts"].get("alicetag") == 2 and "bobtag" not in refined["tag_counts"]
            status, refined = await _json(admin, "GET", f"{url}/api/assets/tags/refine?include_tags=input")
            assert refined["tag_counts"]["bobtag"] == 1
    finally:
        await server.close()
