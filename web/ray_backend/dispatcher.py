"""`RayDispatcher`: the embedded `QueueWorker`'s interface (start / stop / request_free /
run_item), running prompts on Ray worker actors, several at once (one per actor).

The server keeps the queue (web/prompt_queue.py: several running items, keyed by prompt id),
the history and the routing: events streamed back from a worker go through the same
`PromptRun` / `PromptRouting` code as the embedded worker's, so a client sees the same frames.

A prompt waits in the queue until a worker is free; then `placement.choose_worker` picks the
worker. A worker that dies mid-prompt is replaced; its prompt is queued again once
(`MAX_REQUEUES`), and a second loss is recorded as an `execution_error` naming the worker, so a
prompt is never lost and gets exactly one history entry.

Every `HEALTH_INTERVAL_S` the dispatcher probes the GCS and pings its idle workers (`_watch`): a
worker that died while idle is replaced before a prompt is sent to it, and a GCS that stopped
answering (the head died or is restarting) means Ray is gone: every running prompt counts as
having lost its worker, the driver disconnects (so that Ray does not end the server process,
cluster.py), and the dispatcher joins again, retrying with back-off, before it takes the next
prompt. Prompts queued meanwhile wait in the durable queue.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import socket
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

from graph.events import EXECUTED, Event
from graph.progress import ProgressPacing
from web.collector import CollectorPacing, release_in_pieces
from web.prompt_routing import PromptRouting
from web.ray_backend import cluster
from web.prompt_run import PromptRun, RunResult
from web.queue_item import QueueItem, now_ms
from web.ray_backend.errors import WorkerExecutorError, WorkerLostError, WorkerStreamError
from web.ray_backend.files import input_files, rename_outputs, write_files
from web.ray_backend.placement import DEAD, READY, STARTING, WorkerSlot, choose_worker, loader_keys
from web.ray_backend.runtime import FOLDER_PREFIX, PromptJob
from web.ray_backend.worker_state import PREVIEW as PACK_PREVIEW, PackMessage
from web.worker import FreeRequest

if TYPE_CHECKING:  # annotations only
    from web.state import AppState

log = logging.getLogger(__name__)

MAX_REQUEUES = 1
INTERRUPT_POLL_S = 0.05  # how often a running prompt's interrupt flag is forwarded to its worker
# Joining again after Ray went away: a refused probe costs nothing, so the wait stays short.
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
RECONNECT_LOG_EVERY = 12  # of the attempts that fail (once a minute at 5 s), so a long outage does not flood the log
HEALTH_INTERVAL_S = 2.0  # how often the GCS is probed and idle workers are pinged
PING_TIMEOUT_S = 10.0


class RayGoneError(ConnectionError):
    """Ray's GCS stopped answering while a prompt ran (the dispatcher reconnects)."""


