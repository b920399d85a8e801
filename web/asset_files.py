"""What the assets API (web/assets.py, web/routes_assets.py) knows about files: blake3 hashes,
tag and name rules, and the folders assets live in (input/, output/, temp/, each model kind's
folders) with the tags, loader paths and upload destinations they give, after today's ComfyUI
app/assets/helpers.py and services/path_utils.py (@07eea23 / @228da55, Comfy-Org/ComfyUI).
"""
from __future__ import annotations

import mimetypes
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from comfy_core.folders import MODEL_EXTENSIONS
from comfy_core.video.media_types import media_type
from web.confined_path import find_control_character

HASH_ALGORITHM = "blake3"
_HASH_RE = re.compile(r"^blake3:[0-9a-f]{64}$")
SYSTEM_TAGS = frozenset({"missing"})
DESTINATION_ROLES = ("input", "models", "output")
SEED_ROOTS = ("models", "input", "output")
# Input subfolders the editor writes into (paste, webcam, 3-D, painter): a file directly inside
# one gets that folder's name as a tag, as ComfyUI's path_utils._KNOWN_SUBFOLDER_TAGS.
KNOWN_SUBFOLDER_TAGS = frozenset({"3d", "pasted", "painter", "threed", "webcam"})
MAX_TAG_LENGTH = 512
MAX_NAME_LENGTH = 512
_CHUNK = 1 << 20


class AssetError(Exception):
    """A request the catalogue refuses: the HTTP status, ComfyUI's error code, a message and
    details for the `{"error": {"code", "message", "details"}}` envelope."""

    def __init__(self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})


