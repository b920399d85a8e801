"""The users mode's one middleware: every request, on every route (the matched route's handler
is asked for its marks, web/auth/access.py; unmatched paths too), the WebSocket handshake and
/view included, must name a user unless its handler is marked @public.

  * who: `Authorization: Bearer <token>` (scripts) or the session cookie (the editor);
  * none: 401 JSON; a browser navigating (GET, Accept: text/html) is sent to the login page;
  * CSRF, for cookie sessions only (a bearer token is never sent by a browser on its own): every
    method other than GET / HEAD / OPTIONS, and the WebSocket handshake, must carry an `Origin`
    (or, failing that, a `Referer`) naming this server's own scheme, host and port, else 403.
    Strict Origin checking rather than a token: ComfyUI's editor is served unmodified and sends
    no CSRF header, while every current browser sends `Origin` on such requests; SameSite=Lax
    already keeps the cookie off cross-site subrequests, and the Origin rule also stops
    same-site, cross-origin pages (another port on the same host);
  * role: @admin_only handlers need an admin; a viewer may only use GET / HEAD / OPTIONS (and
    handlers marked @any_role); else 403 JSON.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable
from urllib.parse import quote, urlsplit

from aiohttp import web

from web.auth.access import USER_KEY
from web.auth.service import SESSION_COOKIE, AuthService

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_PAGE = "/auth/login"
VIA_KEY = web.RequestKey("comfy_engine_auth_via", str)  # request[VIA_KEY]: 'token' | 'session'


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


def _handler_of(request: web.Request) -> Any:
    route = request.match_info.route
    return getattr(route, "handler", None)


def _mark(handler: Any, name: str) -> bool:
    return bool(getattr(handler, name, False))


def _origin_tuple(url: str) -> tuple[str, str, int | None] | None:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not scheme or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(scheme)


def same_origin(request: web.Request) -> bool:
    """The request's Origin (else Referer) names this server: its scheme, Host and port."""
    source = request.headers.get("Origin")
    if source is None or source.strip().lower() == "null":
        source = request.headers.get("Referer") if source is None else None
    if not source:
        return False
    claimed = _origin_tuple(source)
    served = _origin_tuple(f"{request.scheme}://{request.headers.get('Host', '')}")
    return claimed is not None and claimed == served


def _wants_page(request: web.Request) -> bool:
    return (request.method == "GET" and "text/html" in request.headers.get("Accept", "")
            and not request.path.startswith("/api/") and request.headers.get("Upgrade", "").lower() != "websocket")


def auth_middleware(auth: AuthService) -> Callable:
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        route_handler = _handler_of(request)
        if _mark(route_handler, "auth_public"):
            if request.method not in SAFE_METHODS and not same_origin(request) and request.headers.get("Origin"):
                return _error(403, "csrf", "cross-origin login refused")
            return await handler(request)
        user, via = auth.user_for(request.headers.get("Authorization"), request.cookies.get(SESSION_COOKIE))
        if user is None:
            if _wants_page(request):
                raise web.HTTPFound(f"{LOGIN_PAGE}?next={quote(request.path_qs, safe='')}")
            return _error(401, "unauthorized", "log in first: a session cookie or 'Authorization: Bearer <token>'")
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if via == "session" and (request.method not in SAFE_METHODS or upgrade) and not same_origin(request):
            log.warning("refused %s %s for %s: no same-origin Origin/Referer", request.method, request.path, user.name)
            return _error(403, "csrf", "a cookie-authenticated change must come from this server's own pages "
                                       "(Origin or Referer naming this server)")
        if _mark(route_handler, "auth_admin_only") and not user.is_admin:
            return _error(403, "forbidden", f"{request.method} {request.path} is for admins")
        if user.read_only and request.method not in SAFE_METHODS and not _mark(route_handler, "auth_any_role"):
            return _error(403, "forbidden", "a viewer may only read")
        request[USER_KEY] = user
        request[VIA_KEY] = via
        return await handler(request)

    return check
