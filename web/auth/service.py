"""The users mode's state for one server (`state.auth`): the user store, who a request is, login
throttling, the per-user prompt rate limit and queue quota, and which user each WebSocket client
id belongs to. Built by web/app.py when `config.auth` is set; None otherwise (one user, as before).

Login throttling (docs/auth.md): each failed login counts against the user name tried and the
client address. After `free_login_failures` failures on a key, the next attempt is refused with
429 until `2 ** (failures - free)` seconds (at most `max_login_delay_s`) have passed since the
last failure; nothing sleeps, the answer says how long to wait. A success clears both keys.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from web.auth.settings import AuthSettings
from web.auth.store import User, UserStore

SESSION_COOKIE = "comfy_engine_session"
FILE_TYPES = ("output", "temp", "input")


def login_delay(failures: int, settings: AuthSettings) -> float:
    """Seconds an attempt must wait after the last failure, with `failures` failures so far."""
    if failures < settings.free_login_failures or failures == 0:
        return 0.0
    return float(min(2.0 ** (failures - settings.free_login_failures), settings.max_login_delay_s))


def output_files(output: Any) -> Iterable[tuple[str, str, str]]:
    """(type, subfolder, filename) of every file item in a node's UI output (`executed` data)."""
    if not isinstance(output, dict):
        return
    for value in output.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("filename"), str):
                kind = item.get("type") if item.get("type") in FILE_TYPES else "output"
                yield kind, str(item.get("subfolder") or ""), item["filename"]


@dataclass
class AuthService:
    store: UserStore
    settings: AuthSettings = field(default_factory=AuthSettings)
    clock: Callable[[], float] = time.time
    # client id -> the user whose socket or prompt first used it
    client_users: dict[str, str] = field(default_factory=dict)
    _prompt_times: dict[str, deque] = field(default_factory=dict)

    @classmethod
    def open(cls, db_path: Path, settings: AuthSettings) -> "AuthService":
        return cls(UserStore(db_path), settings)

    def close(self) -> None:
        self.store.close()

    # -- who is asking -------------------------------------------------------------------------
    def user_for(self, authorization: str | None, session_id: str | None) -> tuple[User | None, str | None]:
        """(user, how: 'token' | 'session') from an `Authorization: Bearer` header or the session
        cookie; (None, None) when neither names a user. A bearer header that is wrong is not
        retried with the cookie: the caller asked to be that token."""
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None, None
            user = self.store.user_for_token(token.strip())
            return (user, "token") if user else (None, None)
        if session_id:
            user = self.store.user_for_session(session_id)
            if user is not None:
                return user, "session"
        return None, None

    # -- login throttling ----------------------------------------------------------------------
    @staticmethod
    def throttle_keys(name: str, address: str | None) -> list[str]:
        return [f"user:{name}", f"addr:{address or 'unknown'}"]

    def login_wait(self, name: str, address: str | None) -> float:
        """Seconds before a login for `name` from `address` may be tried (0: now)."""
        now = self.clock()
        wait = 0.0
        for key in self.throttle_keys(name, address):
            failures, last_ms = self.store.failures(key)
            wait = max(wait, last_ms / 1000 + login_delay(failures, self.settings) - now)
        return max(0.0, wait)

    def login_failed(self, name: str, address: str | None) -> None:
        now_ms = int(self.clock() * 1000)
        for key in self.throttle_keys(name, address):
            self.store.record_failure(key, now_ms)

    def login_succeeded(self, name: str, address: str | None) -> None:
        for key in self.throttle_keys(name, address):
            self.store.clear_failures(key)

    # -- prompt limits -------------------------------------------------------------------------
    def prompt_rate_wait(self, user: str) -> float:
        """0 and the submission counted when `user` may submit now; else seconds to wait (the
        last minute already holds `prompts_per_minute` of theirs)."""
        limit = self.settings.prompts_per_minute
        if limit == 0:
            return 0.0
        now = self.clock()
        times = self._prompt_times.setdefault(user, deque())
        while times and times[0] <= now - 60.0:
            times.popleft()
        if len(times) >= limit:
            return max(0.001, times[0] + 60.0 - now)
        times.append(now)
        return 0.0

    def quota_reached(self, pending_owned: int) -> bool:
        return self.settings.queue_quota > 0 and pending_owned >= self.settings.queue_quota

    # -- WebSocket client ids ------------------------------------------------------------------
    def claim_client(self, client_id: str, user: str) -> bool:
        """True when `client_id` is free or already `user`'s (then it is theirs from now on)."""
        owner = self.client_users.setdefault(client_id, user)
        return owner == user

    # -- file ownership ------------------------------------------------------------------------
    def record_outputs(self, owner: str, data: Any) -> None:
        """An `executed` message's files become readable by `owner` (the prompt's)."""
        output = data.get("output") if isinstance(data, dict) else None
        rows = [(kind, sub, name, owner) for kind, sub, name in output_files(output)]
        if rows:
            self.store.record_files(rows)

    def foreign_inputs(self, owner: str, prompt: Any) -> list[str]:
        """Input file names in `prompt` (LoadImage's `image`, ...) that another user uploaded and
        `owner` may not read: a prompt must not copy another user's upload into its outputs."""
        user = self.store.user(owner)
        if user is None or user.is_admin or not isinstance(prompt, dict):
            return []
        found = []
        for node in prompt.values():
            inputs = node.get("inputs") if isinstance(node, dict) else None
            for value in (inputs.values() if isinstance(inputs, dict) else ()):
                if not isinstance(value, str) or not value or len(value) > 512:
                    continue
                name = value.rsplit(" [", 1)[0] if value.endswith("]") else value
                subfolder, _, filename = name.rpartition("/")
                if not self.may_read_file(user, "input", subfolder, filename):
                    found.append(value)
        return found

    def may_read_file(self, user: User, kind: str, subfolder: str, filename: str) -> bool:
        """Admins read everything. Others: a file with owners only when they are one; an input
        file nobody uploaded (one put in input/ by hand) is shared; any other file is refused."""
        if user.is_admin:
            return True
        owners = self.store.file_owners(kind, subfolder, filename)
        if owners:
            return user.name in owners
        return kind == "input"
