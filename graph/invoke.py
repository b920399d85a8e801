"""Calling node code on the prompt's own thread and event loop.

Around each call of a node's main function the running `NodeContext` and the `ExpansionPrefix`
are set and the `before_node_call` hooks run, in the task (or the prompt thread) that makes the
call (see graph/context.py). Sync functions are called directly: the prompt runs on a worker
thread with its own event loop (graph/executor.py), so they never block the server's loop;
async functions run as tasks on the prompt's loop, so independent ones overlap.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Sequence

from graph.context import (ExpansionPrefix, NodeContext, reset_current, reset_expansion_prefix, set_current,
                           set_expansion_prefix)

BeforeNodeCall = Callable[[str, int, int], None]


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


async def call_sync(fn: Callable[..., Any], kwargs: dict, ctx: NodeContext | None = None,
                    call_index: int | None = None, hooks: Sequence[BeforeNodeCall] = ()) -> Any:
    """Call a sync function with the node context set; await its result if it is awaitable."""
    tokens = _enter(ctx, call_index, hooks)
    try:
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
    finally:
        _leave(tokens)


def start_async(fn: Callable[..., Any], kwargs: dict, ctx: NodeContext | None = None,
                call_index: int | None = None, hooks: Sequence[BeforeNodeCall] = ()) -> asyncio.Task:
    """Start a (possibly async) function as a task in its own context copy."""
    async def run() -> Any:
        tokens = _enter(ctx, call_index, hooks)
        try:
            result = fn(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result
        finally:
            _leave(tokens)

    return asyncio.get_running_loop().create_task(run())
