"""Durable queue and history: one SQLite database (standard library, WAL) in the user directory.

Tables:
  queue           every prompt accepted and not finished: `state` is 'pending' or 'running'
  history         finished prompts, ComfyUI's history entry as JSON, in insertion order (`seq`)
  queue_control   the queue's own settings as key/value rows ('paused': '1' or '0')
  queue_priority  per-owner priorities (web/prompt_queue.py states the scheduling rule)
Queue control (docs/queue.md) adds columns to the first two: `owner` (who submitted it),
`retry_of` (the prompt a retry re-runs) and, in history, `retried_as` (the retry's id). A
database from before them gets them on `connect()` (`_migrate`), old rows with the defaults.

Every change is one short transaction. With WAL and `synchronous=NORMAL` a committed
transaction survives the process being killed (not necessarily a power cut), which is what
"restart durability" needs: on `open()`, a prompt left 'running' by a dead server becomes a
history entry with status `interrupted` (its prompt kept, so it can be queued again) and the
'pending' ones are handed back to the queue in their order.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from web.bodies import OFF_LOOP_BYTES, parse_json_pieces
from web.sqlite_db import open_database
from web.queue_item import DEFAULT_OWNER, MAX_QUEUE_NUMBER, QueueItem, now_ms, public_extra_data

log = logging.getLogger(__name__)

DB_NAME = "comfy_engine_queue.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    prompt_id   TEXT PRIMARY KEY,
    number      REAL NOT NULL,
    prompt      TEXT NOT NULL,
    extra_data  TEXT NOT NULL,
    outputs     TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    create_ms   INTEGER NOT NULL,
    start_ms    INTEGER
);
CREATE TABLE IF NOT EXISTS history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt_id   TEXT NOT NULL UNIQUE,
    entry       TEXT NOT NULL,
    status      TEXT NOT NULL,
    number      REAL NOT NULL,
    create_ms   INTEGER NOT NULL,
    start_ms    INTEGER,
    end_ms      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS queue_control (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS queue_priority (
    owner       TEXT PRIMARY KEY,
    priority    INTEGER NOT NULL
);
"""

# Columns added after the first release: (table, column, declaration). `_migrate` adds the missing
# ones to an existing database; a new one is created without them and migrated the same way.
_ADDED_COLUMNS = (
    ("queue", "owner", f"TEXT NOT NULL DEFAULT '{DEFAULT_OWNER}'"),
    ("queue", "retry_of", "TEXT"),
    ("history", "owner", f"TEXT NOT NULL DEFAULT '{DEFAULT_OWNER}'"),
    ("history", "retry_of", "TEXT"),
    ("history", "retried_as", "TEXT"),
)


def _migrate(db: sqlite3.Connection) -> None:
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")



class StoreError(RuntimeError):
    """The database file cannot be opened or is not ours."""


@dataclass(frozen=True)
class HistoryRecord:
    """One finished prompt, with the columns `/jobs` needs besides the entry itself."""

    prompt_id: str
    entry: dict
    status: str  # "success" | "error" | "interrupted"
    number: float
    create_ms: int
    start_ms: int | None
    end_ms: int
    owner: str = DEFAULT_OWNER
    retry_of: str | None = None  # the prompt this one retried
    retried_as: str | None = None  # the prompt that retries this one


def _with_links(entry: dict, retry_of: Any, retried_as: Any) -> dict:
    """A history entry with its retry links (`retry_of`, `retried_as`) as extra keys, only those
    that are set: an entry without retries stays exactly ComfyUI's shape."""
    if retry_of:
        entry["retry_of"] = retry_of
    if retried_as:
        entry["retried_as"] = retried_as
    return entry


def _loads(text: Any, what: str) -> Any:
    """A stored JSON column, or None (with a log line) when it cannot be read: one damaged row is
    skipped, never a 500 for every later request (issue 34)."""
    try:
        if isinstance(text, str) and len(text) > OFF_LOOP_BYTES:  # a big prompt: no long GIL hold
            return parse_json_pieces(text, strict=False)
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        log.warning("skipped %s: its stored JSON cannot be read (%s: %s)", what, type(exc).__name__,
                    str(exc)[:200])
        return None


