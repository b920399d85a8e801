"""Live server: cross-site requests refused, CORS mode, and bad input answered with JSON 4xx."""
from __future__ import annotations

import aiohttp
import pytest

from tests.web.web_harness import chain, start_test_server


async def test_cross_site_requests_are_refused_and_nothing_is_queued(server):
    host = server.host
    cases = [{"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
             {"Origin": f"http://{host.split(':')[0]}:1"}]
    for headers in cases:
        async with server.session.post(f"{server.url}/prompt", json={"prompt": chain(1)}, headers=headers) as resp:
            assert resp.status == 403, headers
            body = await resp.json()
            assert body["error"]["type"] == "cross_site_request"
    assert server.state.queue.remaining == 0
    async with server.session.post(f"{server.url}/prompt", json={"prompt": chain(1)},
                                   headers={"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}) as resp:
        assert resp.status == 200


async def test_dns_rebinding_host_is_refused(server):
    async with server.session.get(f"{server.url}/queue", headers={"Host": "rebind.example:8188"}) as resp:
        assert resp.status == 403


async def test_cross_site_websocket_is_refused(server):
    with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
        await server.session.ws_connect(f"{server.url}/ws?clientId=x", headers={"Origin": "http://evil.example"})
    assert exc.value.status == 403


async def test_cors_mode_replaces_the_origin_check(tmp_path):
    srv = await start_test_server(tmp_path, cors_origin="*")
    try:
        async with srv.session.options(f"{srv.url}/prompt", headers={"Origin": "http://app.example"}) as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "*"
        async with srv.session.get(f"{srv.url}/queue", headers={"Origin": "http://app.example"}) as resp:
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == "*"
        async with srv.session.get(f"{srv.url}/nope", headers={"Origin": "http://app.example"}) as resp:
            assert resp.status == 404 and resp.headers["Access-Control-Allow-Origin"] == "*"
    finally:
        await srv.close()


@pytest.mark.parametrize("method, path, kwargs, status", [
    ("POST", "/prompt", {"data": b"{not json"}, 400),
    ("POST", "/prompt", {"data": b""}, 400),
    ("POST", "/prompt", {"data": b"\xff\xfe"}, 400),
    ("POST", "/prompt", {"data": b'{"prompt": NaN}'}, 400),
    ("POST", "/prompt", {"data": b"[" * 100000 + b"]" * 100000}, 400),
    ("POST", "/queue", {"data": b"[1,2]"}, 400),
    ("POST", "/queue", {"json": {"delete": [1]}}, 400),
    ("POST", "/history", {"data": b"nope"}, 400),
    ("GET", "/no/such/route", {}, 404),
    ("GET", "/api/no_such_route", {}, 404),
    ("DELETE", "/prompt", {}, 405),
    ("GET", "/jobs?limit=-1", {}, 400),
])
async def test_bad_input_gets_json_4xx_and_loses_nothing(server, method, path, kwargs, status):
    _, kept = await server.post_prompt(chain(1, steps=100, delay=0.05))
    async with server.session.request(method, f"{server.url}{path}", **kwargs) as resp:
        assert resp.status == status
        assert resp.content_type == "application/json"
        body = await resp.json()
        assert "error" in body
    queue = await server.get_json("/queue")
    assert [i[1] for i in queue["queue_running"] + queue["queue_pending"]] == [kept["prompt_id"]]
    server.state.queue.interrupt()


async def test_oversized_body_is_413_json(tmp_path):
    srv = await start_test_server(tmp_path, max_upload_size_mb=0.05)
    try:
        big = {"prompt": chain(1), "extra_data": {"blob": "x" * 100_000}}
        async with srv.session.post(f"{srv.url}/prompt", json=big) as resp:
            assert resp.status == 413 and (await resp.json())["error"]["type"] == "request_too_large"
        status, body = await srv.post_prompt(chain(1))
        assert status == 200
    finally:
        await srv.close()
