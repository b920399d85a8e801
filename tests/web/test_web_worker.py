"""The queue worker (web/worker.py) works from the server parts it is given, and POST /free's
flags act on the memory manager's `free_all` and the executor's caches."""
from __future__ import annotations

from web.worker import FreeRequest, QueueWorker, apply_free


class _Memory:
    def __init__(self) -> None:
        self.freed = 0

    def free_all(self) -> int:
        self.freed += 1
        return 0


class _Executor:
    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


def test_free_unloads_through_free_all_and_drops_the_caches():
    memory, executor = _Memory(), _Executor()
    apply_free(executor, memory, FreeRequest(unload_models=True))
    assert (memory.freed, executor.resets) == (1, 0)
    apply_free(executor, memory, FreeRequest(free_memory=True))
    assert (memory.freed, executor.resets) == (2, 1)
    apply_free(executor, None, FreeRequest(unload_models=True, free_memory=True))  # no memory manager
    assert executor.resets == 2


class _Queue:
    running = None


def test_an_idle_worker_frees_at_once_and_reports_whether_it_was_started():
    memory, executor = _Memory(), _Executor()
    worker = QueueWorker(_Queue(), hub=None, executor=executor, store=None, memory=memory)
    assert not worker.started
    worker.request_free(FreeRequest(unload_models=True))
    assert memory.freed == 1 and worker.free_request is None
