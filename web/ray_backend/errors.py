"""Typed errors of the Ray backend."""
from __future__ import annotations


class RayBackendError(RuntimeError):
    """Base of the Ray backend's errors."""


class RayUnavailableError(RayBackendError):
    """Ray is not installed, or the cluster cannot be reached."""


class WorkerLostError(RayBackendError):
    """The worker actor running a prompt died (actor or node failure) before the prompt ended."""


class WorkerStreamError(RayBackendError):
    """A worker's event stream ended without the prompt's outcome."""


class WorkerExecutorError(RayBackendError):
    """The executor failed outright on a worker (a bug, not a node error); carries the worker's
    exception type and traceback."""

    def __init__(self, message: str, exception_type: str, traceback: list[str]) -> None:
        super().__init__(message)
        self.exception_type = exception_type
        self.worker_traceback = traceback
