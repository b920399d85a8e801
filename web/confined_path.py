"""Join a client-supplied relative path onto a folder so that the result can never leave it.

Used by the routes that serve or write files named by the client (`/userdata`, the frontend's
static folder, packs' `WEB_DIRECTORY` files). ComfyUI checks `commonpath` on the joined path
without resolving symlinks (ComfyUI issue #12285); here the path is checked twice: lexically
(no `..`, no absolute path, no backslash, no control character, no empty or `.` segment), and again after
resolving every symlink, so a link inside the folder that points outside is refused too.

Percent-decoding is the router's job (aiohttp decodes `%2F` in a `{name}` segment once); this
module never decodes again, so a double-encoded `%252F` stays a literal file name.
"""
from __future__ import annotations

import re
from pathlib import Path

# C0 control characters and DEL: a CR/LF in a file name splits log lines and headers
# (Content-Disposition), and no name the editor makes has one (issue 34).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# `C:`-style drive prefixes: meaningless on POSIX, dangerous if the tree is ever served on Windows.
_DRIVE = re.compile(r"^[A-Za-z]:")


class PathOutsideRoot(ValueError):
    """A client-supplied path is malformed or would reach outside its folder."""

    def __init__(self, what: str, relative: str, reason: str) -> None:
        super().__init__(f"{what}: path {relative!r} is not allowed ({reason})")
        self.what = what
        self.relative = relative
        self.reason = reason


def find_control_character(name: str) -> str | None:
    """The first C0 control character or DEL in `name`, or None."""
    match = _CONTROL.search(name)
    return match.group() if match else None


def check_relative(relative: str, *, what: str = "path") -> list[str]:
    """The `/`-separated segments of `relative`, or `PathOutsideRoot` if it is not a plain
    relative path (empty, absolute, drive-prefixed, containing `..`, `.`, empty segments,
    backslashes or control characters: U+0000..U+001F and U+007F)."""
    if not isinstance(relative, str) or relative == "":
        raise PathOutsideRoot(what, str(relative), "empty")
    control = find_control_character(relative)
    if control is not None:
        raise PathOutsideRoot(what, relative, f"contains the control character U+{ord(control):04X}")
    if "\\" in relative:
        raise PathOutsideRoot(what, relative, "contains a backslash; use '/' between folders")
    if relative.startswith("/") or _DRIVE.match(relative):
        raise PathOutsideRoot(what, relative, "absolute paths are not allowed")
    segments = relative.split("/")
    for segment in segments:
        if segment == "..":
            raise PathOutsideRoot(what, relative, "'..' is not allowed")
        if segment in ("", "."):
            raise PathOutsideRoot(what, relative, "empty or '.' path segment")
    return segments


def confined_path(root: Path, relative: str, *, what: str = "path") -> Path:
    """`root / relative`, resolved, guaranteed to lie inside `root` (after symlinks).

    The target need not exist (for writes); existing parts are resolved through their
    symlinks. Raises `PathOutsideRoot` otherwise.
    """
    segments = check_relative(relative, what=what)
    base = Path(root).resolve()
    candidate = base.joinpath(*segments).resolve(strict=False)
    if candidate == base or not candidate.is_relative_to(base):
        raise PathOutsideRoot(what, relative, "resolves outside its folder")
    return candidate
