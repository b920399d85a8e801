"""Request middlewares: JSON errors, the cross-site guard (or CORS), cache headers.

Order (outermost first): `json_errors` turns every 4xx/5xx that has no JSON body into
`{"error": {"type", "message"}}` so scripts can always parse failures (unknown routes, oversized
bodies, wrong methods); then `origin_guard`; then `cache_control`. With `--enable-cors-header`,
`cors` replaces the guard (as in ComfyUI) and goes outermost.

`origin_guard` (ComfyUI's CVE-2024-10481 fix, plus its later `Sec-Fetch-Site` rule, plus two of
its known gaps closed):
  * `Sec-Fetch-Site: cross-site` is refused, except a top-level navigation `GET` (a link to the
    editor from another site must still open it);
  * when the Host is a loopback name, an `Origin` must name the same host and port; `Origin:
    null` (sandboxed iframes, ComfyUI issue #13245) is refused;
  * when the server listens on loopback only, a Host that is not a loopback name is refused:
    that is a DNS-rebinding page whose own domain resolves to 127.0.0.1.
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from web.config import ServerConfig, is_loopback_host

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_ERROR_TYPES = {400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
                409: "conflict", 413: "request_too_large", 415: "unsupported_media_type"}


def json_error(status: int, message: str, error_type: str | None = None, **extra: object) -> web.Response:
    body = {"error": {"type": error_type or _ERROR_TYPES.get(status, "error"), "message": message, **extra}}
    return web.json_response(body, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.content_type == "application/json":
            raise
        message = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 413:
            message = f"request body too large: {exc.text or exc.reason}"
        return json_error(exc.status, message or exc.reason)
    except (ConnectionResetError, ConnectionError):
        raise
    except Exception as exc:  # noqa: BLE001 -- a bug in one handler must not kill the connection
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_error(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")
    return response


def _host_and_port(value: str) -> tuple[str, int | None]:
    """Split `host[:port]` / `[v6][:port]` into (lower-case host, port or None)."""
    parts = urlsplit("//" + value)
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or "").lower(), port


def cross_site_reason(request: web.Request, config: ServerConfig) -> str | None:
    """Why this request counts as cross-site (and must be refused), or None."""
    fetch_site = request.headers.get("Sec-Fetch-Site", "").lower()
    if fetch_site == "cross-site":
        navigating = request.method == "GET" and request.headers.get("Sec-Fetch-Mode", "").lower() == "navigate"
        if not navigating:
            return "Sec-Fetch-Site is cross-site"
    host_header = request.headers.get("Host", "")
    host, host_port = _host_and_port(host_header)
    if config.loopback_only and host_header and not is_loopback_host(host):
        return f"Host {host_header!r} is not a loopback name while the server listens on loopback only"
    origin = request.headers.get("Origin")
    if origin is None or not host_header or not is_loopback_host(host):
        return None
    if origin.strip().lower() == "null":
        return "Origin is null"
    origin_parts = urlsplit(origin)
    try:
        origin_port = origin_parts.port
    except ValueError:
        return f"Origin {origin!r} is malformed"
    origin_host = (origin_parts.hostname or "").lower()
    if origin_port is None:
        origin_port = {"http": 80, "https": 443}.get(origin_parts.scheme.lower())
    if host_port is None:
        host_port = {"http": 80, "https": 443}.get(request.scheme)
    if origin_host != host or origin_port != host_port:
        return f"Origin {origin!r} does not match Host {host_header!r}"
    return None


def origin_guard(config: ServerConfig) -> Callable:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        reason = cross_site_reason(request, config)
        if reason is not None:
            log.warning("refused %s %s: %s", request.method, request.path, reason)
            return json_error(403, f"cross-site request refused: {reason}", "cross_site_request")
        if request.method == "OPTIONS":
            return web.Response(status=200)
        return await handler(request)

    return guard


def cors(origin: str) -> Callable:
    """ComfyUI's `--enable-cors-header [ORIGIN]`: allow browsers from `origin` (default `*`)."""
    headers = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": "POST, GET, DELETE, PUT, OPTIONS, PATCH",
        "Access-Control-Allow-Headers": "Content-Type, Authorization",
        "Access-Control-Allow-Credentials": "true",
    }

    @web.middleware
    async def add_cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "OPTIONS":
            response: web.StreamResponse = web.Response(status=200)
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # redirects; errors were made responses inside
                exc.headers.update(headers)
                raise
        response.headers.update(headers)
        return response

    return add_cors


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".svg", ".ico")


@web.middleware
async def cache_control(request: web.Request, handler: Handler) -> web.StreamResponse:
    """ComfyUI's cache headers: scripts and index files always revalidate; images are cached."""
    response = await handler(request)
    path = request.path.lower()
    if path.endswith((".js", ".css")) or path.rsplit("/", 1)[-1].startswith("index") and path.endswith(".json"):
        response.headers.setdefault("Cache-Control", "no-cache")
    elif path.endswith(_IMAGE_SUFFIXES) and response.status in (200, 201, 202, 203, 204, 206, 301, 308):
        response.headers.setdefault("Cache-Control", "public, max-age=86400")
    return response


def middlewares_for(config: ServerConfig) -> list:
    if config.cors_origin is not None:
        # outermost, so that JSON error responses carry the CORS headers too
        return [cors(config.cors_origin), json_errors, cache_control]
    return [json_errors, origin_guard(config), cache_control]
