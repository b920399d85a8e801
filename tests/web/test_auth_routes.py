"""--users: the middleware over the whole route table, login, sessions, CSRF, tokens, roles,
login throttling, and the command line that makes the first admin (web/auth/)."""
from __future__ import annotations

import re

import aiohttp
import pytest

from tests.web.auth_harness import CHEAP, PASSWORD, bearer, cookie_session, start_auth_server, token_for
from tests.web.web_harness import chain, start_test_server
from web.auth.service import SESSION_COOKIE, login_delay
from web.auth.settings import AuthSettings
from web.auth.store import AuthError, UserStore

# The only routes served without credentials, and why: the login page (a browser without a
# session must be able to get it) and the login POST (how a session is obtained). The page has
# no separate assets (its CSS is inline), so nothing else needs to be public.
PUBLIC = {("GET", "/auth/login"), ("POST", "/auth/login"), ("GET", "/api/auth/login"), ("POST", "/api/auth/login")}


def _routes(app):
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or (info.get("prefix", "") + "/x")
        if route.method == "*":
            yield "GET", path
            continue
        yield route.method, path


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


async def test_every_route_refuses_a_request_without_credentials(tmp_path):
    server = await start_auth_server(tmp_path, frontend=True)  # the editor's static routes too
    try:
        seen_public = set()
        checked = 0
        async with aiohttp.ClientSession() as anonymous:
            for method, path in sorted(set(_routes(server.runner.app))):
                if method == "HEAD":
                    continue
                if (method, path) in PUBLIC:
                    seen_public.add((method, path))
                    continue
                async with anonymous.request(method, server.url + _concrete(path), allow_redirects=False,
                                             headers={"Accept": "application/json"}) as resp:
                    assert resp.status == 401, (method, path, resp.status, await resp.text())
                    assert (await resp.json())["error"]["type"] == "unauthorized"
                    checked += 1
            assert seen_public == PUBLIC
            assert checked > 100  # the whole table: prompts, files, userdata, assets, v2, editor, ...
            # the WebSocket handshake and an unknown path, too
            async with anonymous.get(server.url + "/ws?clientId=x") as resp:
                assert resp.status == 401
            async with anonymous.get(server.url + "/no/such/route") as resp:
                assert resp.status == 401
            # a browser navigating is sent to the login page instead
            async with anonymous.get(server.url + "/", allow_redirects=False, headers={"Accept": "text/html"}) as resp:
                assert resp.status == 302 and resp.headers["Location"] in ("/auth/login?next=%2F", "/auth/login?next=/")
            async with anonymous.get(server.url + "/auth/login") as resp:
                assert resp.status == 200 and 'name="password"' in await resp.text()
    finally:
        await server.close()


async def test_off_by_default(tmp_path):
    server = await start_test_server(tmp_path)
    try:
        assert server.state.auth is None
        async with server.session.get(f"{server.url}/queue") as resp:
            assert resp.status == 200
        async with server.session.get(f"{server.url}/auth/login") as resp:
            assert resp.status == 404
        status, body = await server.post_prompt(chain(1))
        assert status == 200
        await server.wait_history(body["prompt_id"])
        assert server.state.store.history_owner(body["prompt_id"]) == "default"
        async with server.session.get(f"{server.url}/view?filename=webtest_00003.png") as resp:
            assert resp.status == 200  # no ownership rules without users
    finally:
        await server.close()


async def test_form_login_sets_an_httponly_lax_cookie_and_redirects(tmp_path):
    server = await start_auth_server(tmp_path)
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
            form = {"username": "alice", "password": PASSWORD, "next": "/?workflow=1"}
            async with browser.post(f"{server.url}/auth/login", data=form, allow_redirects=False,
                                    headers={"Origin": server.url}) as resp:
                assert resp.status == 303 and resp.headers["Location"] == "/?workflow=1"
                cookie = resp.cookies[SESSION_COOKIE]
                assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
            async with browser.get(f"{server.url}/auth/me") as resp:
                assert await resp.json() == {"name": "alice", "role": "user"}
            # an open redirect is refused: `next` must be a path here
            form["next"] = "//evil.example/"
            async with browser.post(f"{server.url}/auth/login", data=form, allow_redirects=False) as resp:
                assert resp.headers["Location"] == "/"
            async with browser.post(f"{server.url}/auth/logout", headers={"Origin": server.url}) as resp:
                assert resp.status == 200
            async with browser.get(f"{server.url}/auth/me") as resp:
                assert resp.status == 401
        async with aiohttp.ClientSession() as anonymous:
            form = {"username": "alice", "password": "wrong password", "next": "/"}
            async with anonymous.post(f"{server.url}/auth/login", data=form, allow_redirects=False) as resp:
                assert resp.status == 303 and resp.headers["Location"] == "/auth/login?error=bad"
                assert SESSION_COOKIE not in resp.cookies
    finally:
        await server.close()


