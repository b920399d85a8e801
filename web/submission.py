"""Accepting a prompt: the one path shared by `POST /prompt` and the WebSocket `queue_prompt`.

`submit_prompt(state, body)` checks the request's fields, runs the pack `on_prompt` handlers,
validates the prompt against the registry (ComfyUI's error shapes) and queues it. It returns
`(http_status, json_body)`: 200 `{prompt_id, number, node_errors}` or 400 `{error, node_errors}`.
Nothing here raises for bad input: every problem is a 400 with a message naming the field.

A client may choose the prompt id (today's ComfyUI, server.py @002c3fb9 and
comfy_execution/jobs.py `validate_job_id` @172be438): a UUID in canonical lowercase hyphenated
form, else 400 with error type `invalid_prompt_id`; absent or null, the server makes one. An id
that is queued or running already is refused the same way; an id only in the history may be
queued again (its entry is replaced when it ends, as in ComfyUI).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from web.pack_start import packs_ready
from web.prompt_queue import DuplicatePromptError
from web.queue_item import DEFAULT_OWNER, QueueItem, now_ms, queue_number_problem

if TYPE_CHECKING:
    from web.state import AppState

log = logging.getLogger(__name__)

# Prompts with more nodes than this are validated and stored off the event loop (issue 34).
OFF_LOOP_NODES = 500
# --users: the client id of a user's prompts submitted without one (web/auth/, docs/auth.md)
USER_CHANNEL_PREFIX = "user:"



def request_error(error_type: str, message: str, details: str = "") -> dict:
    """A 400 body in ComfyUI's shape, with no node errors."""
    return {"error": {"type": error_type, "message": message, "details": details or message, "extra_info": {}},
            "node_errors": {}}


def is_canonical_uuid(value: Any) -> bool:
    """True for a string that is a UUID exactly as `str(uuid.UUID(...))` spells it."""
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _duplicate_error(prompt_id: str) -> dict:
    return request_error("invalid_prompt_id", "Duplicate prompt_id",
                         f"prompt_id {prompt_id!r} is already queued or running; omit prompt_id or choose another")


def _field_error(name: str, expected: str, value: Any) -> dict:
    return request_error("invalid_prompt", f"Invalid request field '{name}'",
                         f"'{name}' must be {expected}, got {type(value).__name__}: {str(value)[:200]!r}")


def _check_fields(body: dict) -> dict | None:
    """The first malformed request field as a 400 body, or None."""
    prompt = body["prompt"]
    if not isinstance(prompt, dict):
        return _field_error("prompt", "an object mapping node ids to nodes", prompt)
    client_id = body.get("client_id")
    if client_id is not None and not isinstance(client_id, str):
        return _field_error("client_id", "a string", client_id)
    prompt_id = body.get("prompt_id")
    if prompt_id is not None and not is_canonical_uuid(prompt_id):
        return request_error("invalid_prompt_id", "prompt_id must be a valid UUID",
                             "prompt_id must be a UUID string in canonical lowercase hyphenated form; omit it to let "
                             f"the server generate one (got {type(prompt_id).__name__}: {str(prompt_id)[:200]!r})")
    extra = body.get("extra_data")
    if extra is not None and not isinstance(extra, dict):
        return _field_error("extra_data", "an object", extra)
    number = body.get("number")
    if number is not None and queue_number_problem(number) is not None:
        # range-checked here, where it enters: a number past 2^53 would be stored and turn the
        # counter that continues after it into an integer SQLite cannot hold (issue 34)
        return _field_error("number", "a finite number between -2^53 and 2^53 (9007199254740992)", number)
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


def _user_limits(state: "AppState", owner: str, client_id: Any, prompt: dict) -> tuple[int, dict] | None:
    """--users (web/auth/): client id ownership (403: another user's socket id would receive this
    prompt's events), another user's uploads named in the prompt (403), the queue quota (429) and
    the per-user prompt rate (429)."""
    auth = state.auth
    if isinstance(client_id, str) and client_id and not auth.claim_client(client_id, owner):
        return 403, request_error("forbidden_client_id", "client_id belongs to another user",
                                  "use your own WebSocket's client id (its 'sid'), or none")
    foreign = auth.foreign_inputs(owner, prompt)
    if foreign:
        return 403, request_error("forbidden_input", "The prompt reads another user's upload",
                                  f"input files of another user: {foreign[:5]}")
    pending = sum(1 for item in state.queue.pending() if item.owner == owner)
    if auth.quota_reached(pending):
        body = request_error("queue_quota", "Too many queued prompts",
                             f"{owner} has {pending} prompts pending; the limit is {auth.settings.queue_quota}")
        return 429, body
    wait = auth.prompt_rate_wait(owner)
    if wait > 0:
        body = request_error("rate_limited", "Too many prompts",
                             f"at most {auth.settings.prompts_per_minute} prompts a minute; retry in {wait:.1f} s")
        body["error"]["retry_after"] = round(wait, 3)
        return 429, body
    return None


