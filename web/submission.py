"""Accepting a prompt: the one path shared by `POST /prompt` and the WebSocket `queue_prompt`.

`submit_prompt(state, body)` checks the request's fields, runs the pack `on_prompt` handlers,
validates the prompt against the registry (ComfyUI's error shapes) and queues it. It returns
`(http_status, json_body)`: 200 `{prompt_id, number, node_errors}` or 400 `{error, node_errors}`.
Nothing here raises for bad input: every problem is a 400 with a message naming the field.
"""
from __future__ import annotations

import logging
import math
import uuid
from typing import TYPE_CHECKING, Any

from web.prompt_queue import DuplicatePromptError
from web.queue_item import QueueItem

if TYPE_CHECKING:
    from web.state import AppState

log = logging.getLogger(__name__)

MAX_PROMPT_ID_LENGTH = 256


def request_error(error_type: str, message: str, details: str = "") -> dict:
    """A 400 body in ComfyUI's shape, with no node errors."""
    return {"error": {"type": error_type, "message": message, "details": details or message, "extra_info": {}},
            "node_errors": {}}


def _field_error(name: str, expected: str, value: Any) -> dict:
    return request_error("invalid_prompt", f"Invalid request field '{name}'",
                         f"'{name}' must be {expected}, got {type(value).__name__}: {str(value)[:200]!r}")


def _check_fields(body: dict) -> dict | None:
    """The first malformed request field as a 400 body, or None."""
    prompt = body["prompt"]
    if not isinstance(prompt, dict):
        return _field_error("prompt", "an object mapping node ids to nodes", prompt)
    for key, value in (("client_id", body.get("client_id")), ("prompt_id", body.get("prompt_id"))):
        if value is not None and not isinstance(value, str):
            return _field_error(key, "a string", value)
    prompt_id = body.get("prompt_id")
    if prompt_id is not None and not (0 < len(prompt_id) <= MAX_PROMPT_ID_LENGTH):
        return _field_error("prompt_id", f"a non-empty string of at most {MAX_PROMPT_ID_LENGTH} characters", prompt_id)
    extra = body.get("extra_data")
    if extra is not None and not isinstance(extra, dict):
        return _field_error("extra_data", "an object", extra)
    number = body.get("number")
    if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))
                               or not math.isfinite(number)):
        return _field_error("number", "a finite number", number)
    targets = body.get("partial_execution_targets")
    if targets is not None and (not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)):
        return _field_error("partial_execution_targets", "a list of node id strings", targets)
    return None


def _run_prompt_handlers(state: "AppState", body: dict) -> dict:
    for handler in list(state.on_prompt_handlers):
        try:
            result = handler(body)
        except Exception:  # noqa: BLE001 -- ComfyUI logs and skips a failing handler
            log.exception("on_prompt handler %r failed; skipped", handler)
            continue
        if isinstance(result, dict):
            body = result
    return body


async def submit_prompt(state: "AppState", body: Any, *, client_id: str | None = None) -> tuple[int, dict]:
    """Validate and queue one prompt request. `client_id` (the WebSocket's) overrides the body's."""
    log.info("got prompt")  # ComfyUI's terminal line for every submission
    if not isinstance(body, dict):
        return 400, request_error("invalid_prompt", "Invalid request body",
                                  f"the body must be a JSON object, got {type(body).__name__}")
    body = _run_prompt_handlers(state, body)
    if "prompt" not in body:
        return 400, request_error("no_prompt", "No prompt provided", "No prompt provided")
    problem = _check_fields(body)
    if problem is not None:
        return 400, problem

    from graph.validation import validate_prompt  # the engine; imported late to keep start-up light

    prompt: dict = body["prompt"]
    prompt_id = body.get("prompt_id") or str(uuid.uuid4())
    if state.queue.contains(prompt_id):
        return 400, request_error("invalid_prompt", "Duplicate prompt_id",
                                  f"prompt_id {prompt_id!r} is already queued or running")
    try:
        result = await validate_prompt(prompt, state.registry, env=state.env,
                                       partial_execution_targets=body.get("partial_execution_targets"))
    except Exception as exc:  # noqa: BLE001 -- a validator crash is the prompt's problem, not a 500
        log.exception("validation of prompt %s crashed", prompt_id)
        return 400, request_error("invalid_prompt", "Prompt could not be validated", f"{type(exc).__name__}: {exc}")
    if not result.ok:
        log.warning("invalid prompt: %s", (result.error or {}).get("message", result.error))
        return 400, {"error": result.error, "node_errors": result.node_errors}

    number = body.get("number")
    number = float(number) if number is not None else state.queue.next_number(bool(body.get("front")))
    extra_data = dict(body.get("extra_data") or {})
    owner = client_id if client_id is not None else body.get("client_id")
    if owner:
        extra_data["client_id"] = owner
    item = QueueItem(number=number, prompt_id=prompt_id, prompt=prompt, extra_data=extra_data,
                     outputs=[str(o) for o in result.outputs])
    try:
        state.queue.put(item)
    except DuplicatePromptError as exc:
        return 400, request_error("invalid_prompt", "Duplicate prompt_id", str(exc))
    return 200, {"prompt_id": prompt_id, "number": number, "node_errors": result.node_errors}
