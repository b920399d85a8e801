"""Users, API tokens, login sessions, login throttling and file ownership: the users mode's own
tables in the server's SQLite database (the file web/store.py opens, `DB_NAME` in the user
directory), through a connection of their own.

Tables:
  auth_users     name, role ('admin' | 'user' | 'viewer'), argon2id password hash
  auth_tokens    API tokens: a public id (listed, revoked by it), the SHA-256 of the token, a label
  auth_sessions  login sessions: the SHA-256 of the session id, its user, its expiry
  auth_throttle  failed logins per key ('user:NAME', 'addr:IP'): count and time of the last one
  auth_files     who may read each file /view serves: (type, subfolder, filename, owner), one row per
                 owner (an upload's uploader; the user whose prompt produced an output, recorded
                 from its `executed` message, so a cached re-run by another user adds them)

Secrets are never stored: passwords as argon2id hashes (argon2-cffi's defaults), tokens and session
ids (256 random bits from `secrets`) as SHA-256 digests, which is enough for values with that much
entropy (a password needs a slow hash because it has little). Methods are short and thread-safe.
"""
from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from web.sqlite_db import open_database

ROLES = ("admin", "user", "viewer")
RESERVED_NAMES = frozenset({"default"})  # the owner of every prompt while users are off
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOKEN_PREFIX = "ce_"
MIN_PASSWORD_LENGTH = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS auth_users (
    name          TEXT PRIMARY KEY,
    role          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS auth_tokens (
    id            TEXT PRIMARY KEY,
    user          TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    label         TEXT NOT NULL,
    created_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS auth_sessions (
    sid_hash      TEXT PRIMARY KEY,
    user          TEXT NOT NULL,
    expires_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS auth_throttle (
    key           TEXT PRIMARY KEY,
    failures      INTEGER NOT NULL,
    last_ms       INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS auth_files (
    type          TEXT NOT NULL,
    subfolder     TEXT NOT NULL,
    filename      TEXT NOT NULL,
    owner         TEXT NOT NULL,
    PRIMARY KEY (type, subfolder, filename, owner)
);
"""


class AuthError(ValueError):
    """Bad input to the user store: an unknown role, a bad name, a short password, a duplicate."""


@dataclass(frozen=True)
class User:
    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def read_only(self) -> bool:
        return self.role == "viewer"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED_NAMES:
        raise AuthError(f"a user name is 1-64 letters, digits, '_', '.', '-' (not {sorted(RESERVED_NAMES)}), "
                        f"got {str(name)[:80]!r}")
    return name


def check_role(role: object) -> str:
    if role not in ROLES:
        raise AuthError(f"role must be one of {ROLES}, got {str(role)[:40]!r}")
    return role  # type: ignore[return-value]


def check_password(password: object) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise AuthError(f"a password has at least {MIN_PASSWORD_LENGTH} characters")
    return password


class UserStore:
    """The users mode's tables (module doc). `open(db_path)` creates them when missing."""

    def __init__(self, path: Path, *, hasher: PasswordHasher | None = None) -> None:
        self.path = Path(path)
        self.hasher = hasher or PasswordHasher()
        self._lock = threading.Lock()
        self._db = open_database(self.path, _SCHEMA)
        # hashing a password a non-user sends takes as long as checking a real one (no user oracle)
        self._dummy_hash = self.hasher.hash(secrets.token_hex(8))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- users -----------------------------------------------------------------------------------
    def add_user(self, name: str, password: str, role: str = "user") -> User:
        check_name(name), check_role(role), check_password(password)
        hashed = self.hasher.hash(password)
        with self._lock:
            try:
                self._db.execute("INSERT INTO auth_users VALUES (?, ?, ?, ?)", (name, role, hashed, _now_ms()))
            except sqlite3.IntegrityError:
                raise AuthError(f"user {name!r} exists already") from None
        return User(name, role)

    def set_password(self, name: str, password: str) -> None:
        check_password(password)
        hashed = self.hasher.hash(password)
        with self._lock:
            if self._db.execute("UPDATE auth_users SET password_hash=? WHERE name=?", (hashed, name)).rowcount == 0:
                raise AuthError(f"no user {name!r}")
            self._db.execute("DELETE FROM auth_sessions WHERE user=?", (name,))

    def set_role(self, name: str, role: str) -> None:
        check_role(role)
        with self._lock:
            if self._db.execute("UPDATE auth_users SET role=? WHERE name=?", (role, name)).rowcount == 0:
                raise AuthError(f"no user {name!r}")

    def remove_user(self, name: str) -> None:
        with self._lock:
            if self._db.execute("DELETE FROM auth_users WHERE name=?", (name,)).rowcount == 0:
                raise AuthError(f"no user {name!r}")
            self._db.execute("DELETE FROM auth_tokens WHERE user=?", (name,))
            self._db.execute("DELETE FROM auth_sessions WHERE user=?", (name,))

    def user(self, name: str) -> User | None:
        with self._lock:
            row = self._db.execute("SELECT name, role FROM auth_users WHERE name=?", (name,)).fetchone()
        return User(*row) if row else None

    def users(self) -> list[User]:
        with self._lock:
            rows = self._db.execute("SELECT name, role FROM auth_users ORDER BY name").fetchall()
        return [User(*r) for r in rows]

    def verify_password(self, name: str, password: str) -> User | None:
        """The user when `password` is theirs, else None. An unknown name costs one hash too."""
        with self._lock:
            row = self._db.execute("SELECT role, password_hash FROM auth_users WHERE name=?", (name,)).fetchone()
        stored = row[1] if row else self._dummy_hash
        try:
            self.hasher.verify(stored, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        if row is None:
            return None
        if self.hasher.check_needs_rehash(stored):
            with self._lock:
                self._db.execute("UPDATE auth_users SET password_hash=? WHERE name=?",
                                 (self.hasher.hash(password), name))
        return User(name, row[0])

    # -- API tokens ------------------------------------------------------------------------------
    def create_token(self, user: str, label: str = "") -> tuple[str, str]:
        """A new token for `user`: (public id, the token). The token is shown once, stored hashed."""
        if not isinstance(label, str) or len(label) > 200:
            raise AuthError("a token label is a string of at most 200 characters")
        token_id = secrets.token_hex(6)
        token = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
        with self._lock:
            self._db.execute("INSERT INTO auth_tokens VALUES (?, ?, ?, ?, ?)",
                             (token_id, user, _digest(token), label, _now_ms()))
        return token_id, token

    def tokens(self, user: str) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT id, label, created_ms FROM auth_tokens WHERE user=? ORDER BY created_ms",
                                    (user,)).fetchall()
        return [{"id": r[0], "label": r[1], "created": r[2]} for r in rows]

    def revoke_token(self, user: str, token_id: str) -> bool:
        with self._lock:
            return self._db.execute("DELETE FROM auth_tokens WHERE id=? AND user=?", (token_id, user)).rowcount > 0

    def user_for_token(self, token: str) -> User | None:
        with self._lock:
            row = self._db.execute("SELECT u.name, u.role FROM auth_tokens t JOIN auth_users u ON u.name = t.user"
                                   " WHERE t.token_hash=?", (_digest(token),)).fetchone()
        return User(*row) if row else None

    # -- sessions --------------------------------------------------------------------------------
    def create_session(self, user: str, lifetime_s: float) -> str:
        sid = secrets.token_urlsafe(32)
        now = _now_ms()
        with self._lock:
            self._db.execute("DELETE FROM auth_sessions WHERE expires_ms < ?", (now,))
            self._db.execute("INSERT INTO auth_sessions VALUES (?, ?, ?)",
                             (_digest(sid), user, now + int(lifetime_s * 1000)))
        return sid

    def user_for_session(self, sid: str) -> User | None:
        with self._lock:
            row = self._db.execute("SELECT u.name, u.role FROM auth_sessions s JOIN auth_users u ON u.name = s.user"
                                   " WHERE s.sid_hash=? AND s.expires_ms >= ?", (_digest(sid), _now_ms())).fetchone()
        return User(*row) if row else None

    def end_session(self, sid: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM auth_sessions WHERE sid_hash=?", (_digest(sid),))

    # -- login throttling ------------------------------------------------------------------------
    def failures(self, key: str) -> tuple[int, int]:
        """(failed logins, time of the last one in ms) for a throttle key."""
        with self._lock:
            row = self._db.execute("SELECT failures, last_ms FROM auth_throttle WHERE key=?", (key,)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def record_failure(self, key: str, now_ms: int) -> int:
        with self._lock:
            self._db.execute("INSERT INTO auth_throttle VALUES (?, 1, ?) ON CONFLICT(key) DO UPDATE"
                             " SET failures = failures + 1, last_ms = excluded.last_ms", (key, now_ms))
            return self._db.execute("SELECT failures FROM auth_throttle WHERE key=?", (key,)).fetchone()[0]

    def clear_failures(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM auth_throttle WHERE key=?", (key,))

    # -- file ownership ------------------------------------------------------------------------
    def record_files(self, rows: list[tuple[str, str, str, str]]) -> None:
        """Rows of (type, subfolder, filename, owner) that `owner` may read."""
        with self._lock:
            self._db.executemany("INSERT OR IGNORE INTO auth_files VALUES (?, ?, ?, ?)", rows)

    def file_owners(self, kind: str, subfolder: str, filename: str) -> set[str]:
        with self._lock:
            rows = self._db.execute("SELECT owner FROM auth_files WHERE type=? AND subfolder=? AND filename=?",
                                    (kind, subfolder, filename)).fetchall()
        return {r[0] for r in rows}
