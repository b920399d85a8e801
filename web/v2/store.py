"""What `/api/v2` must remember beyond the queue and the history (web/store.py), in the same
SQLite file, so that it survives a restart as the queue does:

  api_v2_jobs     one row per job submitted or cancelled through v2: its idempotency key (unique:
                  keys are single-use, as the v2 contract says), a digest of the request body (to
                  tell a resend from a different request under a reused key), the format it was
                  submitted in (`api`, or `save` for an editor workflow, kept verbatim), its labels,
                  and when a pending job was cancelled (it then has no history entry)
  api_v2_outputs  (job, output file) -> asset id, so a job's outputs keep the same ids on every
                  read when the worker did not register them itself (--enable-assets off)

Methods are short transactions behind one lock; safe from the loop and from worker threads.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from web.sqlite_db import SqliteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_v2_jobs (
    id               TEXT PRIMARY KEY,
    created_ms       INTEGER NOT NULL,
    idempotency_key  TEXT UNIQUE,
    body_digest      TEXT,
    format           TEXT NOT NULL DEFAULT 'api',
    save_workflow    TEXT,
    labels           TEXT NOT NULL DEFAULT '{}',
    canceled_ms      INTEGER
);
CREATE TABLE IF NOT EXISTS api_v2_outputs (
    job_id    TEXT NOT NULL,
    item_key  TEXT NOT NULL,
    asset_id  TEXT NOT NULL,
    PRIMARY KEY (job_id, item_key)
);
"""


@dataclass(frozen=True)
class V2Job:
    """A job's v2 row."""

    id: str
    created_ms: int
    idempotency_key: str | None
    body_digest: str | None
    format: str  # "api" | "save"
    save_workflow: dict | None
    labels: dict[str, str]
    canceled_ms: int | None


class V2Store(SqliteDatabase):
    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA, "the v2 store")

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(self, job_id: str, created_ms: int, *, idempotency_key: str | None, body_digest: str | None,
                fmt: str, save_workflow: dict | None, labels: dict[str, str]) -> None:
        with self._lock:
            self.db.execute(
                "INSERT INTO api_v2_jobs (id, created_ms, idempotency_key, body_digest, format, save_workflow, labels)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, created_ms, idempotency_key, body_digest, fmt,
                 json.dumps(save_workflow) if save_workflow is not None else None, json.dumps(labels)))

    def job(self, job_id: str) -> V2Job | None:
        with self._lock:
            row = self.db.execute(f"SELECT {_COLUMNS} FROM api_v2_jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row) if row else None

    def job_by_key(self, key: str) -> V2Job | None:
        with self._lock:
            row = self.db.execute(f"SELECT {_COLUMNS} FROM api_v2_jobs WHERE idempotency_key = ?", (key,)).fetchone()
        return _job(row) if row else None

    def jobs(self, ids: list[str]) -> dict[str, V2Job]:
        out: dict[str, V2Job] = {}
        with self._lock:
            for start in range(0, len(ids), 500):
                part = ids[start:start + 500]
                rows = self.db.execute(f"SELECT {_COLUMNS} FROM api_v2_jobs WHERE id IN ({','.join('?' * len(part))})",
                                       part).fetchall()
                out.update((row[0], _job(row)) for row in rows)
        return out

    def canceled_jobs(self) -> list[V2Job]:
        """Jobs cancelled through v2 while pending (they have no history entry)."""
        with self._lock:
            rows = self.db.execute(f"SELECT {_COLUMNS} FROM api_v2_jobs WHERE canceled_ms IS NOT NULL").fetchall()
        return [_job(row) for row in rows]

    def mark_canceled(self, job_id: str, created_ms: int, canceled_ms: int) -> None:
        """Record that a pending job was removed by a v2 cancel (a row is made for a job that was
        submitted some other way)."""
        with self._lock:
            self.db.execute("INSERT INTO api_v2_jobs (id, created_ms, canceled_ms) VALUES (?, ?, ?) "
                            "ON CONFLICT(id) DO UPDATE SET canceled_ms = excluded.canceled_ms",
                            (job_id, created_ms, canceled_ms))

    # -- outputs ------------------------------------------------------------------------------
    def output_asset(self, job_id: str, item_key: str) -> str | None:
        with self._lock:
            row = self.db.execute("SELECT asset_id FROM api_v2_outputs WHERE job_id = ? AND item_key = ?",
                                  (job_id, item_key)).fetchone()
        return row[0] if row else None

    def set_output_asset(self, job_id: str, item_key: str, asset_id: str) -> None:
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO api_v2_outputs (job_id, item_key, asset_id) VALUES (?, ?, ?)",
                            (job_id, item_key, asset_id))


_COLUMNS = "id, created_ms, idempotency_key, body_digest, format, save_workflow, labels, canceled_ms"


def _json(text: Any, default: Any) -> Any:
    if not isinstance(text, str):
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def _job(row: tuple) -> V2Job:
    labels = _json(row[6], {})
    labels = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(labels, dict) else {}
    workflow = _json(row[5], None)
    return V2Job(row[0], int(row[1] or 0), row[2], row[3], row[4] if row[4] in ("api", "save") else "api",
                 workflow if isinstance(workflow, dict) else None, labels, row[7])
