"""Durable queue and history: one SQLite database (standard library, WAL) in the user directory.

Two tables:
  queue    every prompt accepted and not finished: `state` is 'pending' or 'running'
  history  finished prompts, ComfyUI's history entry as JSON, in insertion order (`seq`)

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
from web.queue_item import MAX_QUEUE_NUMBER, QueueItem, now_ms, public_extra_data

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
"""


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
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
        row = (item.prompt_id, item.number, encode_json(item.prompt), encode_json(public_extra_data(item.extra_data)),
               encode_json(item.outputs), item.create_time)
        with self._lock:
            self.db.execute(
                "INSERT OR REPLACE INTO queue (prompt_id, number, prompt, extra_data, outputs, state, create_ms)"
                " VALUES (?, ?, ?, ?, ?, 'pending', ?)", row)

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
                "SELECT number, prompt_id, prompt, extra_data, outputs, create_ms FROM queue"
                " WHERE state='pending' ORDER BY number, prompt_id").fetchall()
        items = []
        for number, prompt_id, prompt, extra, outputs, create_ms in rows:
            item = self._item(number, prompt_id, prompt, extra, outputs, create_ms)
            if item is not None:
                items.append(item)
        return items

    @staticmethod
    def _item(number: Any, prompt_id: str, prompt: Any, extra: Any, outputs: Any, create_ms: Any) -> QueueItem | None:
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
                         outputs=[str(o) for o in outputs], create_time=create_ms)

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
                "SELECT number, prompt_id, prompt, extra_data, outputs, create_ms, start_ms FROM queue"
                " WHERE state='running'").fetchall()
        recovered = []
        for number, prompt_id, prompt, extra, outputs, create_ms, start_ms in rows:
            item = self._item(number, prompt_id, prompt, extra, outputs, create_ms)
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
        older entry with the same id, which then moves to the end)."""
        text = encode_json(entry)  # before the lock, as in `add_pending`
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM queue WHERE prompt_id=?", (item.prompt_id,))
                db.execute("DELETE FROM history WHERE prompt_id=?", (item.prompt_id,))
                db.execute(
                    "INSERT INTO history (prompt_id, entry, status, number, create_ms, start_ms, end_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (item.prompt_id, text, status, item.number, item.create_time, start_ms, end_ms),
                )
                excess = db.execute("SELECT COUNT(*) FROM history").fetchone()[0] - self.max_history
                if excess > 0:
                    db.execute("DELETE FROM history WHERE seq IN (SELECT seq FROM history ORDER BY seq LIMIT ?)",
                               (excess,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def history(self, max_items: int | None = None, offset: int = -1) -> dict[str, dict]:
        """ComfyUI's windowing: offset < 0 with max_items gives the last max_items entries;
        otherwise from `offset`, at most `max_items`; an offset past the end gives {}."""
        with self._lock:
            total = self.db.execute("SELECT COUNT(*) FROM history").fetchone()[0]
            if offset < 0 and max_items is not None:
                offset = max(0, total - max_items)
            offset = max(offset, 0)
            if offset >= total:
                return {}
            limit = -1 if max_items is None else max_items
            rows = self.db.execute("SELECT prompt_id, entry FROM history ORDER BY seq LIMIT ? OFFSET ?",
                                   (limit, offset)).fetchall()
        loaded = ((pid, _loads(entry, f"history entry {pid}")) for pid, entry in rows)
        return {pid: entry for pid, entry in loaded if isinstance(entry, dict)}

    def history_entry(self, prompt_id: str) -> dict | None:
        with self._lock:
            row = self.db.execute("SELECT entry FROM history WHERE prompt_id=?", (prompt_id,)).fetchone()
        entry = _loads(row[0], f"history entry {prompt_id}") if row else None
        return entry if isinstance(entry, dict) else None

    def history_records(self) -> list[HistoryRecord]:
        """Every finished prompt, oldest first (for /jobs)."""
        with self._lock:
            rows = self.db.execute(
                "SELECT prompt_id, entry, status, number, create_ms, start_ms, end_ms FROM history ORDER BY seq"
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
        return HistoryRecord(r[0], entry, r[2], r[3], times[0] or 0, times[1], times[2] or 0)

    def history_record(self, prompt_id: str) -> HistoryRecord | None:
        with self._lock:
            r = self.db.execute(
                "SELECT prompt_id, entry, status, number, create_ms, start_ms, end_ms FROM history WHERE prompt_id=?",
                (prompt_id,)).fetchone()
        return self._record(r) if r else None

    def delete_history(self, prompt_ids: Iterable[str]) -> None:
        with self._lock:
            self.db.executemany("DELETE FROM history WHERE prompt_id=?", [(pid,) for pid in prompt_ids])

    def clear_history(self) -> None:
        with self._lock:
            self.db.execute("DELETE FROM history")

    def history_count(self) -> int:
        with self._lock:
            return self.db.execute("SELECT COUNT(*) FROM history").fetchone()[0]
