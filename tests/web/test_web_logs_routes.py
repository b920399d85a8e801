"""The editor's Logs tab: /internal/logs, /internal/logs/raw, PATCH /internal/logs/subscribe and
the `logs` WebSocket messages (shapes read from ComfyUI's api_server/routes/internal/
internal_routes.py @4195dfb0, api_server/services/terminal_service.py @06efba1b, app/logger.py
@c828fdcf, comfyanonymous/ComfyUI)."""
from __future__ import annotations

import asyncio
import logging

from tests.web.web_harness import receive_json, ws_connect
from web.routes_logs import LOG_BUFFER_KEY, LogBuffer

log = logging.getLogger("tests.web.logs_tab")


async def test_raw_and_text_logs_hold_recent_records(server):
    log.warning("hello from the logs tab %d", 7)
    raw = await server.get_json("/internal/logs/raw")
    assert set(raw) == {"entries", "size"} and set(raw["size"]) == {"cols", "rows"}
    assert raw["size"]["cols"] > 0 and raw["size"]["rows"] > 0
    mine = [e for e in raw["entries"] if "hello from the logs tab 7" in e["m"]]
    assert len(mine) == 1 and set(mine[0]) == {"t", "m"} and mine[0]["m"].endswith("\n")
    text = await server.get_json("/internal/logs")
    assert isinstance(text, str) and f"{mine[0]['t']} - hello from the logs tab 7\n" in text
    # also under /api, as every route here
    assert (await server.get_json("/api/internal/logs/raw"))["entries"]


async def test_subscribed_client_gets_new_entries_and_unsubscribes(server):
    ws, _ = await ws_connect(server, "logs-client")
    try:
        async with server.session.patch(f"{server.url}/internal/logs/subscribe",
                                        json={"clientId": "logs-client", "enabled": True}) as resp:
            assert resp.status == 200
        log.warning("streamed line")
        message = await receive_json(ws, lambda m: m["type"] == "logs"
                                     and any("streamed line" in e["m"] for e in m["data"]["entries"]))
        assert message["data"]["size"] is None
        async with server.session.patch(f"{server.url}/api/internal/logs/subscribe",
                                        json={"clientId": "logs-client", "enabled": False}) as resp:
            assert resp.status == 200
        assert "logs-client" not in server.runner.app[LOG_BUFFER_KEY].subscribers
        log.warning("not streamed")
        await asyncio.sleep(0.2)
        received = []
        while True:
            try:
                msg = await ws.receive(timeout=0.2)
            except asyncio.TimeoutError:
                break
            received.append(msg.data)
        assert not any("not streamed" in str(d) for d in received)
    finally:
        await ws.close()


async def test_subscribe_rejects_bad_bodies(server):
    for body in ({"enabled": True}, {"clientId": "x", "enabled": "yes"}, ["clientId"]):
        async with server.session.patch(f"{server.url}/internal/logs/subscribe", json=body) as resp:
            assert resp.status == 400 and "error" in await resp.json()


def test_buffer_is_bounded_and_drops_gone_subscribers():
    class Hub:
        loop = None
        clients: dict = {}

    buffer = LogBuffer(Hub(), capacity=3)
    logger = logging.getLogger("tests.web.logs_tab.bounded")
    logger.addHandler(buffer)
    logger.propagate = False
    try:
        for i in range(5):
            logger.warning("line %d", i)
    finally:
        logger.removeHandler(buffer)
        logger.propagate = True
    assert [e["m"] for e in buffer.snapshot()] == ["line 2\n", "line 3\n", "line 4\n"]
    buffer.subscribe("gone", True)
    buffer._pending.append({"t": "0", "m": "x\n"})
    buffer._flush()
    assert buffer.subscribers == set()


async def test_buffer_leaves_root_logger_with_the_app(tmp_path):
    from tests.web.web_harness import start_test_server

    srv = await start_test_server(tmp_path)
    buffer = srv.runner.app[LOG_BUFFER_KEY]
    assert buffer in logging.getLogger().handlers
    await srv.close()
    assert buffer not in logging.getLogger().handlers
