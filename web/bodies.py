"""Reading request bodies: JSON that is malformed becomes a 400 with a JSON body, never a 500."""
from __future__ import annotations

import asyncio
import json
import re
from json.decoder import scanstring
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


# Bodies larger than this are decoded and parsed in a worker thread, not on the event loop (issue 34).
OFF_LOOP_BYTES = 256 * 1024


def parse_json(text: str, *, what: str = "request body") -> Any:
    """Strict JSON (no NaN/Infinity, which browsers never send) or `BadRequestBody`."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequestBody(f"{what} is not valid JSON: {exc}") from None


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_LENIENT_DECODER = json.JSONDecoder()  # NaN and Infinity allowed (what json.dumps writes by default)
_SPACE = re.compile(r"[ \t\n\r]*")
# A container whose text is longer than this is parsed member by member (see `parse_json_pieces`).
PIECE_CHARS = 4096
_MAX_NESTING = 64


def parse_json_pieces(text: str, *, strict: bool = True) -> Any:
    """`json.loads(text)` (`strict`: no NaN/Infinity), as many short C calls instead of one.

    Python's `json` parser holds the GIL for a whole document, so even in a worker thread a 50 MB
    body stopped the event loop for as long as it took (issue 34). Here a container is decoded
    whole when it closes within `PIECE_CHARS` characters (one call on a slice of that length)
    and is otherwise walked member by member, so no single call parses more than a few KB (a
    long string is still one call, a copy). Same result and key order as `json.loads`."""
    decoder = _DECODER if strict else _LENIENT_DECODER
    value, end = _pieces(decoder, text, _SPACE.match(text, 0).end(), 0)
    end = _SPACE.match(text, end).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _pieces(decoder: json.JSONDecoder, text: str, idx: int, nesting: int) -> tuple[Any, int]:
    """The JSON value at `idx` (no leading whitespace) and the index after it."""
    opener = text[idx:idx + 1]
    if opener not in ("{", "[") or nesting >= _MAX_NESTING:
        return decoder.raw_decode(text, idx)
    window = text[idx:idx + PIECE_CHARS]
    if len(window) == len(text) - idx:
        return decoder.raw_decode(text, idx)
    try:
        value, length = decoder.raw_decode(window)
        return value, idx + length
    except json.JSONDecodeError:
        pass  # longer than the window (or malformed: walked below, which reports where)
    closer = "}" if opener == "{" else "]"
    result: Any = {} if opener == "{" else []
    idx = _SPACE.match(text, idx + 1).end()
    if text[idx:idx + 1] == closer:
        return result, idx + 1
    while True:
        if opener == "{":
            if text[idx:idx + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, idx)
            key, idx = scanstring(text, idx + 1)
            idx = _SPACE.match(text, idx).end()
            if text[idx:idx + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, idx)
            idx = _SPACE.match(text, idx + 1).end()
            result[key], idx = _pieces(decoder, text, idx, nesting + 1)
        else:
            item, idx = _pieces(decoder, text, idx, nesting + 1)
            result.append(item)
        idx = _SPACE.match(text, idx).end()
        delimiter = text[idx:idx + 1]
        if delimiter == closer:
            return result, idx + 1
        if delimiter != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, idx)
        idx = _SPACE.match(text, idx + 1).end()


def _parse_body(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestBody("request body is not UTF-8 text") from None
    if len(text) <= OFF_LOOP_BYTES:
        return parse_json(text)
    try:
        return parse_json_pieces(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequestBody(f"request body is not valid JSON: {exc}") from None


async def read_json(request: web.Request, *, empty: Any = ..., expect: type | None = None) -> Any:
    """The request's JSON body. `empty` is returned for an empty body (else that is an error);
    `expect` (e.g. `dict`) checks the top-level type."""
    raw = await request.read()
    if not raw.strip():
        if empty is not ...:
            return empty
        raise BadRequestBody("request body is empty; expected JSON")
    value = await asyncio.to_thread(_parse_body, raw) if len(raw) > OFF_LOOP_BYTES else _parse_body(raw)
    if expect is not None and not isinstance(value, expect):
        raise BadRequestBody(f"request body must be a JSON {expect.__name__ if expect is not dict else 'object'}, "
                             f"got {type(value).__name__}", "invalid_request")
    return value