def _validation_result(answer: Any) -> Any:
    """ComfyUI's `(ok, error, good_outputs, node_errors)` from a pack's `validate_prompt` as the
    engine's ValidationResult; anything else is the validator's crash (a 400, as any other)."""
    from graph.validation import ValidationResult

    if not isinstance(answer, (tuple, list)) or len(answer) < 4:
        raise TypeError(f"execution.validate_prompt as a pack replaced it answered {type(answer).__name__}, "
                        f"not ComfyUI's (ok, error, good_outputs, node_errors)")
    ok, error, outputs, node_errors = answer[:4]
    return ValidationResult(bool(ok), error, dict(node_errors or {}), [str(o) for o in (outputs or [])])


async def submit_prompt(state: "AppState", body: Any, *, client_id: str | None = None,
                        usage_source: str | None = None, owner: str = DEFAULT_OWNER) -> tuple[int, dict]:
    """Validate and queue one prompt request. `client_id` (the WebSocket's) overrides the body's;
    `usage_source` (the `Comfy-Usage-Source` request header) becomes
    `extra_data.comfy_usage_source` unless the body set one. `owner`: who submits it (the
    logged-in user with --users, web.auth.access.owner_of; else "default"), checked against the
    per-user limits when users are on."""
    log.info("got prompt")  # ComfyUI's terminal line for every submission
    await packs_ready(state)  # packs importing after the server listened: their nodes and on_prompt handlers
    if not isinstance(body, dict):
        return 400, request_error("invalid_prompt", "Invalid request body",
                                  f"the body must be a JSON object, got {type(body).__name__}")
    body = _run_prompt_handlers(state, body)
    if "prompt" not in body:
        return 400, request_error("no_prompt", "No prompt provided", "No prompt provided")
    problem = _check_fields(body)
    if problem is not None:
        return 400, problem

    if state.auth is not None:
        # a `client_id` argument is the server's own (the WebSocket's, claimed when it connected; v2's bridge)
        refused = _user_limits(state, owner, body.get("client_id") if client_id is None else None, body["prompt"])
        if refused is not None:
            return refused

    from graph.validation import validate_prompt  # the engine; imported late to keep start-up light

    prompt: dict = body["prompt"]
    prompt_id = body.get("prompt_id") or str(uuid.uuid4())
    if state.queue.contains(prompt_id):
        return 400, _duplicate_error(prompt_id)
    targets = body.get("partial_execution_targets")

    async def validate() -> tuple[dict, Any]:
        # Node types that are gone here but have a registered stand-in (web/node_replacements.py).
        replaced = state.node_replacements.apply(prompt, state.registry)
        by_pack = state.prompt_validation() if state.prompt_validation is not None else None
        if by_pack is not None:  # a pack replaced ComfyUI's execution.validate_prompt: as ComfyUI, through it
            return replaced, _validation_result(await by_pack(prompt_id, replaced, targets))
        return replaced, await validate_prompt(replaced, state.registry, env=state.env,
                                               partial_execution_targets=targets)

    big = len(prompt) > OFF_LOOP_NODES
    try:
        # a big prompt is validated in a worker thread (its own event loop there), so the server's
        # loop keeps answering while it runs: work proportional to a prompt's size stays off it
        prompt, result = await (asyncio.to_thread(asyncio.run, validate()) if big else validate())
    except Exception as exc:  # noqa: BLE001 -- a validator crash is the prompt's problem, not a 500
        log.exception("validation of prompt %s crashed", prompt_id)
        return 400, request_error("invalid_prompt", "Prompt could not be validated", f"{type(exc).__name__}: {exc}")
    if not result.ok:
        log.warning("invalid prompt: %s", (result.error or {}).get("message", result.error))
        return 400, {"error": result.error, "node_errors": result.node_errors}

    number = body.get("number")
    number = float(number) if number is not None else state.queue.next_number(bool(body.get("front")), owner)
    extra_data = dict(body.get("extra_data") or {})
    events_to = client_id if client_id is not None else body.get("client_id")
    if not events_to and state.auth is not None:
        # --users: a prompt without a client still goes to its owner only (ComfyUI broadcasts its
        # execution_interrupted); a socket of theirs may connect with this id to follow such prompts
        events_to = f"{USER_CHANNEL_PREFIX}{owner}"
        state.auth.claim_client(events_to, owner)
    if events_to:
        extra_data["client_id"] = events_to
    if usage_source and "comfy_usage_source" not in extra_data:
        extra_data["comfy_usage_source"] = usage_source
    # Today's ComfyUI stores the submission time in extra_data too (shown by /queue and /history).
    extra_data["create_time"] = create_time = now_ms()
    item = QueueItem(number=number, prompt_id=prompt_id, prompt=prompt, extra_data=extra_data,
                     outputs=[str(o) for o in result.outputs], create_time=create_time, owner=owner)
    try:
        await state.queue.put_async(item)  # its JSON is written to the store in a worker thread
    except DuplicatePromptError:  # queued by another request while this one was validated
        return 400, _duplicate_error(prompt_id)
    return 200, {"prompt_id": prompt_id, "number": number, "node_errors": result.node_errors}