class RayDispatcher(PromptRouting):
    def __init__(self, state: "AppState", *, progress_pacing: ProgressPacing = ProgressPacing()) -> None:
        if state.config.ray is None:
            raise ValueError("RayDispatcher needs ServerConfig.ray (--ray)")
        self.state = state
        self.queue, self.hub, self.store = state.queue, state.hub, state.store
        self.settings = state.config.ray
        self.preview_size = state.config.preview_size
        self.progress_pacing = progress_pacing
        self.slots: list[WorkerSlot] = []
        self._task: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None
        self._spawning: set[asyncio.Task] = set()
        self._ray_gone = asyncio.Event()  # set when the GCS stopped answering; cleared on rejoin
        self._losses = 0  # how many times Ray went away (a run compares it with its start's)
        self._gpu = False  # whether the cluster has GPUs (read once per connection)
        self._runs: dict[str, asyncio.Task] = {}
        self._requeues: dict[str, int] = {}
        self._changed = asyncio.Event()  # a worker became free, ready or dead
        self.worker_config = self._worker_config()
        # ended prompts' data being taken apart in worker threads (tests wait for them)
        self.releasing: set[asyncio.Future] = set()
        # full collections after a prompt is stored, not in the middle of one (as the embedded
        # worker); a prompt's data being freed counts as busy: a timed pass would walk it
        self.collector = CollectorPacing(lambda: bool(self._runs) or bool(self.releasing))

    def _worker_config(self) -> Any:
        config, env = self.state.config, self.state.env
        if self.settings.shared_output:  # the server's folders, as resolved paths
            return replace(config, output_dir=env.output_dir, input_dir=env.input_dir, temp_dir=env.temp_dir)
        return config

    # -- the QueueWorker interface -----------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="ray-dispatcher")
        self._watcher = loop.create_task(self._watch(), name="ray-watch")
        self.collector.start()

    @property
    def started(self) -> bool:
        return self._task is not None

    async def stop(self, timeout: float = 10.0) -> None:
        """Take no more prompts; interrupt the running ones and let them record themselves,
        waiting at most `timeout` seconds; then end the actors (and Ray, if it started it)."""
        self.collector.stop()
        for task in (self._task, self._watcher, *self._spawning):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = self._watcher = None
        self.queue.interrupt(None)
        runs = set(self._runs.values())
        if runs:
            done, pending = await asyncio.wait(runs, timeout=timeout)
            for task in pending:
                task.cancel()
        live = [slot.handle for slot in self.slots if slot.handle is not None]
        started = [slot.handle for slot in self.slots if slot.handle is not None and slot.state == READY]
        if started:  # their own folders first, then the actors (one still waiting for resources has none)
            closing = [asyncio.wrap_future(handle.close.remote().future()) for handle in started]
            await asyncio.wait(closing, timeout=timeout)
        for handle in live:
            try:
                ray.kill(handle)
            except Exception:  # noqa: BLE001 -- already gone, or Ray is
                pass
        self.slots.clear()
        if cluster.started_here():
            await asyncio.get_running_loop().run_in_executor(None, cluster.disconnect)

    def request_free_flags(self, *, unload_models: bool = False, free_memory: bool = False) -> None:
        self.request_free(FreeRequest(unload_models=unload_models, free_memory=free_memory))

    def request_free(self, request: FreeRequest) -> None:
        """POST /free goes to every worker (each frees now, or after its running prompt)."""
        for slot in self.slots:
            if slot.state == READY:
                slot.handle.free.remote(request.unload_models, request.free_memory)

    def workers_info(self) -> list[dict]:
        """The workers for /system_stats: name, state, running prompt, host, devices."""
        return [{**slot.info, "name": slot.name, "state": slot.state, "running": slot.busy,
                 "prompts_run": slot.prompts_run, "generation": slot.generation} for slot in self.slots]

    def worker_of(self, prompt_id: str) -> WorkerSlot | None:
        """The slot running `prompt_id` (tests kill its actor), or None."""
        return next((s for s in self.slots if s.busy == prompt_id), None)

    # -- workers -----------------------------------------------------------------------------
    def _worker_count(self) -> int:
        if self.settings.workers is not None:
            return self.settings.workers
        return max(1, int(cluster.resources().get("GPU", 0)))

    async def _ensure_workers(self) -> None:
        loop = asyncio.get_running_loop()
        # Off the loop (joining blocks); the server's signal handlers are put back afterwards,
        # here on the loop's thread, in case starting Ray replaced them (cluster.py).
        handlers = cluster.python_signal_handlers()
        await loop.run_in_executor(None, cluster.connect, self.settings)
        cluster.restore_signal_handlers(handlers)
        # No synchronous GCS call here: the GCS may have died since we joined (cluster.py).
        self._gpu = "GPU" in cluster.resources() and not self.state.config.cpu
        if not self.slots:
            self.slots = [WorkerSlot(index, state=DEAD) for index in range(self._worker_count())]
        await asyncio.gather(*(self._spawn_tracked(slot) for slot in self.slots if slot.state == DEAD))
        if not any(slot.state == READY for slot in self.slots):
            raise WorkerLostError("no Ray worker actor could be started")

    async def _spawn_tracked(self, slot: WorkerSlot) -> None:
        task = asyncio.current_task()
        self._spawning.add(task)
        try:
            await self._spawn(slot)
        finally:
            self._spawning.discard(task)

    async def _spawn(self, slot: WorkerSlot) -> None:
        from web.ray_backend.actor import WorkerActor

        slot.state, slot.busy, slot.loaded, slot.info = STARTING, None, set(), {}
        slot.generation += 1
        generation = slot.generation
        options = {"num_gpus": 1, "num_cpus": 0} if self._gpu else {"num_cpus": 1}
        try:
            handle = WorkerActor.options(**options).remote(self.worker_config, slot.name)
            slot.handle = handle
            info = await handle.describe.remote()
        except (RayError, ConnectionError) as exc:
            if slot.generation == generation:
                log.error("Ray %s could not start: %s", slot.name, exc)
                slot.state, slot.handle = DEAD, None
                self._changed.set()
            return
        if slot.generation != generation:  # Ray went away meanwhile; this actor is not ours any more
            return
        slot.info, slot.state = info, READY
        log.info("Ray %s ready (pid %s on %s, node %s)", slot.name, info.get("pid"), info.get("host"),
                 info.get("node_id"))
        slot.forget()  # the successor has nothing loaded and no files yet
        self._changed.set()

    def _replace(self, slot: WorkerSlot) -> None:
        """A worker died: start its successor in the background (its prompt is handled by the
        caller), unless Ray itself is gone (then every worker starts again on rejoining)."""
        remove_dead_worker_folder(slot.info)
        slot.state, slot.handle = DEAD, None
        slot.forget()  # the successor has nothing loaded and no files yet
        self._changed.set()
        if not self._ray_gone.is_set():
            slot.state = STARTING  # now: `_run` must not start another one for this slot meanwhile
            asyncio.get_running_loop().create_task(self._spawn_tracked(slot), name=f"ray-respawn-{slot.index}")

    def _lose_ray(self, reason: str) -> None:
        """The GCS stopped answering: every worker counts as dead (running prompts see
        `RayGoneError`), and `_run` disconnects and joins again."""
        if self._ray_gone.is_set():
            return
        log.error("Ray is gone (%s); prompts wait in the queue until the dispatcher joins again", reason)
        self._ray_gone.set()
        self._losses += 1
        self._drop_all_workers()

    def _drop_all_workers(self) -> None:
        """Every slot dead, its actor no longer ours (Ray went away, or we leave it); each is
        started again on (re)joining."""
        for task in list(self._spawning):
            task.cancel()
        for slot in self.slots:
            slot.generation += 1  # a reply from the old actors is ignored
            remove_dead_worker_folder(slot.info)
            slot.state, slot.handle = DEAD, None
            slot.forget()
        self._changed.set()

    async def _watch(self) -> None:
        """Probe the GCS and ping idle workers every HEALTH_INTERVAL_S (see the module docstring)."""
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            if self._ray_gone.is_set() or not ray.is_initialized():
                continue
            if await self._gcs_answers():
                await asyncio.gather(*(self._ping(slot) for slot in self.slots if slot.free))

    async def _gcs_answers(self) -> bool:
        """Probe the GCS joined last; when it does not answer, Ray is gone (`_lose_ray`)."""
        address = cluster.gcs_address()
        if address is None or await cluster.gcs_reachable(address):
            return True
        self._lose_ray(f"its GCS at {address} does not accept connections")
        return False

    async def _ping(self, slot: WorkerSlot) -> None:
        handle, generation = slot.handle, slot.generation
        try:
            await asyncio.wait_for(asyncio.wrap_future(handle.ping.remote().future()), PING_TIMEOUT_S)
        except asyncio.TimeoutError:
            return  # busy or slow, not known dead: its next prompt will tell
        except RayActorError as exc:
            if slot.generation == generation and slot.free:
                log.error("Ray %s died while idle (%s); starting its successor", slot.name, type(exc).__name__)
                self._replace(slot)
        except (RayError, ConnectionError):
            return  # Ray itself: the GCS probe decides

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        attempt = 0
        while True:
            if self._ray_gone.is_set():
                await self._disconnect()
                self._ray_gone.clear()
            if not any(slot.state in (READY, STARTING) for slot in self.slots):
                try:
                    await self._ensure_workers()
                    attempt = 0
                except (RayError, ConnectionError, WorkerLostError, OSError) as exc:
                    delay = RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)]
                    if attempt % RECONNECT_LOG_EVERY == 0:
                        log.error("Ray is unavailable (%s); retrying every %.1f s or less", exc, RECONNECT_BACKOFF_S[-1])
                    attempt += 1
                    await self._disconnect()
                    await asyncio.sleep(delay)
                    continue
            if not any(slot.free for slot in self.slots):
                self._changed.clear()
                await self._changed.wait()
                continue
            item = await self._next_item()
            if item is None:  # Ray went away while we waited
                continue
            slot = choose_worker(self.slots, loader_keys(item.prompt))
            if slot is None:  # the free worker died while we waited for a prompt
                self.queue.requeue(item.prompt_id)
                continue
            slot.busy = item.prompt_id
            task = asyncio.get_running_loop().create_task(self._guarded(item, slot), name=f"ray-{item.prompt_id}")
            self._runs[item.prompt_id] = task
            item = None  # the run holds it; once it ends its data is freed in pieces (`_release`)

    async def _until_ray_gone(self, awaitable: Any) -> asyncio.Future:
        """Await `awaitable` as a task until it ends or Ray goes away, whichever comes first;
        returns the task, cancelled (and finished) when Ray went first."""
        task = asyncio.ensure_future(awaitable)
        gone = asyncio.ensure_future(self._ray_gone.wait())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task})  # (lets our own cancellation through, unlike `await task`)
        return task

    async def _next_item(self) -> QueueItem | None:
        """The next queued prompt, or None when Ray goes away first (`PromptQueue.get` takes
        nothing off the queue before its only wait, so cancelling it loses no prompt)."""
        getter = await self._until_ray_gone(self.queue.get())
        if getter.cancelled():
            return None
        item = getter.result()
        if self._ray_gone.is_set():  # taken at the moment Ray went: back in its place
            self.queue.requeue(item.prompt_id)
            return None
        return item

    async def _disconnect(self) -> None:
        """Leave Ray (the slots stay, dead, and are started again on rejoining)."""
        self._drop_all_workers()
        try:
            await asyncio.get_running_loop().run_in_executor(None, cluster.disconnect)
        except Exception:  # noqa: BLE001 -- nothing left to shut down
            log.exception("leaving Ray failed")

    async def _guarded(self, item: QueueItem, slot: WorkerSlot) -> None:
        try:
            await self.run_item(item, slot)
        except Exception:  # noqa: BLE001 -- the dispatcher must outlive any one prompt
            log.exception("prompt %s: the dispatcher failed while finishing it", item.prompt_id)
            if self.queue.contains(item.prompt_id) and self.queue.running_start(item.prompt_id) is not None:
                self.queue.task_done(item.prompt_id)
        finally:
            self._runs.pop(item.prompt_id, None)
            if slot.busy == item.prompt_id:
                slot.busy = None
            self._changed.set()
            if not self.queue.contains(item.prompt_id):  # ended, not queued again
                # its data goes in a worker thread and in pieces (freeing a 100 000-node prompt at
                # once held the event loop), then a full pass if one is due (web/worker.py)
                leftovers = [item.prompt, item.extra_data]
                item = None  # type: ignore[assignment]  # this frame's reference goes too
                self._release(leftovers)

    def _release(self, leftovers: list) -> None:
        released = asyncio.get_running_loop().run_in_executor(None, release_in_pieces, leftovers)
        self.releasing.add(released)

        def then(future: asyncio.Future) -> None:
            self.releasing.discard(future)
            if not future.cancelled() and future.exception() is not None:
                log.error("freeing a prompt's data failed", exc_info=future.exception())
            self.collector.quiet_point()

        released.add_done_callback(then)

    # -- one prompt --------------------------------------------------------------------------
    async def run_item(self, item: QueueItem, slot: WorkerSlot) -> None:
        hub, pid = self.hub, item.prompt_id
        hub.begin_prompt(item.client_id, pid)  # for reconnect catch-up
        run = PromptRun(self, item, start=self.queue.running_start(pid) or now_ms(), pacing=self.progress_pacing)
        interrupts = asyncio.get_running_loop().create_task(self._forward_interrupt(item, slot))
        losses = self._losses
        lost: BaseException | None = None
        try:
            result = await self._stream_while_ray_lives(item, slot, run)
            slot.loaded |= loader_keys(item.prompt)
            slot.prompts_run += 1
        except RayActorError as exc:
            lost = exc
        except RayTaskError as exc:  # the worker's stream raised (a bug there): the prompt's error
            log.error("prompt %s: the worker's stream failed: %s", pid, exc)
            result = run.failed(exc)
        except (RayError, ConnectionError) as exc:  # Ray itself went away: reconnect before the next prompt
            lost = exc
            self._lose_ray(f"{type(exc).__name__} while streaming prompt {pid}")
        except WorkerExecutorError as exc:
            result = run.failed(exc)
        except Exception as exc:  # noqa: BLE001 -- a broken stream must still end the prompt
            log.exception("prompt %s: the stream from %s failed", pid, slot.name)
            result = run.failed(exc)
        finally:
            interrupts.cancel()
        if lost is not None:
            log.error("prompt %s: %s died (%s)", pid, slot.name, type(lost).__name__)
            # A lost actor may be the first sign of a lost cluster: then every slot starts again
            # on rejoining, and no successor is asked of a GCS that is gone.
            if self._losses == losses and not self._ray_gone.is_set() and await self._gcs_answers():
                self._replace(slot)
            slot.busy = None
            requeued = self._requeues.get(pid, 0)
            if requeued < MAX_REQUEUES and not item.interrupt.is_set():
                self._requeues[pid] = requeued + 1
                run.abandon()
                self.queue.requeue(pid)
                hub.end_prompt(pid)
                log.warning("prompt %s queued again after losing its worker", pid)
                return
            result = run.failed(WorkerLostError(
                f"the Ray worker running this prompt died ({type(lost).__name__}: {lost}); "
                f"it had been queued again {requeued} time(s) after losing a worker before"))
        self._requeues.pop(pid, None)
        # encoded and written in a worker thread, as the embedded worker does: a big prompt's
        # entry is megabytes, which held the event loop (issue 34)
        await run.finish_async(result, self.store, self.queue)
        hub.end_prompt(pid)

    async def _stream_while_ray_lives(self, item: QueueItem, slot: WorkerSlot, run: PromptRun) -> RunResult:
        """`_stream`, given up with `RayGoneError` when Ray goes away meanwhile (a stream from a
        cluster whose GCS died may neither end nor fail)."""
        stream = await self._until_ray_gone(self._stream(item, slot, run))
        if stream.cancelled():
            raise RayGoneError(f"Ray went away while {slot.name} ran prompt {item.prompt_id}")
        return stream.result()

    async def _stream(self, item: QueueItem, slot: WorkerSlot, run: PromptRun) -> RunResult:
        env = self.state.env
        inputs = [] if self.settings.shared_output else input_files(item.prompt, env.input_dir, slot.sent_inputs)
        job = PromptJob(item.prompt_id, item.prompt, list(item.outputs), dict(item.extra_data), inputs,
                        item.client_id)
        stream = slot.handle.run.options(num_returns="streaming").remote(job)
        folders = {"output": env.output_dir, "temp": env.temp_dir}
        loop = asyncio.get_running_loop()
        renames: dict = {}  # files written under another name on the server (files.write_files)
        async for ref in stream:
            message = await ref
            kind = message[0]
            if kind == "events":
                for event in message[1]:
                    if isinstance(event, PackMessage):
                        self._deliver(event)
                        continue
                    if renames and event.type == EXECUTED and isinstance(event.data, dict):
                        event = Event(event.type, {**event.data,
                                                   "output": rename_outputs(event.data.get("output"), renames)})
                    run.sink(event)
            elif kind == "files":  # before the events that name them
                renames.update(await loop.run_in_executor(None, functools.partial(write_files, message[1], folders, slot.file_names)))
            elif kind == "done":
                outcome, files = message[1], message[2]
                if files:
                    renames.update(await loop.run_in_executor(None, functools.partial(write_files, files, folders, slot.file_names)))
                result = run.result_of(outcome)
                if renames:
                    result.ui_outputs = {node: rename_outputs(ui, renames) for node, ui in result.ui_outputs.items()}
                return result
            elif kind == "crash":
                raise WorkerExecutorError(message[1], message[2], message[3])
        raise WorkerStreamError(f"{slot.name} ended prompt {item.prompt_id}'s stream without its outcome")

    def _deliver(self, message: PackMessage) -> None:
        """What a pack's node sent on the worker (`PromptServer.instance.send_sync`, previews), to
        its client (None: every client), as the embedded server's `AppState` would."""
        try:
            if message.kind == PACK_PREVIEW:
                self.send_preview(message.data, message.client_id)
            else:
                self.hub.send(message.event, message.data, message.client_id)
        except Exception:  # noqa: BLE001 -- a pack's bad message must not fail the prompt (nor does it embedded)
            log.exception("a pack's message %r from a Ray worker could not be sent", message.event)

    async def _forward_interrupt(self, item: QueueItem, slot: WorkerSlot) -> None:
        """/interrupt sets the item's flag on the server; the worker polls its own, so pass it on.
        (Polled: the flag is a threading.Event that route handlers and packs set directly.)"""
        while not item.interrupt.is_set():
            await asyncio.sleep(INTERRUPT_POLL_S)
        if slot.handle is not None:
            slot.handle.interrupt.remote(item.prompt_id)


def remove_dead_worker_folder(info: dict) -> bool:
    """A dead worker cannot remove its own folders (`WorkerRuntime.close`): do it for it when it
    ran on this machine (on another machine, the next worker starting there removes them:
    `runtime.remove_abandoned_folders`)."""
    folder = info.get("folder")
    if not folder or info.get("host") != socket.gethostname():
        return False
    path = Path(folder)
    if not path.name.startswith(FOLDER_PREFIX):  # only ever a folder the worker made for itself
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True
