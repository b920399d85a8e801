"""Reading request bodies: JSON that is malformed becomes a 400 with a JSON body, never a 500."""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class BadRequestBody(web.HTTPBadRequest):
    """A request body that is not the JSON the route expects (rendered as JSON)."""

    def __init__(self, message: str, error_type: str = "invalid_json") -> None:
        self.message = message
        body = json.dumps({"error": {"type": error_type, "message": message}})
        super().__init__(text=body, content_type="application/json")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str, *, what: str = "request body") -> Any:
    """Strict JSON (no NaN/Infinity, which browsers never send) or `BadRequestBody`."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequestBody(f"{what} is not valid JSON: {exc}") from None


async def read_json(request: web.Request, *, empty: Any = ..., expect: type | None = None) -> Any:
    """The request's JSON body. `empty` is returned for an empty body (else that is an error);
    `expect` (e.g. `dict`) checks the top-level type."""
    raw = await request.read()
    if not raw.strip():
        if empty is not ...:
            return empty
        raise BadRequestBody("request body is empty; expected JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestBody("request body is not UTF-8 text") from None
    value = parse_json(text)
    if expect is not None and not isinstance(value, expect):
        raise BadRequestBody(f"request body must be a JSON {expect.__name__ if expect is not dict else 'object'}, "
                             f"got {type(value).__name__}", "invalid_request")
    return value