def encode_json(value: Any) -> str:
    """`json.dumps(value, default=str)` in pieces (`_dumps_pieces`), for stored rows and big
    responses built in a worker thread. `default=str`: a node's UI dict may hold something JSON
    cannot (a Path, a numpy scalar); the history must still be written."""
    return _dumps_pieces(value, 0)


def _dumps_pieces(value: Any, nesting: int) -> str:
    """`json.dumps(value, default=str)`, the same text, with big containers encoded member by
    member. The store is written from worker threads, but one `json.dumps` of a 100 000-node
    prompt is one C call holding the GIL, which stopped the event loop as long (issue 34)."""
    if isinstance(value, dict):
        if (nesting < 6 or len(value) > 64) and all(isinstance(k, str) for k in value):
            return "{" + ", ".join(f"{json.dumps(k)}: {_dumps_pieces(v, nesting + 1)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)):
        if nesting < 6 or len(value) > 64:
            return "[" + ", ".join(_dumps_pieces(v, nesting + 1) for v in value) + "]"
    return json.dumps(value, default=str)


class PromptStore:
    """SQLite-backed queue and history. All methods are short and thread-safe."""

    def __init__(self, path: Path, *, max_history: int = 10000) -> None:
        self.path = Path(path)
        self.max_history = max_history
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def open(cls, user_dir: Path, *, max_history: int = 10000) -> "PromptStore":
        store = cls(Path(user_dir) / DB_NAME, max_history=max_history)
        store.connect()
        store.repair_numbers()
        return store

    def repair_numbers(self) -> list[str]:
        """Clamp stored queue numbers that cannot be used into +-MAX_QUEUE_NUMBER (a number that
        is not a number becomes 0), one log line per row; returns the prompt ids repaired.

        Such a number entered before POST /prompt range-checked it (or by hand); left alone, the
        counter that continues after the highest stored number would not fit SQLite's integer and
        every later POST /prompt without a number would fail. Clamping keeps the row and its side
        of the queue (front or back)."""
        bad = ("typeof(number) NOT IN ('integer', 'real') OR number > :limit OR number < -:limit")
        repaired: list[str] = []
        with self._lock:
            for table in ("queue", "history"):
                rows = self.db.execute(f"SELECT prompt_id, number FROM {table} WHERE {bad}",
                                       {"limit": MAX_QUEUE_NUMBER}).fetchall()
                for prompt_id, number in rows:
                    fixed = (max(-MAX_QUEUE_NUMBER, min(MAX_QUEUE_NUMBER, number))
                             if isinstance(number, (int, float)) else 0)
                    self.db.execute(f"UPDATE {table} SET number=? WHERE prompt_id=?", (fixed, prompt_id))
                    log.warning("repaired the stored number of prompt %s in %s: %s cannot be used, now %s",
                                prompt_id, table, str(number)[:40], fixed)
                    repaired.append(prompt_id)
        return repaired

    def connect(self) -> None:
        try:
            db = open_database(self.path, _SCHEMA)
            _migrate(db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open queue/history database {self.path}: {exc}") from exc
        self._db = db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"queue/history database {self.path} is closed")
        return self._db

    # -- queue -----------------------------------------------------------------------------
    def add_pending(self, item: QueueItem) -> None:
        # encoded before the lock: a big prompt's encoding (seconds, in a worker thread) must not
        # keep the event loop's own short store calls waiting for the lock (issue 34)
        row = self._pending_row(item)
        with self._lock:
            self.db.execute(self._INSERT_PENDING, row)

    _INSERT_PENDING = ("INSERT OR REPLACE INTO queue (prompt_id, number, prompt, extra_data, outputs, state, create_ms,"
                       " owner, retry_of) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)")

    @staticmethod
    def _pending_row(item: QueueItem) -> tuple:
        return (item.prompt_id, item.number, encode_json(item.prompt), encode_json(public_extra_data(item.extra_data)),
                encode_json(item.outputs), item.create_time, item.owner, item.retry_of)

    def add_retry(self, item: QueueItem) -> None:
        """Atomically: `item` (a retry of `item.retry_of`) is queued and the old history row
        names it in `retried_as`. Refused (StoreError) when that row is gone or already retried."""
        row = self._pending_row(item)
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                linked = db.execute("UPDATE history SET retried_as=? WHERE prompt_id=? AND retried_as IS NULL",
                                    (item.prompt_id, item.retry_of)).rowcount
                if linked != 1:
                    raise StoreError(f"prompt {item.retry_of} has no history entry that can be retried")
                db.execute(self._INSERT_PENDING, row)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def set_numbers(self, numbers: Iterable[tuple[str, float]]) -> None:
        """New queue numbers for pending prompts (a reorder), in one transaction."""
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("UPDATE queue SET number=? WHERE prompt_id=? AND state='pending'",
                               [(number, pid) for pid, number in numbers])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    # -- queue control ---------------------------------------------------------------------
    def paused(self) -> bool:
        with self._lock:
            row = self.db.execute("SELECT value FROM queue_control WHERE key='paused'").fetchone()
        return bool(row) and row[0] == "1"

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO queue_control (key, value) VALUES ('paused', ?)",
                            ("1" if paused else "0",))

    def priorities(self) -> dict[str, int]:
        """Every owner's priority that was set (owners not listed have priority 0)."""
        with self._lock:
            rows = self.db.execute("SELECT owner, priority FROM queue_priority ORDER BY owner").fetchall()
        return {owner: int(priority) for owner, priority in rows if isinstance(priority, int)}

    def set_priority(self, owner: str, priority: int) -> None:
        """`owner`'s priority; 0 (the default) removes the row."""
        with self._lock:
            if priority == 0:
                self.db.execute("DELETE FROM queue_priority WHERE owner=?", (owner,))
            else:
                self.db.execute("INSERT OR REPLACE INTO queue_priority (owner, priority) VALUES (?, ?)",
                                (owner, priority))

    def mark_running(self, prompt_id: str, start_ms: int) -> None:
        with self._lock:
            self.db.execute("UPDATE queue SET state='running', start_ms=? WHERE prompt_id=?", (start_ms, prompt_id))

    def mark_pending(self, prompt_id: str) -> None:
        """A running prompt goes back to waiting (its Ray worker died; web/ray_backend)."""
        with self._lock:
            self.db.execute("UPDATE queue SET state='pending', start_ms=NULL WHERE prompt_id=?", (prompt_id,))

    def remove_pending(self, prompt_ids: Iterable[str]) -> None:
        with self._lock:
            self.db.executemany("DELETE FROM queue WHERE prompt_id=? AND state='pending'",
                                [(pid,) for pid in prompt_ids])

    def clear_pending(self) -> None:
        with self._lock:
            self.db.execute("DELETE FROM queue WHERE state='pending'")

    def pending_items(self) -> list[QueueItem]:
        """The prompts still waiting, in queue order."""
        with self._lock:
            rows = self.db.execute(
                "SELECT number, prompt_id, prompt, extra_data, outputs, create_ms, owner, retry_of FROM queue"
                " WHERE state='pending' ORDER BY number, prompt_id").fetchall()
        items = []
        for number, prompt_id, prompt, extra, outputs, create_ms, owner, retry_of in rows:
            item = self._item(number, prompt_id, prompt, extra, outputs, create_ms, owner, retry_of)
            if item is not None:
                items.append(item)
        return items

    @staticmethod
    def _item(number: Any, prompt_id: str, prompt: Any, extra: Any, outputs: Any, create_ms: Any,
              owner: Any = DEFAULT_OWNER, retry_of: Any = None) -> QueueItem | None:
        """A stored queue row as a QueueItem, or None (logged) when a column cannot be used."""
        what = f"queued prompt {prompt_id}"
        prompt, extra, outputs = _loads(prompt, what), _loads(extra, what), _loads(outputs, what)
        if not isinstance(prompt, dict) or not isinstance(extra, dict) or not isinstance(outputs, list):
            if prompt is not None and extra is not None and outputs is not None:
                log.warning("skipped %s: its stored prompt, extra_data or outputs has the wrong type", what)
            return None
        if not isinstance(create_ms, int):
            create_ms = now_ms()
        return QueueItem(number=number, prompt_id=prompt_id, prompt=prompt, extra_data=extra,
                         outputs=[str(o) for o in outputs], create_time=create_ms,
                         owner=owner if isinstance(owner, str) and owner else DEFAULT_OWNER,
                         retry_of=retry_of if isinstance(retry_of, str) and retry_of else None)

    def max_number(self) -> float | None:
        with self._lock:
            row = self.db.execute(
                "SELECT MAX(n) FROM (SELECT MAX(number) AS n FROM queue UNION ALL SELECT MAX(number) FROM history)"
            ).fetchone()
        return row[0] if row else None

    def recover_interrupted(self) -> list[str]:
        """Turn prompts a dead server left 'running' into `interrupted` history entries.

        Returns their prompt ids. The entry keeps the prompt, so a client can queue it again.
        """
        with self._lock:
            rows = self.db.execute(
                "SELECT number, prompt_id, prompt, extra_data, outputs, create_ms, start_ms, owner, retry_of FROM queue"
                " WHERE state='running'").fetchall()
        recovered = []
        for number, prompt_id, prompt, extra, outputs, create_ms, start_ms, owner, retry_of in rows:
            item = self._item(number, prompt_id, prompt, extra, outputs, create_ms, owner, retry_of)
            if item is None:  # logged; the row stays as it is for a person to look at
                continue
            if not isinstance(start_ms, int):
                start_ms = None
            end = now_ms()
            messages = [
                ["execution_start", {"prompt_id": prompt_id, "timestamp": start_ms or end}],
                ["execution_interrupted", {"prompt_id": prompt_id, "node_id": None, "node_type": None,
                                           "executed": [], "timestamp": end,
                                           "reason": "the server stopped while this prompt was running"}],
            ]
            entry = {"prompt": item.wire(), "outputs": {}, "meta": {},
                     "status": {"status_str": "error", "completed": False, "messages": messages}}
            self.finish(item, entry, "interrupted", start_ms, end)
            recovered.append(prompt_id)
        return recovered

    # -- history ---------------------------------------------------------------------------
    def finish(self, item: QueueItem, entry: dict, status: str, start_ms: int | None, end_ms: int) -> None:
        """Atomically: the prompt leaves the queue and its history entry is written (replacing an
        older entry with the same id, which then moves to the end, keeping its `retried_as`)."""
        text = encode_json(entry)  # before the lock, as in `add_pending`
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM queue WHERE prompt_id=?", (item.prompt_id,))
                # a retry made of the older entry stays linked to the id (its `retry_of` names it)
                older = db.execute("SELECT retried_as FROM history WHERE prompt_id=?", (item.prompt_id,)).fetchone()
                db.execute("DELETE FROM history WHERE prompt_id=?", (item.prompt_id,))
                db.execute(
                    "INSERT INTO history (prompt_id, entry, status, number, create_ms, start_ms, end_ms, owner,"
                    " retry_of, retried_as) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (item.prompt_id, text, status, item.number, item.create_time, start_ms, end_ms, item.owner,
                     item.retry_of, older[0] if older else None),
                )
                excess = db.execute("SELECT COUNT(*) FROM history").fetchone()[0] - self.max_history
                if excess > 0:
                    db.execute("DELETE FROM history WHERE seq IN (SELECT seq FROM history ORDER BY seq LIMIT ?)",
                               (excess,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def history(self, max_items: int | None = None, offset: int = -1, *, owner: str | None = None) -> dict[str, dict]:
        """ComfyUI's windowing: offset < 0 with max_items gives the last max_items entries;
        otherwise from `offset`, at most `max_items`; an offset past the end gives {}.
        `owner`: only that owner's entries, windowed among themselves (--users, web/auth/)."""
        where, params = ("WHERE owner=?", (owner,)) if owner is not None else ("", ())
        with self._lock:
            total = self.db.execute(f"SELECT COUNT(*) FROM history {where}", params).fetchone()[0]
            if offset < 0 and max_items is not None:
                offset = max(0, total - max_items)
            offset = max(offset, 0)
            if offset >= total:
                return {}
            limit = -1 if max_items is None else max_items
            rows = self.db.execute(f"SELECT prompt_id, entry, retry_of, retried_as FROM history {where} ORDER BY seq"
                                   " LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        loaded = ((pid, _loads(entry, f"history entry {pid}"), links) for pid, entry, *links in rows)
        return {pid: _with_links(entry, *links) for pid, entry, links in loaded if isinstance(entry, dict)}

    def history_entry(self, prompt_id: str) -> dict | None:
        with self._lock:
            row = self.db.execute("SELECT entry, retry_of, retried_as FROM history WHERE prompt_id=?",
                                  (prompt_id,)).fetchone()
        entry = _loads(row[0], f"history entry {prompt_id}") if row else None
        return _with_links(entry, row[1], row[2]) if isinstance(entry, dict) else None

    def history_records(self) -> list[HistoryRecord]:
        """Every finished prompt, oldest first (for /jobs)."""
        with self._lock:
            rows = self.db.execute(
                "SELECT prompt_id, entry, status, number, create_ms, start_ms, end_ms, owner, retry_of, retried_as"
                " FROM history ORDER BY seq"
            ).fetchall()
        records = (self._record(r) for r in rows)
        return [r for r in records if r is not None]

    @staticmethod
    def _record(r: tuple) -> HistoryRecord | None:
        entry = _loads(r[1], f"history entry {r[0]}")
        if not isinstance(entry, dict):
            return None
        # `/jobs` sorts and subtracts these: a damaged one is read as unknown, not a TypeError
        times = [v if isinstance(v, int) else None for v in r[4:7]]
        owner = r[7] if isinstance(r[7], str) and r[7] else DEFAULT_OWNER
        return HistoryRecord(r[0], entry, r[2], r[3], times[0] or 0, times[1], times[2] or 0, owner, r[8] or None,
                             r[9] or None)

    def history_record(self, prompt_id: str) -> HistoryRecord | None:
        with self._lock:
            r = self.db.execute(
                "SELECT prompt_id, entry, status, number, create_ms, start_ms, end_ms, owner, retry_of, retried_as"
                " FROM history WHERE prompt_id=?",
                (prompt_id,)).fetchone()
        return self._record(r) if r else None

    def history_ids(self, owner: str) -> list[str]:
        """The ids of `owner`'s history entries, oldest first."""
        with self._lock:
            return [r[0] for r in self.db.execute("SELECT prompt_id FROM history WHERE owner=? ORDER BY seq",
                                                  (owner,))]

    def history_owner(self, prompt_id: str) -> str | None:
        with self._lock:
            row = self.db.execute("SELECT owner FROM history WHERE prompt_id=?", (prompt_id,)).fetchone()
        return row[0] if row else None

    def delete_history(self, prompt_ids: Iterable[str]) -> None:
        with self._lock:
            self.db.executemany("DELETE FROM history WHERE prompt_id=?", [(pid,) for pid in prompt_ids])

    def clear_history(self) -> None:
        with self._lock:
            self.db.execute("DELETE FROM history")

    def history_count(self) -> int:
        with self._lock:
            return self.db.execute("SELECT COUNT(*) FROM history").fetchone()[0]
