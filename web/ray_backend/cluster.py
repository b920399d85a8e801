"""Joining the Ray cluster (or starting a local instance) for the dispatcher, and telling whether
its GCS (the head's control store) still answers.

main.py connects before it serves (`connect` on the main thread): Ray installs its own SIGINT /
SIGTERM handlers when it starts, and the server's, installed afterwards, must win so that
SIGTERM still shuts the server down cleanly. A reconnect later (Ray went away) restores the
handlers that were in place before it.

Surviving a Ray restart: Ray ends a driver process whose GCS has been unreachable for
`gcs_rpc_server_reconnect_timeout_s` (60 s by default), and the server is that driver. So the
driver joins a cluster with that limit set far away (`DRIVER_GCS_TIMEOUT_S`); the dispatcher probes
the GCS itself (`gcs_reachable`) and, when it stops answering, disconnects (`ray.shutdown`) and
joins again once it answers. A restarted head without GCS fault tolerance is a new cluster, so
joining again is the only way back in any case.
"""
from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import ray

from web.config import RaySettings

GCS_TIMEOUT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
DRIVER_GCS_TIMEOUT_S = 7 * 24 * 3600
PROBE_TIMEOUT_S = 2.0

_started_here = False  # this process started the Ray instance (so it shuts it down)
_gcs_address: str | None = None  # host:port of the GCS last joined (probed by the dispatcher)
_resources: dict[str, float] = {}  # the cluster's resources when joined


def connect(settings: RaySettings) -> None:
    """Join `settings.address` (or start a local instance); no-op when connected. Blocking.
    Raises ConnectionError at once when the cluster's GCS does not accept connections (joining
    an absent GCS would wait for it as long as the driver's GCS limit)."""
    global _started_here, _gcs_address, _resources
    if ray.is_initialized():
        return
    if settings.address is not None:
        address = probe_address(settings.address)
        if address is not None and not gcs_reachable_blocking(address):
            raise ConnectionError(f"Ray's GCS at {address} does not accept connections")
    handlers = python_signal_handlers()
    options = dict(settings.init_options)
    options.setdefault("include_dashboard", False)
    previous = os.environ.get(GCS_TIMEOUT_ENV)
    # Read by the driver's core worker at init; an operator's value wins. Not for an instance
    # of our own: its processes would inherit it (and outlive a dead GCS for as long), and the
    # dispatcher leaves a dead one well within Ray's own limit.
    raised = previous is None and settings.address is not None
    if raised:
        os.environ[GCS_TIMEOUT_ENV] = str(DRIVER_GCS_TIMEOUT_S)
    try:
        if settings.address is None:
            # A Ray instance of our own, for this machine only: loopback, as the server's default.
            options.setdefault("_node_ip_address", "127.0.0.1")
            ray.init(**options)
            _started_here = True
        else:
            ray.init(address=settings.address, **options)
    finally:
        if raised:
            os.environ.pop(GCS_TIMEOUT_ENV, None)
        restore_signal_handlers(handlers)
    _gcs_address = _joined_gcs_address()
    # Read now, while the GCS is known to answer: a synchronous GCS call made later, after the
    # GCS died, waits for it and aborts the process if a new cluster answers at the same address.
    _resources = dict(ray.cluster_resources())


def disconnect() -> None:
    """Leave Ray; an instance this process started is ended with it, including the processes
    Ray itself leaves behind when its GCS died first (its agents outlive their raylet then)."""
    global _started_here
    ours = ray_descendants() if _started_here else []
    ray.shutdown()
    if _started_here:
        _kill_survivors(ours)
    _started_here = False


def ray_descendants(root: int | None = None) -> list[tuple[int, bytes]]:
    """(pid, cmdline) of the Ray processes under `root` (this process): Linux's /proc, else none."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    root = root or os.getpid()
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    wanted, found = {root}, []
    changed = True
    while changed:  # the descendants, whatever order /proc lists them in
        changed = False
        for pid, parent in parents.items():
            if parent in wanted and pid not in wanted:
                wanted.add(pid)
                changed = True
    for pid in wanted - {root}:
        try:
            cmdline = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::") or b"/ray/" in cmdline:  # Ray's workers, agents, raylet, GCS
            found.append((pid, cmdline))
    return found


def _kill_survivors(processes: list[tuple[int, bytes]]) -> None:
    for pid, cmdline in processes:
        try:
            if (Path("/proc") / str(pid) / "cmdline").read_bytes() == cmdline:  # the same process still
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def resources() -> dict[str, float]:
    """The cluster's total resources (`ray.cluster_resources()`) when this process joined."""
    return dict(_resources)


def started_here() -> bool:
    return _started_here


def gcs_address() -> str | None:
    """host:port of the GCS this process joined last (None: unknown, e.g. a ray:// client)."""
    return _gcs_address


def probe_address(address: str) -> str | None:
    """The host:port to probe before joining `address`: itself when it is one, the GCS joined
    last for `auto`, None for a `ray://` client address (Ray Client reports its own errors)."""
    if address.startswith("ray://"):
        return None
    if address == "auto":
        return _gcs_address
    return address


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def gcs_reachable_blocking(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    import socket

    try:
        with socket.create_connection(_split(address), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


async def gcs_reachable(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the GCS at host:port accepts a TCP connection (on the loop, without blocking it)."""
    try:
        host, port = _split(address)
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, ValueError, asyncio.TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


def _joined_gcs_address() -> str | None:
    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 -- a Ray Client connection has none to give
        return None


def python_signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_signal_handlers(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)
