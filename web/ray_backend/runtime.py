"""One worker: its own environment (folders, memory manager), registry with the same node packs
as the server (built-ins + custom_nodes of the same base dir and config), and executor with its
own output cache. Plain Python: `actor.py` makes it a Ray actor; nothing here imports Ray.

`run` is an async generator (a Ray streaming generator on the actor): it yields
`("events", [Event | PackMessage, ...])` batches as the executor emits them (packs' own
messages among them, web/ray_backend/worker_state.py), `("files", [FileBlob, ...])`
ahead of a batch with an `executed` event (what the prompt wrote so far), then one
`("done", ExecutionOutcome, [FileBlob, ...])` (the rest) or `("crash", message, type, traceback)`.
`interrupt` and `free` are separate calls that reach it while a prompt runs (the actor is async).
"""
from __future__ import annotations

import asyncio
import importlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator

from graph.events import EXECUTED, PROGRESS_STATE, Event
from web.config import ServerConfig
from web.ray_backend.files import FileBlob, changed_files, snapshot, write_files
from web.ray_backend.worker_state import PackMessage, WorkerServerState
from web.worker import FreeRequest, apply_free

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptJob:
    """What a worker needs to run one prompt."""

    prompt_id: str
    prompt: dict
    outputs: list[str]
    extra_data: dict
    inputs: list[FileBlob] = field(default_factory=list)
    client_id: str | None = None  # who submitted it (PromptServer.instance.client_id on the worker)


FOLDER_PREFIX = "comfy-ray-"
OWNER_FILE = ".owner"  # locked (flock) by the worker using the folder, for as long as it lives


def worker_config(config: ServerConfig, name: str) -> ServerConfig:
    """The server's config with the worker's own input/output/temp/user folders (unless
    --ray-shared-output: then the server's, given as paths in `config`)."""
    if config.ray is not None and config.ray.shared_output:
        return config
    root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{name}-"))
    return replace(config, output_dir=root / "output", input_dir=root / "input", temp_dir=root / "temp",
                   user_dir=root / "user")


