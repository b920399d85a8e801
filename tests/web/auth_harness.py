"""A test server with `--users` on, users made with a cheap argon2 setting (tests only), and
clients that log in by token or by session cookie."""
from __future__ import annotations

from typing import Any

import aiohttp
from argon2 import PasswordHasher

from web.auth.settings import AuthSettings
from tests.web.web_harness import TestServer, start_test_server

PASSWORD = "correct horse battery"
# argon2id with the smallest cost argon2-cffi accepts: the same code path, milliseconds per hash
CHEAP = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


async def start_auth_server(tmp_path, *, settings: AuthSettings | None = None, frontend: bool = False,
                            users: dict[str, str] | None = None) -> TestServer:
    server = await start_test_server(tmp_path, auth=settings or AuthSettings(), frontend=frontend)
    server.state.auth.store.hasher = CHEAP
    for name, role in (users or {"admin": "admin", "alice": "user", "bob": "user", "vera": "viewer"}).items():
        server.state.auth.store.add_user(name, PASSWORD, role)
    return server


def token_for(server: TestServer, name: str) -> str:
    return server.state.auth.store.create_token(name, "test")[1]


def bearer(server: TestServer, name: str) -> aiohttp.ClientSession:
    """A session that sends `name`'s API token with every request."""
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {token_for(server, name)}"})


async def cookie_session(server: TestServer, name: str, **headers: Any) -> aiohttp.ClientSession:
    """A session logged in through POST /auth/login (JSON); the cookie jar holds the session."""
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), headers=headers)
    async with session.post(f"{server.url}/auth/login", json={"username": name, "password": PASSWORD}) as resp:
        assert resp.status == 200, await resp.text()
    return session
