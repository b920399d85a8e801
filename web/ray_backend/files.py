"""Files between the server and workers that share no file system.

Inputs: every string input of a prompt that names a file in the server's input folder (an
upload: LoadImage's `image`, a mask, `sub/name.png [input]`) travels with the prompt and is
written into the worker's own input folder. Outputs: the files a prompt wrote or changed in the
worker's output and temp folders come back with its outcome and are written at the same
relative paths on the server, so /view and the history's file names work unchanged.

Each worker numbers saved files from its own folder (`ComfyUI_00001_.png`, ...), so two workers
can pick the same name: a file that would replace a different one on the server is written under
the next free counter instead (`renamed_path`), and the `executed` events and history outputs
that name it are rewritten to match (`rename_outputs`), so no output is ever lost.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from web.confined_path import PathOutsideRoot, confined_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileBlob:
    """One file: `kind` is "input", "output" or "temp"; `path` is relative ('/'-separated)."""

    kind: str
    path: str
    data: bytes


def _input_name(value: str) -> str | None:
    name = value.strip()
    if name.endswith(" [output]") or name.endswith(" [temp]"):
        return None  # another folder: a worker cannot have it unless it made it itself
    return name[: -len(" [input]")] if name.endswith(" [input]") else name


def input_files(prompt: Mapping[str, Any], input_dir: Path,
                sent: dict[str, tuple[int, int]] | None = None) -> list[FileBlob]:
    """The files of `input_dir` that `prompt`'s string inputs name. With `sent` (what one worker
    already has: name -> (mtime ns, size) as sent), a file unchanged since it was sent to that
    worker is left out, and `sent` is updated with what goes now: an upload used by many prompts
    travels once per worker."""
    found: dict[str, FileBlob | None] = {}
    for node in prompt.values():
        inputs = node.get("inputs") if isinstance(node, Mapping) else None
        if not isinstance(inputs, Mapping):
            continue
        for value in inputs.values():
            if not isinstance(value, str) or not value or len(value) > 4096:
                continue
            name = _input_name(value)
            if name is None or name in found:
                continue
            try:
                path = confined_path(input_dir, name, what="input file")
            except PathOutsideRoot:
                continue  # not a path at all (most strings are prompts, seeds, modes)
            if not path.is_file():
                continue
            stat = path.stat()
            signature = (stat.st_mtime_ns, stat.st_size)
            if sent is not None and sent.get(name) == signature:
                found[name] = None  # the worker has this very file
                continue
            found[name] = FileBlob("input", name, path.read_bytes())
            if sent is not None:
                sent[name] = signature
    return [blob for blob in found.values() if blob is not None]


Snapshot = dict[tuple[str, str], tuple[int, int]]


def snapshot(folders: Mapping[str, Path]) -> Snapshot:
    """`(kind, relative path) -> (mtime ns, size)` of every file under each folder."""
    seen: Snapshot = {}
    for kind, root in folders.items():
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if path.is_file():
                stat = path.stat()
                seen[(kind, path.relative_to(root).as_posix())] = (stat.st_mtime_ns, stat.st_size)
    return seen


def changed_files(folders: Mapping[str, Path], before: Snapshot) -> list[FileBlob]:
    """The files that are new or changed since `before`, with their bytes."""
    blobs = []
    for key, stamp in snapshot(folders).items():
        if before.get(key) != stamp:
            kind, rel = key
            blobs.append(FileBlob(kind, rel, (folders[kind] / rel).read_bytes()))
    return blobs


Renames = dict[tuple[str, str], str]  # (kind, old relative path) -> new relative path

_COUNTED = re.compile(r"^(?P<stem>.*_)(?P<counter>\d{5,})(?P<tail>_?\.[^./]+)$")


def renamed_path(root: Path, rel: str) -> str:
    """The first free name for `rel` under `root`: ComfyUI's counter (`name_00007_.png`) counted
    up, or `name_1.ext`, `name_2.ext`, ... for names without one."""
    folder, _, name = rel.rpartition("/")
    prefix = f"{folder}/" if folder else ""
    match = _COUNTED.match(name)
    if match:
        counter = int(match.group("counter"))
        width = len(match.group("counter"))
        candidates = (f"{match.group('stem')}{n:0{width}}{match.group('tail')}" for n in range(counter + 1, counter + 100000))
    else:
        stem, dot, ext = name.rpartition(".")
        stem, ext = (stem, dot + ext) if dot and stem else (name, "")
        candidates = (f"{stem}_{n}{ext}" for n in range(1, 100000))
    for candidate in candidates:
        if not (root / (prefix + candidate)).exists():
            return prefix + candidate
    raise FileExistsError(f"no free name for {rel} under {root}")


def write_files(blobs: Iterable[FileBlob], folders: Mapping[str, Path],
                aliases: dict[tuple[str, str], str] | None = None) -> Renames:
    """Write each blob under the folder of its kind (confined to it); returns the blobs written
    under another name. `aliases` (one worker's, kept by the caller across its prompts) maps the
    worker's names to the server's: a file the worker writes again under a name it used before
    replaces the server's copy of it (a node overwriting its own file, as in one process), while
    a name another worker (or an earlier server run) took is written under a free name instead."""
    renames: Renames = {}
    aliases = {} if aliases is None else aliases
    for blob in blobs:
        root = folders.get(blob.kind)
        if root is None:
            raise PathOutsideRoot(f"{blob.kind} file", blob.path, "no such folder")
        key = (blob.kind, blob.path)
        target = aliases.get(key, blob.path)
        path = confined_path(root, target, what=f"{blob.kind} file")
        if (key not in aliases and blob.kind in ("output", "temp") and path.exists()
                and path.read_bytes() != blob.data):
            target = renamed_path(root, blob.path)
            log.info("%s %s from a worker: the name is taken on the server, written as %s", blob.kind, blob.path, target)
            path = confined_path(root, target, what=f"{blob.kind} file")
        if blob.kind in ("output", "temp"):
            aliases[key] = target
        if target != blob.path:
            renames[key] = target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob.data)
    return renames


def rename_outputs(ui: Any, renames: Renames) -> Any:
    """`ui` (a node's UI output: `{"images": [{"filename", "subfolder", "type"}], ...}`) with the
    renamed files' names replaced; everything else as it is."""
    if not renames or not isinstance(ui, Mapping):
        return ui
    out = {}
    for key, value in ui.items():
        if isinstance(value, (list, tuple)):
            value = type(value)(_renamed_entry(entry, renames) for entry in value)
        out[key] = value
    return out


def _renamed_entry(entry: Any, renames: Renames) -> Any:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("filename"), str):
        return entry
    subfolder = entry.get("subfolder") or ""
    rel = f"{subfolder}/{entry['filename']}" if subfolder else entry["filename"]
    new = renames.get((entry.get("type", "output"), rel))
    if new is None:
        return entry
    return {**entry, "filename": new.rpartition("/")[2]}
