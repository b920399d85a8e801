"""The typed event stream of one prompt, with ComfyUI's WebSocket message types and fields.

`Event.type` / `Event.data` are exactly the `type` / `data` of ComfyUI's JSON WebSocket messages
(reference/comfyui-contract.md §2.2): `execution_start`, `execution_cached`, `executing`,
`progress`, `progress_state`, `executed`, `execution_success`, `execution_error`,
`execution_interrupted`, plus `preview` (an image for a binary frame, see CONTRACTS.md) and any
custom type a node sends. The engine emits every event; deciding which socket gets it (ComfyUI
drops most of them for prompts without a client_id) is the server's job.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

EXECUTION_START = "execution_start"
EXECUTION_CACHED = "execution_cached"
EXECUTING = "executing"
PROGRESS = "progress"
PROGRESS_STATE = "progress_state"
EXECUTED = "executed"
EXECUTION_SUCCESS = "execution_success"
EXECUTION_ERROR = "execution_error"
EXECUTION_INTERRUPTED = "execution_interrupted"
PREVIEW = "preview"

# The events that ComfyUI records (with a timestamp) in history `status.messages`.
STATUS_MESSAGE_TYPES = frozenset({EXECUTION_START, EXECUTION_CACHED, EXECUTION_SUCCESS,
                                  EXECUTION_ERROR, EXECUTION_INTERRUPTED})


@dataclass(frozen=True)
class Event:
    type: str
    data: Any
    # True once the host has sent it to its client itself, in step with the nodes (a pack's
    # `send_sync` replacement got it on the run's thread: web/prompt_run.py); later consumers
    # record it but do not send it again.
    delivered: bool = False

    def as_message(self) -> dict:
        """The JSON WebSocket frame `{"type", "data"}` (not for `preview`, which is binary)."""
        return {"type": self.type, "data": self.data}


def now_ms() -> int:
    """Milliseconds since the epoch, ComfyUI's timestamp unit."""
    return int(time.time() * 1000)


def execution_start(prompt_id: str) -> Event:
    return Event(EXECUTION_START, {"prompt_id": prompt_id, "timestamp": now_ms()})


def execution_cached(prompt_id: str, nodes: list[str]) -> Event:
    return Event(EXECUTION_CACHED, {"nodes": nodes, "prompt_id": prompt_id, "timestamp": now_ms()})


def executing(prompt_id: str, node_id: str | None, display_node_id: str | None) -> Event:
    return Event(EXECUTING, {"node": node_id, "display_node": display_node_id, "prompt_id": prompt_id})


def executed(prompt_id: str, node_id: str, display_node_id: str, output: Any) -> Event:
    return Event(EXECUTED, {"node": node_id, "display_node": display_node_id, "output": output,
                            "prompt_id": prompt_id})


def progress(prompt_id: str, node_id: str, value: float, total: float) -> Event:
    return Event(PROGRESS, {"value": value, "max": total, "prompt_id": prompt_id, "node": node_id})


def execution_success(prompt_id: str) -> Event:
    return Event(EXECUTION_SUCCESS, {"prompt_id": prompt_id, "timestamp": now_ms()})


def execution_error(prompt_id: str, node_id: str, node_type: str, executed_ids: list[str], *,
                    exception_message: str, exception_type: str, traceback: list[str],
                    current_inputs: Any, current_outputs: list[str], timestamp: bool = True) -> Event:
    data = {"prompt_id": prompt_id, "node_id": node_id, "node_type": node_type, "executed": executed_ids,
            "exception_message": exception_message, "exception_type": exception_type,
            "traceback": traceback, "current_inputs": current_inputs, "current_outputs": current_outputs}
    if timestamp:
        data["timestamp"] = now_ms()
    return Event(EXECUTION_ERROR, data)


def execution_interrupted(prompt_id: str, node_id: str, node_type: str, executed_ids: list[str]) -> Event:
    return Event(EXECUTION_INTERRUPTED, {"prompt_id": prompt_id, "node_id": node_id, "node_type": node_type,
                                         "executed": executed_ids, "timestamp": now_ms()})
