"""Reading request bodies: JSON that is malformed becomes a 400 with a JSON body, never a 500."""
from __future__ import annotations

import asyncio
import json
import re
from json.decoder import scanstring
from typing import Any

from aiohttp import web

from web.collector import note_big_input


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
# A string longer than this is decoded in pieces of at most this many characters.
STRING_CHARS = 65536
# A run of string characters with whole escapes only (what strict JSON allows between the quotes).
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*')


def parse_json_pieces(text: str, *, strict: bool = True) -> Any:
    """`json.loads(text)` (`strict`: no NaN/Infinity), as many short C calls instead of one.

    Python's `json` parser holds the GIL for a whole document, so even in a worker thread a 50 MB
    body stopped the event loop for as long as it took (issue 34). Here a container is decoded
    whole when it closes within `PIECE_CHARS` characters (one call on a slice of that length)
    and is otherwise walked member by member, and a string that does not close within
    `STRING_CHARS` characters is decoded piece by piece (`_string`), so no single call decodes
    more than `STRING_CHARS` characters (joining a long string's pieces is one copy). Same
    result and key order as `json.loads`."""
    decoder = _DECODER if strict else _LENIENT_DECODER
    value, end = _pieces(decoder, text, _SPACE.match(text, 0).end(), 0)
    end = _SPACE.match(text, end).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _pieces(decoder: json.JSONDecoder, text: str, idx: int, nesting: int) -> tuple[Any, int]:
    """The JSON value at `idx` (no leading whitespace) and the index after it."""
    opener = text[idx:idx + 1]
    if opener == '"':
        return _string(text, idx + 1)
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
            key, idx = _string(text, idx + 1)
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


def _string(text: str, start: int) -> tuple[str, int]:
    """The JSON string whose text starts at `start` (after its opening quote) and the index
    after its closing quote, as `json.scanstring` gives them, in calls of at most
    `STRING_CHARS` characters each."""
    close = text.find('"', start, start + STRING_CHARS)
    if close >= 0:  # most strings: the first quote within reach ends it (unless it is escaped)
        try:
            value, end = scanstring(text[start:close + 1], 0)
            return value, start + end
        except json.JSONDecodeError:
            pass  # an escaped quote, or a string that is not valid: read it piece by piece below
    parts: list[str] = []
    pos = start
    while True:
        limit = pos + STRING_CHARS
        if text.find("\\", pos, limit) < 0:  # no escape in reach (a base64 image): the first quote ends it
            quote = text.find('"', pos, limit)
            stop = quote if quote >= 0 else min(limit, len(text))
        else:  # whole escapes only, up to a quote, an invalid character or an escape the cut would split
            stop = _STRING_RUN.match(text, pos, limit).end()
        if stop == pos and text[pos:pos + 1] != '"':
            # what strict JSON refuses here (a control character, a bad escape, the end of the text)
            scanstring(text, pos)  # raises, naming it and where
            raise json.JSONDecodeError("Invalid string", text, pos)  # (not reached)
        closed = text[stop:stop + 1] == '"'
        try:
            parts.append(scanstring(text[pos:stop] + '"', 0)[0])
        except json.JSONDecodeError as exc:  # a control character: said where it is in the body
            raise json.JSONDecodeError(exc.msg, text, pos + exc.pos) from None
        if closed:
            return _joined(parts), stop + 1
        pos = stop


def _joined(parts: list[str]) -> str:
    """The pieces of one string, with an escaped surrogate pair that a cut split joined again
    (`json` makes one character of `\\ud83d\\ude00`)."""
    for i in range(len(parts) - 1, 0, -1):
        before, after = parts[i - 1], parts[i]
        if before and after and "\ud800" <= before[-1] <= "\udbff" and "\udc00" <= after[0] <= "\udfff":
            pair = chr(0x10000 + ((ord(before[-1]) - 0xD800) << 10) + (ord(after[0]) - 0xDC00))
            parts[i - 1], parts[i] = before[:-1] + pair, after[1:]
    return "".join(parts)


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
    if (request.content_length or 0) > OFF_LOOP_BYTES:
        note_big_input()  # before it arrives: no timed full collection while it is read
    raw = await request.read()
    if not raw.strip():
        if empty is not ...:
            return empty
        raise BadRequestBody("request body is empty; expected JSON")
    if len(raw) > OFF_LOOP_BYTES:
        note_big_input()  # no timed full collection while it is parsed, validated and stored
        value = await asyncio.to_thread(_parse_body, raw)
    else:
        value = _parse_body(raw)
    if expect is not None and not isinstance(value, expect):
        raise BadRequestBody(f"request body must be a JSON {expect.__name__ if expect is not dict else 'object'}, "
                             f"got {type(value).__name__}", "invalid_request")
    return value
