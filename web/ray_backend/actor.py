"""`WorkerActor`: `WorkerRuntime` as a Ray actor. Its methods are coroutines, so Ray runs it as
an async actor: `interrupt`, `free` and `describe` reach it while `run` streams a prompt."""
from __future__ import annotations

import ray

from web.ray_backend.runtime import WorkerRuntime

# max_restarts=0: a dead worker is replaced by the dispatcher, which also decides what happens
# to its prompt (re-queued once); Ray restarting it behind our back would hide the failure.
WorkerActor = ray.remote(max_restarts=0, max_task_retries=0)(WorkerRuntime)
