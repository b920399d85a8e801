"""Connection limits (issue 34), each a flag: the request-head and body read timeouts, the cap on
open connections per client address, the WebSocket message size and the WebSocket heartbeat.
Every test asserts what the server did (closed the connection, refused it, closed the socket),
never how long it took."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.web.web_harness import start_test_server


async def _open(server):
    host, port = server.host.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _read_to_close(reader) -> bytes:
    """Everything the server sends until it closes the connection (b'' when it sends nothing)."""
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 30)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


@pytest.fixture
async def strict_server(tmp_path):
    srv = await start_test_server(tmp_path, header_timeout=0.3, body_timeout=0.3, max_connections_per_client=4,
                                  max_ws_message_mb=0.01, ws_heartbeat=0.3)
    try:
        yield srv
    finally:
        await srv.close()


async def test_a_client_that_never_finishes_its_request_head_is_closed(strict_server):
    connections = [await _open(strict_server) for _ in range(3)]
    for reader, writer in connections:
        writer.write(b"GET /prompt HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never ends the header
        await writer.drain()
    for reader, writer in connections:
        assert await _read_to_close(reader) == b""  # closed by the server, nothing answered
        writer.close()
    # a complete request on a new connection is still answered
    assert (await strict_server.get_json("/prompt"))["exec_info"]["queue_remaining"] == 0


async def test_a_client_that_stops_sending_its_body_is_closed(strict_server, caplog):
    reader, writer = await _open(strict_server)
    writer.write(b"POST /prompt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
    await writer.drain()
    assert b"200 OK" not in await _read_to_close(reader)
    writer.close()
    assert any("--body-timeout" in r.getMessage() for r in caplog.records)
    assert strict_server.state.queue.remaining == 0


async def test_connections_past_the_per_client_cap_are_refused_with_503(strict_server):
    held = [await _open(strict_server) for _ in range(4)]
    for _, writer in held:  # keep them busy-idle: a partial head is enough to hold the slot
        writer.write(b"GET /prompt HTTP/1.1\r\n")
        await writer.drain()
    reader, writer = await _open(strict_server)
    answer = await _read_to_close(reader)
    assert answer.startswith(b"HTTP/1.1 503") and b"too_many_connections" in answer
    writer.close()
    for reader, writer in held:  # the held ones are closed by the head timeout, which frees the slots
        await _read_to_close(reader)
        writer.close()
    for _ in range(100):  # the server counts the closes as it sees them
        if not strict_server.runner.cap.open:
            break
        await asyncio.sleep(0.02)
    assert not strict_server.runner.cap.open
    assert (await strict_server.get_json("/prompt"))["exec_info"]["queue_remaining"] == 0


async def test_the_per_client_cap_counts_websockets_and_zero_means_no_cap(tmp_path):
    server = await start_test_server(tmp_path, max_connections_per_client=0)
    try:
        sockets = [await server.session.ws_connect(f"{server.url}/ws") for _ in range(12)]
        assert (await server.get_json("/prompt"))["exec_info"]["queue_remaining"] == 0
        for ws in sockets:
            await ws.close()
    finally:
        await server.close()


async def test_a_websocket_message_larger_than_the_limit_closes_the_socket(strict_server):
    ws = await strict_server.session.ws_connect(f"{strict_server.url}/ws?clientId=big", autoping=True)
    await ws.receive(timeout=10)  # status
    await ws.send_str(json.dumps({"type": "feature_flags", "data": {"x": "a" * 20_000}}))  # > 0.01 MB
    while True:
        msg = await ws.receive(timeout=30)
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            break
    assert ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    # a message under the limit is still handled on a new socket
    ws = await strict_server.session.ws_connect(f"{strict_server.url}/ws?clientId=small")
    await ws.receive(timeout=10)
    await ws.send_str(json.dumps({"type": "feature_flags", "data": {}}))
    reply = json.loads((await ws.receive(timeout=10)).data)
    assert reply["type"] == "feature_flags"
    await ws.close()


async def test_a_websocket_that_does_not_answer_pings_is_closed(strict_server):
    ws = await strict_server.session.ws_connect(f"{strict_server.url}/ws?clientId=mute", autoping=False)
    pinged = False
    while True:
        msg = await ws.receive(timeout=30)
        if msg.type == aiohttp.WSMsgType.PING:
            pinged = True  # and no pong goes back
        elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            break
    assert pinged
    assert "mute" not in strict_server.state.hub.clients or not strict_server.state.hub.clients["mute"]


async def test_a_websocket_that_answers_pings_stays_open(strict_server):
    ws = await strict_server.session.ws_connect(f"{strict_server.url}/ws?clientId=alive", autoping=False)
    pings = 0
    while pings < 3:  # three heartbeats answered: the socket is still open and served
        msg = await ws.receive(timeout=30)
        assert msg.type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
        if msg.type == aiohttp.WSMsgType.PING:
            pings += 1
            await ws.pong(msg.data)
    await ws.send_str(json.dumps({"type": "feature_flags", "data": {}}))
    while True:
        msg = await ws.receive(timeout=10)
        if msg.type == aiohttp.WSMsgType.PING:
            await ws.pong(msg.data)
        elif msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == "feature_flags":
            break
    await ws.close()