async def test_cookie_sessions_need_a_same_origin_header_to_change_anything(tmp_path):
    server = await start_auth_server(tmp_path)
    try:
        session = await cookie_session(server, "alice")
        async with session:
            async with session.get(f"{server.url}/queue") as resp:  # reading needs no Origin
                assert resp.status == 200
            for headers in ({}, {"Origin": "http://evil.example"}, {"Origin": "null"},
                            {"Referer": "http://evil.example/page"}):
                async with session.post(f"{server.url}/prompt", json={"prompt": chain(1)}, headers=headers) as resp:
                    assert resp.status == 403, headers
                    # a foreign Origin on loopback is refused even earlier, by the cross-site guard
                    expected = {"csrf"} if "Origin" not in headers else {"csrf", "cross_site_request"}
                    assert (await resp.json())["error"]["type"] in expected
            async with session.ws_connect(f"{server.url}/ws", headers={"Origin": "http://evil.example"}) as _:
                pytest.fail("a cross-origin WebSocket handshake with the cookie must be refused")
    except aiohttp.WSServerHandshakeError as exc:
        assert exc.status == 403
    finally:
        await server.close()
    server = await start_auth_server(tmp_path / "again")
    try:
        session = await cookie_session(server, "alice")
        async with session:
            for headers in ({"Origin": server.url}, {"Referer": server.url + "/"}):
                async with session.post(f"{server.url}/prompt", json={"prompt": chain(1)}, headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
        # a bearer token is never sent by a browser by itself: no Origin needed
        async with bearer(server, "alice") as script:
            async with script.post(f"{server.url}/prompt", json={"prompt": chain(2)}) as resp:
                assert resp.status == 200
    finally:
        await server.close()


async def test_tokens_are_created_listed_and_revoked(tmp_path):
    server = await start_auth_server(tmp_path)
    try:
        session = await cookie_session(server, "alice", Origin=server.url)
        async with session:
            async with session.post(f"{server.url}/auth/tokens", json={"label": "ci"}) as resp:
                made = await resp.json()
            assert made["token"].startswith("ce_")
            async with session.get(f"{server.url}/auth/tokens") as resp:
                assert [t["label"] for t in await resp.json()] == ["ci"]
            # stored hashed: the token itself is nowhere in the database
            assert made["token"].encode() not in server.state.auth.store.path.read_bytes()
            headers = {"Authorization": f"Bearer {made['token']}"}
            async with aiohttp.ClientSession(headers=headers) as script:
                async with script.get(f"{server.url}/auth/me") as resp:
                    assert (await resp.json())["name"] == "alice"
                async with session.delete(f"{server.url}/auth/tokens/{made['id']}") as resp:
                    assert resp.status == 200
                async with script.get(f"{server.url}/auth/me") as resp:
                    assert resp.status == 401
        # bob cannot revoke alice's token
        alice_id = server.state.auth.store.create_token("alice", "x")[0]
        async with bearer(server, "bob") as bob:
            async with bob.delete(f"{server.url}/auth/tokens/{alice_id}") as resp:
                assert resp.status == 404
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer ce_not-a-token"}) as wrong:
            async with wrong.get(f"{server.url}/queue") as resp:
                assert resp.status == 401
    finally:
        await server.close()


async def test_roles(tmp_path):
    server = await start_auth_server(tmp_path)
    try:
        async with bearer(server, "vera") as viewer, bearer(server, "alice") as user, \
                bearer(server, "admin") as admin:
            async with viewer.get(f"{server.url}/queue") as resp:
                assert resp.status == 200
            async with viewer.post(f"{server.url}/prompt", json={"prompt": chain(1)}) as resp:
                assert resp.status == 403 and (await resp.json())["error"]["type"] == "forbidden"
            async with viewer.post(f"{server.url}/auth/tokens", json={}) as resp:  # @any_role
                assert resp.status == 200
            for path in ("/api/queue/pause", "/api/queue/resume"):
                async with user.post(server.url + path) as resp:
                    assert resp.status == 403
            async with user.post(f"{server.url}/api/queue/priorities", json={"owner": "alice", "priority": 5}) as resp:
                assert resp.status == 403
            async with user.get(f"{server.url}/auth/users") as resp:
                assert resp.status == 403
            for method, path in (("GET", "/internal/logs"), ("GET", "/internal/logs/raw"),
                                 ("PATCH", "/internal/logs/subscribe"), ("POST", "/free")):
                async with user.request(method, server.url + path, json={}) as resp:
                    assert resp.status == 403, path
            async with admin.get(f"{server.url}/internal/logs/raw") as resp:
                assert resp.status == 200
            async with admin.post(f"{server.url}/api/queue/pause") as resp:
                assert resp.status == 200 and (await resp.json())["paused"] is True
            async with admin.post(f"{server.url}/auth/users",
                                  json={"name": "carol", "password": PASSWORD, "role": "viewer"}) as resp:
                assert await resp.json() == {"name": "carol", "role": "viewer"}
            async with admin.post(f"{server.url}/auth/users", json={"name": "x", "password": "short"}) as resp:
                assert resp.status == 400
            async with admin.delete(f"{server.url}/auth/users/carol") as resp:
                assert resp.status == 200
    finally:
        await server.close()


async def test_failed_logins_make_the_next_attempt_wait(tmp_path):
    settings = AuthSettings(free_login_failures=2, max_login_delay_s=60)
    server = await start_auth_server(tmp_path, settings=settings)
    auth = server.state.auth
    now = [1_000_000.0]
    auth.clock = lambda: now[0]
    url = f"{server.url}/auth/login"
    try:
        async with aiohttp.ClientSession() as client:
            async def attempt(password: str) -> aiohttp.ClientResponse:
                async with client.post(url, json={"username": "alice", "password": password}) as resp:
                    await resp.read()
                    return resp

            assert (await attempt("nope-nope-1")).status == 401
            assert (await attempt("nope-nope-2")).status == 401  # two free failures
            assert auth.login_wait("alice", "127.0.0.1") == 1.0
            resp = await attempt(PASSWORD)  # even the right password waits
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
            now[0] += 1.0
            assert (await attempt("nope-nope-3")).status == 401
            assert auth.login_wait("alice", "127.0.0.1") == 2.0  # doubles
            now[0] += 2.0
            assert (await attempt("nope-nope-4")).status == 401
            assert auth.login_wait("alice", "127.0.0.1") == 4.0
            # per address as well: another user name from the same address waits too
            assert auth.login_wait("bob", "127.0.0.1") == 4.0
            now[0] += 4.0
            assert (await attempt(PASSWORD)).status == 200
            assert auth.login_wait("alice", "127.0.0.1") == 0.0  # a success clears it
        assert login_delay(100, settings) == 60  # capped
    finally:
        await server.close()


def test_the_command_line_creates_the_first_admin(tmp_path, capsys):
    from main import main

    env = {"COMFY_ENGINE_PASSWORD": PASSWORD}
    from web.auth import cli

    assert cli.main(["--user-directory", str(tmp_path), "add", "root", "--role", "admin"], environ=env) == 0
    assert cli.main(["--user-directory", str(tmp_path), "add", "root"], environ=env) == 1  # exists
    assert cli.main(["--user-directory", str(tmp_path), "role", "root", "viewer"]) == 0
    store = UserStore(tmp_path / "comfy_engine_queue.sqlite3", hasher=CHEAP)
    try:
        user = store.verify_password("root", PASSWORD)
        assert user is not None and user.role == "viewer"
        assert store.verify_password("root", "not the password") is None
        assert store.verify_password("nobody", PASSWORD) is None
        assert store.path.read_bytes().count(PASSWORD.encode()) == 0
    finally:
        store.close()
    # through main.py, as documented
    env_name = "COMFY_ENGINE_PASSWORD"
    import os
    os.environ[env_name] = PASSWORD
    try:
        assert main(["users", "--user-directory", str(tmp_path), "add", "bob"]) == 0
        assert main(["users", "--user-directory", str(tmp_path), "list"]) == 0
    finally:
        del os.environ[env_name]
    assert "bob\tuser" in capsys.readouterr().out


def test_the_store_refuses_bad_input(tmp_path):
    store = UserStore(tmp_path / "db.sqlite3", hasher=CHEAP)
    try:
        for name, password, role in (("default", PASSWORD, "user"), ("a/b", PASSWORD, "user"),
                                     ("ok", "short", "user"), ("ok", PASSWORD, "root")):
            with pytest.raises(AuthError):
                store.add_user(name, password, role)
        store.add_user("ok", PASSWORD, "user")
        token_id, token = store.create_token("ok")
        assert store.user_for_token(token).name == "ok"
        store.remove_user("ok")  # its tokens go with it
        assert store.user_for_token(token) is None
    finally:
        store.close()
