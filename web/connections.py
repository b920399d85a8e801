"""Connection limits (issue 34): what keeps slow, idle or greedy clients from holding the server's
file descriptors and memory. Each limit is a flag (web/flags.py, ServerConfig) with a default.

- Request head: a connection must send a complete request line and headers within
  `--header-timeout` seconds of opening (or of the end of its previous response); otherwise it is
  closed. aiohttp's keep-alive timer does exactly this (it fires while the connection waits for a
  complete request head, never while a request is handled), so the flag is its value.
- Request body: `--body-timeout` seconds without a new byte of a body that is still arriving
  closes the connection (`body_timeout_middleware`); a body the server has not read yet is the
  server's delay, not the client's, and does not count.
- Connections per client address: at most `--max-connections-per-client` open at once
  (`LimitedAppRunner`); one more is answered `503` and closed before anything is parsed.
- WebSocket messages (web/ws.py): `--max-ws-message-size` and `--ws-heartbeat`.
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger(__name__)

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s")
_REFUSAL_BODY = (b'{"error": {"type": "too_many_connections", "message": "too many open connections from this '
                 b'address (--max-connections-per-client)"}}')


def client_address(transport: Any) -> str | None:
    """The peer's IP address (None for a Unix socket or a transport without one)."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return None


class ConnectionCap:
    """Counts open connections per client address on an aiohttp `web.Server` and refuses the ones
    past `limit` (0: no cap). Hooks the server's `connection_made` / `connection_lost`, which every
    aiohttp `RequestHandler` calls as the transport opens and closes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()
        self._counted: dict[int, str] = {}  # id(handler) -> address, for the connections let in
        self._warned: set[str] = set()

    def install(self, server: web.Server) -> None:
        made: Callable = server.connection_made
        lost: Callable = server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            address = client_address(transport)
            if address is None:
                return
            if self.limit and self.open[address] >= self.limit:
                self._refuse(address, transport)
                return
            self.open[address] += 1
            self._counted[id(handler)] = address

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            address = self._counted.pop(id(handler), None)
            if address is not None:
                self.open[address] -= 1
                if self.open[address] <= 0:
                    del self.open[address]
                    self._warned.discard(address)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def _refuse(self, address: str, transport: Any) -> None:
        if address not in self._warned:  # once per address while it is at the cap: no log flood
            self._warned.add(address)
            log.warning("refusing connections from %s: %d open (--max-connections-per-client)",
                        address, self.open[address])
        try:
            transport.write(_REFUSAL % (len(_REFUSAL_BODY), _REFUSAL_BODY))
        finally:
            transport.close()


class LimitedAppRunner(web.AppRunner):
    """`web.AppRunner` whose server caps connections per client address (`ConnectionCap`)."""

    def __init__(self, app: web.Application, *, max_connections_per_client: int, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.cap = ConnectionCap(max_connections_per_client)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        self.cap.install(server)
        return server


class _BodyWatch:
    """Closes `request`'s connection when its body stops arriving for `timeout` seconds."""

    def __init__(self, request: web.Request, timeout: float) -> None:
        self.request = request
        self.timeout = timeout
        self.payload = request.content
        self.seen = -1
        self.handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.seen = self.payload.total_bytes
        self.handle = asyncio.get_running_loop().call_later(self.timeout, self.check)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def check(self) -> None:
        self.handle = None
        payload = self.payload
        if payload.is_eof() or payload.exception() is not None:
            return
        # bytes arrived since the last look, or bytes wait unread in the buffer (the server is slow)
        if payload.total_bytes != self.seen or getattr(payload, "_size", 0) > 0:
            self.start()
            return
        transport = self.request.transport
        log.warning("closed the connection from %s: its request body (%s %s) sent nothing for %g s "
                    "(--body-timeout)", client_address(transport), self.request.method, self.request.path[:200],
                    self.timeout)
        if transport is not None:
            transport.close()


def body_timeout_middleware(timeout: float) -> Callable:
    """A middleware that watches every request body still arriving (`_BodyWatch`)."""

    @web.middleware
    async def body_timeout(request: web.Request, handler: Callable) -> web.StreamResponse:
        if not request.body_exists or request.content.is_eof():
            return await handler(request)
        watch = _BodyWatch(request, timeout)
        watch.start()
        try:
            return await handler(request)
        finally:
            watch.cancel()

    return body_timeout
