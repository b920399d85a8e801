"""One way to open the server's SQLite database (web/store.py's queue and history, the asset
catalogue, the users mode's and /api/v2's tables all live in the same file, each module with its
own connection and its own tables).

Every connection is opened the same way, so the modules cannot disagree about how the file is
shared: autocommit (`isolation_level=None`; callers open their own transactions), WAL journal
(readers never wait for the one writer), `synchronous=NORMAL` (what WAL makes safe against a
killed process), and a 5 s busy timeout for the moments two connections write at once.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

BUSY_TIMEOUT_MS = 5000


def open_database(path: Path, schema: str) -> sqlite3.Connection:
    """A connection to `path` (its folder created) with `schema` (CREATE ... IF NOT EXISTS
    statements) applied. Raises `sqlite3.DatabaseError` for a file that is no database."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        db.executescript(schema)
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


class SqliteDatabase:
    """A module's own connection to the database: `open()` applies its schema, `db` is the open
    connection (a `RuntimeError` naming `what` once closed), `close()` is safe to repeat; `_lock`
    (re-entrant) serialises the module's use of the connection."""

    def __init__(self, path: Path, schema: str, what: str) -> None:
        self.path = Path(path)
        self._schema = schema
        self._what = what
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None

    def open(self):  # -> the subclass
        self._db = open_database(self.path, self._schema)
        return self

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"{self._what} {self.path} is closed")
        return self._db
