"""The users mode's own routes (registered bare and under /api, web/app.py):

  GET    /auth/login            the login page (public)
  POST   /auth/login            form {username, password, next} -> 303 to `next` with the session
                                cookie; JSON {username, password} -> {name, role} + the cookie
                                (public; 401 wrong credentials, 429 while throttled)
  POST   /auth/logout           ends the session, clears the cookie (-> 303 to the login page for
                                a form, else 200 JSON)
  GET    /auth/me               {name, role}
  GET    /auth/tokens           the caller's API tokens [{id, label, created}]
  POST   /auth/tokens           {label?} -> {id, label, token} (the token is shown only here)
  DELETE /auth/tokens/{id}      revokes one of the caller's tokens (404 when not theirs)
  GET    /auth/users            (admin) [{name, role}]
  POST   /auth/users            (admin) {name, password, role} -> {name, role}
  PATCH  /auth/users/{name}     (admin) {role?, password?}
  DELETE /auth/users/{name}     (admin)
"""
from __future__ import annotations

import asyncio
import html
from pathlib import Path

from aiohttp import web

from web.auth.access import admin_only, any_role, auth_of, current_user, public
from web.auth.middleware import LOGIN_PAGE
from web.auth.service import SESSION_COOKIE
from web.auth.store import AuthError
from web.bodies import read_json

PAGE = Path(__file__).resolve().parent / "static" / "login.html"
_MESSAGES = {"bad": "Wrong user name or password.", "wait": "Too many failed attempts; try again later.",
             "out": "Logged out."}


def _safe_next(value: object) -> str:
    """Only a path on this server (never `//host` or a scheme): no open redirect."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def _error(status: int, kind: str, message: str, **extra: object) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message, **extra}}, status=status)


def auth_routes() -> web.RouteTableDef:
    routes = web.RouteTableDef()

    @routes.get(LOGIN_PAGE)
    @public
    async def login_page(request: web.Request) -> web.Response:
        text = PAGE.read_text(encoding="utf-8")
        text = text.replace("{{message}}", html.escape(_MESSAGES.get(request.query.get("error", ""), "")))
        text = text.replace("{{next}}", html.escape(_safe_next(request.query.get("next"))))
        return web.Response(text=text, content_type="text/html",
                            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                     "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                                                "form-action 'self'; frame-ancestors 'none'"})

    @routes.post(LOGIN_PAGE)
    @public
    async def login(request: web.Request) -> web.StreamResponse:
        auth = auth_of(request)
        form = request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data")
        if form:
            data = dict(await request.post())
        else:
            data = await read_json(request, expect=dict)
        name, password = data.get("username"), data.get("password")
        if not isinstance(name, str) or not isinstance(password, str) or not name or not password:
            return _error(400, "invalid_request", "'username' and 'password' are required strings")
        address = request.remote
        wait = auth.login_wait(name, address)
        if wait > 0:
            if form:
                raise web.HTTPSeeOther(f"{LOGIN_PAGE}?error=wait")
            return web.json_response({"error": {"type": "too_many_attempts", "retry_after": round(wait, 3),
                                                "message": f"too many failed logins; retry in {wait:.0f} s"}},
                                     status=429, headers={"Retry-After": str(max(1, int(wait + 0.999)))})
        user = await asyncio.to_thread(auth.store.verify_password, name, password)  # argon2: off the loop
        if user is None:
            auth.login_failed(name, address)
            if form:
                raise web.HTTPSeeOther(f"{LOGIN_PAGE}?error=bad")
            return _error(401, "bad_credentials", "wrong user name or password")
        auth.login_succeeded(name, address)
        sid = auth.store.create_session(user.name, auth.settings.session_hours * 3600)
        response: web.StreamResponse
        if form:
            response = web.HTTPSeeOther(_safe_next(data.get("next")))
        else:
            response = web.json_response({"name": user.name, "role": user.role})
        response.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="Lax", path="/",
                            secure=request.scheme == "https", max_age=int(auth.settings.session_hours * 3600))
        if form:
            raise response  # type: ignore[misc]
        return response

    @routes.post("/auth/logout")
    @any_role
    async def logout(request: web.Request) -> web.StreamResponse:
        sid = request.cookies.get(SESSION_COOKIE)
        if sid:
            auth_of(request).store.end_session(sid)
        form = request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data")
        response: web.StreamResponse = (web.HTTPSeeOther(f"{LOGIN_PAGE}?error=out") if form
                                        else web.json_response({"logged_out": True}))
        response.del_cookie(SESSION_COOKIE, path="/")
        if form:
            raise response  # type: ignore[misc]
        return response

    @routes.get("/auth/me")
    async def me(request: web.Request) -> web.Response:
        user = current_user(request)
        return web.json_response({"name": user.name, "role": user.role})

    @routes.get("/auth/tokens")
    async def list_tokens(request: web.Request) -> web.Response:
        return web.json_response(auth_of(request).store.tokens(current_user(request).name))

    @routes.post("/auth/tokens")
    @any_role
    async def create_token(request: web.Request) -> web.Response:
        body = await read_json(request, empty={}, expect=dict)
        try:
            token_id, token = auth_of(request).store.create_token(current_user(request).name, body.get("label", ""))
        except AuthError as exc:
            return _error(400, "invalid_request", str(exc))
        return web.json_response({"id": token_id, "label": body.get("label", ""), "token": token})

    @routes.delete("/auth/tokens/{token_id}")
    @any_role
    async def revoke_token(request: web.Request) -> web.Response:
        if not auth_of(request).store.revoke_token(current_user(request).name, request.match_info["token_id"]):
            return _error(404, "not_found", "no such token of yours")
        return web.json_response({"revoked": request.match_info["token_id"]})

    @routes.get("/auth/users")
    @admin_only
    async def list_users(request: web.Request) -> web.Response:
        return web.json_response([{"name": u.name, "role": u.role} for u in auth_of(request).store.users()])

    @routes.post("/auth/users")
    @admin_only
    async def add_user(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        try:
            user = await asyncio.to_thread(auth_of(request).store.add_user, body.get("name"), body.get("password"),
                                           body.get("role", "user"))
        except AuthError as exc:
            return _error(400, "invalid_request", str(exc))
        return web.json_response({"name": user.name, "role": user.role})

    @routes.patch("/auth/users/{name}")
    @admin_only
    async def change_user(request: web.Request) -> web.Response:
        body = await read_json(request, expect=dict)
        store, name = auth_of(request).store, request.match_info["name"]
        try:
            if store.user(name) is None:
                return _error(404, "not_found", f"no user {name!r}")
            if "role" in body:
                store.set_role(name, body["role"])
            if "password" in body:
                await asyncio.to_thread(store.set_password, name, body["password"])
        except AuthError as exc:
            return _error(400, "invalid_request", str(exc))
        user = store.user(name)
        return web.json_response({"name": user.name, "role": user.role})

    @routes.delete("/auth/users/{name}")
    @admin_only
    async def remove_user(request: web.Request) -> web.Response:
        try:
            auth_of(request).store.remove_user(request.match_info["name"])
        except AuthError as exc:
            return _error(404, "not_found", str(exc))
        return web.json_response({"removed": request.match_info["name"]})

    return routes
