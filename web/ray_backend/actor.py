"""`WorkerActor`: `WorkerRuntime` as a Ray actor. Its methods are coroutines, so Ray runs it as
an async actor: `interrupt`, `free`, `ping` and `describe` reach it while `run` streams a prompt."""
from __future__ import annotations

import ray

from web.ray_backend.runtime import WorkerRuntime


class RayWorkerRuntime(WorkerRuntime):
    """`WorkerRuntime` that also names the Ray node it runs on (for /system_stats)."""

    async def describe(self) -> dict:
        return {**await super().describe(), "node_id": ray.get_runtime_context().get_node_id()}


# max_restarts=0: a dead worker is replaced by the dispatcher, which also decides what happens
# to its prompt (re-queued once); Ray restarting it behind our back would hide the failure.
WorkerActor = ray.remote(max_restarts=0, max_task_retries=0)(RayWorkerRuntime)