def now_text() -> str:
    """Naive UTC time in a fixed-width ISO form (sorts as text; ComfyUI stores naive UTC)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")


def parse_hash(text: Any) -> str:
    """`blake3:<64 hex>` (case and surrounding spaces ignored), or AssetError 400 INVALID_HASH."""
    value = text.strip().lower() if isinstance(text, str) else ""
    if not _HASH_RE.match(value):
        raise AssetError(400, "INVALID_HASH", "hash must be like 'blake3:<hex>' (64 hex digits)")
    return value


def hash_file(path: Path) -> tuple[str, int, int]:
    """`('blake3:<hex>', size, mtime_ns)` of a file, read in 1 MiB pieces (the BLAKE3 paper's
    tree hash, through the `blake3` package, as ComfyUI). The stat is taken before and after:
    a file that changed while being read raises OSError instead of giving a wrong pair."""
    from blake3 import blake3

    before = os.stat(path)
    digest = blake3()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    after = os.stat(path)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise OSError(f"{path} changed while it was being hashed")
    return f"{HASH_ALGORITHM}:{digest.hexdigest()}", after.st_size, after.st_mtime_ns


def check_tags(values: Iterable[Any], what: str = "tags") -> list[str]:
    """Stripped, de-duplicated tags in order; AssetError 400 for a non-string, an over-long
    tag or one with control characters (never silently dropped)."""
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise AssetError(400, "INVALID_BODY", f"{what}: every tag must be a string, got {type(value).__name__}")
        tag = value.strip()
        if not tag:
            continue
        if len(tag) > MAX_TAG_LENGTH or find_control_character(tag) is not None:
            raise AssetError(400, "INVALID_BODY", f"{what}: tag {tag[:40]!r} is longer than {MAX_TAG_LENGTH} "
                                                  "characters or has control characters")
        if tag not in out:
            out.append(tag)
    return out


def check_name(name: Any, what: str = "name") -> str:
    """An asset name: a non-empty label of at most 512 characters without control characters or
    path separators (files are stored under their hash; the name is never a path)."""
    if not isinstance(name, str) or not name.strip():
        raise AssetError(400, "INVALID_BODY", f"{what} must be a non-empty string")
    name = name.strip()
    if len(name) > MAX_NAME_LENGTH:
        raise AssetError(400, "INVALID_BODY", f"{what} is longer than {MAX_NAME_LENGTH} characters")
    if find_control_character(name) is not None or "/" in name or "\\" in name or name in (".", ".."):
        raise AssetError(400, "INVALID_BODY", f"{what} {name[:40]!r} must be a plain label (no '/', '\\\\', "
                                              "control characters or '..')")
    return name


def guess_mime(name: str) -> str | None:
    return media_type(name) or mimetypes.guess_type(name, strict=False)[0]


@dataclass(frozen=True)
class AssetRoots:
    """The folders assets live in: input/, output/, temp/ and each model kind's folders."""

    input_dir: Path
    output_dir: Path
    temp_dir: Path
    models_dir: Path
    model_folders: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Any) -> "AssetRoots":
        folders = env.folders
        kinds = {}
        for kind in folders.kinds():
            try:
                kinds[kind] = tuple(Path(p).resolve() for p in folders.paths(kind))
            except ValueError:
                continue
        return cls(Path(env.input_dir).resolve(), Path(env.output_dir).resolve(), Path(env.temp_dir).resolve(),
                   Path(folders.models_dir).resolve(), kinds)

    def namespace_of(self, path: Path) -> tuple[str, str] | None:
        """(`input`|`output`|`temp`|`models`, path below that root) for a file, the deepest root
        winning (models/ may sit inside another root), or None outside them all."""
        best: tuple[int, str, str] | None = None
        for name, base in (("input", self.input_dir), ("output", self.output_dir), ("temp", self.temp_dir),
                           ("models", self.models_dir)):
            if path.is_relative_to(base) and path != base:
                candidate = (len(str(base)), name, path.relative_to(base).as_posix())
                if best is None or candidate[0] > best[0]:
                    best = candidate
        return None if best is None else (best[1], best[2])

    def model_kinds_of(self, path: Path) -> list[tuple[str, str]]:
        """(kind, path below that kind's folder) for every model kind whose folder holds `path`
        and accepts its extension."""
        if path.suffix.lower() not in MODEL_EXTENSIONS:
            return []
        found = []
        for kind, bases in sorted(self.model_folders.items()):
            for base in bases:
                if path.is_relative_to(base) and path != base:
                    found.append((kind, path.relative_to(base).as_posix()))
                    break
        return found

    def path_tags(self, path: Path) -> list[str]:
        """The tags a file gets from where it is (ComfyUI's path-derived system tags)."""
        tags: list[str] = []
        for role, base in (("input", self.input_dir), ("output", self.output_dir), ("temp", self.temp_dir)):
            if path.is_relative_to(base):
                tags.append(role)
        kinds = self.model_kinds_of(path)
        if kinds or path.is_relative_to(self.models_dir):
            tags.append("models")
        tags.extend(f"model_type:{kind}" for kind, _ in kinds)
        if path.is_relative_to(self.input_dir):
            parts = path.relative_to(self.input_dir).parts
            if len(parts) == 2 and parts[0] in KNOWN_SUBFOLDER_TAGS:
                tags.append(parts[0])
        return tags

    def loader_path(self, path: Path) -> str | None:
        """What a loader node takes: the path below the model kind's folder for models, below
        input/ or output/ otherwise; None outside the known folders."""
        kinds = self.model_kinds_of(path)
        if kinds:
            return kinds[0][1]
        where = self.namespace_of(path)
        return where[1] if where is not None and where[0] != "models" else None

    def destination(self, tags: list[str]) -> Path:
        """The folder new uploaded bytes go to, from the upload's tags."""
        roles = [t for t in tags if t in DESTINATION_ROLES]
        if len(roles) != 1:
            raise AssetError(400, "INVALID_BODY", "uploads need exactly one destination tag: input, models or output")
        if roles[0] == "input":
            return self.input_dir
        if roles[0] == "output":
            return self.output_dir
        kinds = [t.split(":", 1)[1] for t in tags if t.startswith("model_type:")]
        if len(kinds) != 1 or not kinds[0]:
            raise AssetError(400, "INVALID_BODY", "models uploads need exactly one model_type:<folder> tag")
        bases = self.model_folders.get(kinds[0])
        if not bases:
            raise AssetError(400, "INVALID_BODY", f"unknown model folder kind {kinds[0]!r}; known: "
                                                  f"{', '.join(sorted(self.model_folders))}")
        return bases[0]