def hold_folder(root: Path) -> int:
    """Lock `root`'s owner file for this process's life (the lock goes with the process, however
    it ends); returns the file descriptor to keep open."""
    import fcntl

    fd = os.open(root / OWNER_FILE, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def remove_abandoned_folders(parent: Path, keep: Path | None = None) -> list[Path]:
    """Remove the worker folders under `parent` whose worker is gone: their owner file can be
    locked. A worker killed on a machine other than the server's cannot be cleaned up by the
    server, so the next worker starting there does it. A folder without an owner file (another
    worker is making it right now) is left alone."""
    import fcntl

    removed = []
    for folder in parent.glob(f"{FOLDER_PREFIX}*"):
        owner = folder / OWNER_FILE
        if folder == keep or not owner.is_file():
            continue
        try:
            fd = os.open(owner, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its worker lives
            continue
        finally:
            os.close(fd)  # (also lets go of the lock, if taken)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def portable_batch(events: list[Any]) -> list[Event | PackMessage]:
    """Events as plain `Event`s that pickle (a lazy `progress_state` holds the executor's lock),
    with runs of consecutive `progress_state` maps cut to their last: the server's coalescer
    would replace each by the next anyway, and every map is complete. Packs' messages
    (`PackMessage`) stay as they are, in their place."""
    out: list[Event | PackMessage] = []
    for event in events:
        if isinstance(event, PackMessage):
            out.append(event)
            continue
        if event.type == PROGRESS_STATE and out and _type_of(out[-1]) == PROGRESS_STATE:
            out.pop()
        out.append(event if type(event) is Event else Event(event.type, event.data))
    return out


def _type_of(message: Any) -> str | None:
    return getattr(message, "type", None)  # (a PackMessage has none)


def _names_an_output(batch: list[Any]) -> bool:
    return any(_type_of(message) == EXECUTED for message in batch)


def _factory_registry(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)()


class WorkerRuntime:
    def __init__(self, config: ServerConfig, name: str) -> None:
        import compat
        from graph.registry import Registry
        from web.bootstrap import build_environment, build_executor, build_registry
        from web.comfy_args import comfy_args

        self.name = name
        self._running: str | None = None
        self._interrupt: threading.Event | None = None
        self._free_request: FreeRequest | None = None
        self.config = worker_config(config, name)
        # The folders this worker made for itself (removed by `close`); None with shared folders.
        self.own_root = self.config.user_dir.parent if self.config is not config else None
        if self.own_root is not None:
            self._owner_fd = hold_folder(self.own_root)
            for folder in remove_abandoned_folders(self.own_root.parent, keep=self.own_root):
                log.info("%s removed the folder of a worker that is gone: %s", name, folder)
        self.env, custom_dirs = build_environment(self.config)
        factory = self.config.ray.registry_factory if self.config.ray is not None else None
        self.server_state = WorkerServerState(self.config, self._interrupt_running)
        registry = _factory_registry(factory) if factory else Registry()
        session = compat.install(self.env, registry, comfy_args=comfy_args(self.config))
        session.state = self.server_state  # before the packs load: what they send goes through it
        if not factory:
            registry, _packs = build_registry(self.config, custom_dirs, compat_session=session)
        self.registry = registry
        self.executor = build_executor(self.config, registry, self.env, session)

    @property
    def folders(self) -> dict[str, Path]:
        return {"input": self.env.input_dir, "output": self.env.output_dir, "temp": self.env.temp_dir}

    async def describe(self) -> dict:
        """Who this worker is and what it runs on (for /system_stats)."""
        from web.routes_info import devices

        return {"name": self.name, "host": socket.gethostname(), "pid": os.getpid(),
                "folder": str(self.own_root) if self.own_root is not None else None,
                "node_types": len(self.registry), "running": self._running,
                "devices": devices(cpu_only=self.config.cpu)}

    async def ping(self) -> str | None:
        """The dispatcher's liveness check of an idle worker: the prompt it runs (None: idle)."""
        return self._running

    async def close(self) -> None:
        """Remove the worker's own folders (the dispatcher calls this before ending the actor;
        a worker that dies leaves them, for the server or the next worker on its machine)."""
        if self.own_root is not None:
            shutil.rmtree(self.own_root, ignore_errors=True)
            os.close(self._owner_fd)
            self.own_root = None

    async def interrupt(self, prompt_id: str | None = None) -> bool:
        return self._interrupt_running(prompt_id)

    def _interrupt_running(self, prompt_id: str | None = None) -> bool:
        interrupt = self._interrupt
        if interrupt is None or (prompt_id is not None and prompt_id != self._running):
            return False
        interrupt.set()
        return True

    async def free(self, unload_models: bool = False, free_memory: bool = False) -> None:
        """POST /free: now when idle, else after the running prompt (as the embedded worker)."""
        request = FreeRequest(unload_models=unload_models, free_memory=free_memory)
        if self._running is None:
            apply_free(self.executor, self.env.memory, request)
        else:
            self._free_request = request

    async def run(self, job: PromptJob) -> AsyncIterator[tuple]:
        shared = self.config.ray is not None and self.config.ray.shared_output
        if not shared:
            write_files(job.inputs, self.folders)
        results = {"output": self.env.output_dir, "temp": self.env.temp_dir}
        before = {} if shared else snapshot(results)
        events: asyncio.Queue = asyncio.Queue()
        self._running, self._interrupt = job.prompt_id, threading.Event()
        self.server_state.open(job.prompt_id, job.client_id, events.put_nowait)
        try:
            task = asyncio.ensure_future(self.executor.execute(
                job.prompt, job.prompt_id, outputs=list(job.outputs), extra_data=job.extra_data,
                sink=events.put_nowait, interrupt=self._interrupt))
            while True:
                getter = asyncio.ensure_future(events.get())
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    break
                batch = [getter.result()]
                while not events.empty():
                    batch.append(events.get_nowait())
                if not shared and _names_an_output(batch):
                    # The files a node wrote go ahead of its `executed` event, so that they are on
                    # the server when the client asks for them (/view), as in embedded mode.
                    files, before = changed_files(results, before), snapshot(results)
                    if files:
                        yield ("files", files)
                yield ("events", portable_batch(batch))
            rest = []
            while not events.empty():
                rest.append(events.get_nowait())
            if rest and not shared and _names_an_output(rest):
                files, before = changed_files(results, before), snapshot(results)
                if files:
                    yield ("files", files)
            if rest:
                yield ("events", portable_batch(rest))
            try:
                outcome = task.result()
            except Exception as exc:  # noqa: BLE001 -- reported to the server as the prompt's error
                log.exception("prompt %s: executor failed on %s", job.prompt_id, self.name)
                yield ("crash", str(exc), f"{type(exc).__module__}.{type(exc).__qualname__}",
                       traceback.format_exception(exc))
                return
            files = [] if shared else changed_files(results, before)
            yield ("done", outcome, files)
        finally:
            self.server_state.close()
            self._running, self._interrupt = None, None
            if self._free_request is not None:
                request, self._free_request = self._free_request, None
                apply_free(self.executor, self.env.memory, request)
