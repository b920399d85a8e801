"""Calling node code on the prompt's own thread and event loop.

Around each call of a node's main function the running `NodeContext` and the `ExpansionPrefix`
are set and the `before_node_call` hooks run, in the task (or the prompt thread) that makes the
call (see graph/context.py). Sync functions are called directly: the prompt runs on a worker
thread with its own event loop (graph/worker.py), so they never block the server's loop;
async functions run as tasks on the prompt's loop, so independent ones overlap.

Recovery (the host's out-of-memory hook, `Executor(..., recover=fn)`): when a node's main call
raises anything but `Interrupted`, `recover(exc)` is asked; if it returns True (it freed what it
could) the call runs once more, from a fresh context (expansion prefix and hooks as for a first
call, so expanded ids stay deterministic). A second failure, or a recover hook that itself
raises, propagates the call's own error.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Callable, Sequence

from graph.context import (ExpansionPrefix, Interrupted, NodeContext, reset_current, reset_expansion_prefix,
                           set_current, set_expansion_prefix)

log = logging.getLogger(__name__)

BeforeNodeCall = Callable[[str, int, int], None]
Recover = Callable[[BaseException], bool]

# What node functions usually return; never awaitable, so the inspection is skipped.
_PLAIN = frozenset({tuple, dict, list, type(None)})


def _enter(ctx: NodeContext | None, call_index: int | None, hooks: Sequence[BeforeNodeCall]) -> tuple:
    current = set_current(ctx) if ctx is not None else None
    prefix = None
    if ctx is not None and call_index is not None:
        prefix = set_expansion_prefix(ExpansionPrefix(ctx.node_id, call_index))
        for hook in hooks:
            hook(ctx.node_id, call_index, 0)
    return current, prefix


def _leave(tokens: tuple) -> None:
    current, prefix = tokens
    if prefix is not None:
        reset_expansion_prefix(prefix)
    if current is not None:
        reset_current(current)


async def _attempt(fn: Callable[..., Any], kwargs: dict, ctx: NodeContext | None, call_index: int | None,
                   hooks: Sequence[BeforeNodeCall]) -> Any:
    tokens = _enter(ctx, call_index, hooks)
    try:
        result = fn(**kwargs)
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            result = await result
        return result
    finally:
        _leave(tokens)


def _should_retry(recover: Recover | None, exc: Exception, ctx: NodeContext | None) -> bool:
    if recover is None or isinstance(exc, Interrupted):
        return False
    where = f"node {ctx.node_id}" if ctx is not None else "node"
    try:
        retry = bool(recover(exc))
    except Exception:  # noqa: BLE001 -- the node's own error is what gets reported
        log.exception("recover hook failed on the error of %s", where)
        return False
    if retry:
        log.warning("%s failed with %s: %s; recovered, retrying once", where, type(exc).__name__, exc)
    return retry


async def call_sync(fn: Callable[..., Any], kwargs: dict, ctx: NodeContext | None = None,
                    call_index: int | None = None, hooks: Sequence[BeforeNodeCall] = (),
                    recover: Recover | None = None) -> Any:
    """Call a sync function with the node context set; await its result if it is awaitable."""
    if recover is None:
        return await _attempt(fn, kwargs, ctx, call_index, hooks)
    try:
        return await _attempt(fn, kwargs, ctx, call_index, hooks)
    except Exception as ex:  # noqa: BLE001 -- only to ask the recover hook
        if not _should_retry(recover, ex, ctx):
            raise
    # Retried outside the except block: the failed call's traceback (and the tensors its frames
    # hold) is gone by now, so the retry gets that memory back.
    return await _attempt(fn, kwargs, ctx, call_index, hooks)


def start_async(fn: Callable[..., Any], kwargs: dict, ctx: NodeContext | None = None,
                call_index: int | None = None, hooks: Sequence[BeforeNodeCall] = (),
                recover: Recover | None = None) -> asyncio.Task:
    """Start a (possibly async) function as a task in its own context copy."""
    return asyncio.get_running_loop().create_task(call_sync(fn, kwargs, ctx, call_index, hooks, recover))
