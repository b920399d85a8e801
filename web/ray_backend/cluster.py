"""Joining the Ray cluster (or starting a local instance) for the dispatcher.

main.py connects before it serves (`connect` on the main thread): Ray installs its own SIGINT /
SIGTERM handlers when it starts, and the server's, installed afterwards, must win so that
SIGTERM still shuts the server down cleanly. A reconnect later (Ray went away) restores the
handlers that were in place before it.
"""
from __future__ import annotations

import signal
import threading
from typing import Any

import ray

from web.config import RaySettings

_started_here = False  # this process started the Ray instance (so it shuts it down)


def connect(settings: RaySettings) -> None:
    """Join `settings.address` (or start a local instance); no-op when connected. Blocking."""
    global _started_here
    if ray.is_initialized():
        return
    handlers = python_signal_handlers()
    options = dict(settings.init_options)
    options.setdefault("include_dashboard", False)
    if settings.address is None:
        # A Ray instance of our own, for this machine only: loopback, as the server's default.
        options.setdefault("_node_ip_address", "127.0.0.1")
        ray.init(**options)
        _started_here = True
    else:
        ray.init(address=settings.address, **options)
    restore_signal_handlers(handlers)


def disconnect() -> None:
    global _started_here
    ray.shutdown()
    _started_here = False


def started_here() -> bool:
    return _started_here


def python_signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_signal_handlers(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)
