"""Image file naming, as ComfyUI does it: saved files `<prefix>_00001_.png` with the next free
counter (folder_paths.get_save_image_path), server-side prefix variables, and file names chosen
by a client confined to their folder.

- The next counter is one more than the largest found for that prefix in the target folder; the
  prefix may name subfolders (`"portraits/face"`), which must stay inside the output folder.
- `..`, absolute paths and symlinks leading out of a folder are refused (ComfyUI's
  CVE-2026-56673 came from not doing this for LoadImage).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from comfy_core.image.errors import ImageInputError

FOLDER_TYPES = ("input", "output", "temp")


def fill_prefix_variables(prefix: str, width: int, height: int, now: time.struct_time) -> str:
    """ComfyUI's server-side prefix variables: %width%, %height%, %year%, %month%, %day%,
    %hour%, %minute%, %second% (the editor replaces %date:...% and %Node.widget% itself)."""
    values = {
        "width": str(width), "height": str(height), "year": str(now.tm_year),
        "month": f"{now.tm_mon:02}", "day": f"{now.tm_mday:02}", "hour": f"{now.tm_hour:02}",
        "minute": f"{now.tm_min:02}", "second": f"{now.tm_sec:02}",
    }
    for key, value in values.items():
        prefix = prefix.replace(f"%{key}%", value)
    return prefix


def next_counter(folder: Path, filename: str) -> int:
    """One more than the largest `<filename>_<digits>...` counter among the files in `folder`
    (1 when there is none), ComfyUI's `get_save_image_path` rule: the text after
    `<filename>_` up to the next `_` is the counter; names where it is not a number count as 0."""
    best = 0
    key = os.path.normcase(filename)
    for entry in os.listdir(folder):
        head, sep, rest = entry[:len(filename)], entry[len(filename):len(filename) + 1], entry[len(filename) + 1:]
        if sep != "_" or os.path.normcase(head) != key:
            continue
        try:
            number = int(rest.split("_")[0])
        except ValueError:
            number = 0
        best = max(best, number)
    return best + 1


def save_location(root: Path, filename_prefix: str, width: int, height: int, *,
                  now: time.struct_time | None = None) -> tuple[Path, str, int, str]:
    """Where a batch goes: `(folder, file name stem, first counter, subfolder)`.

    `filename_prefix` is split as ComfyUI does (`normpath`, then dirname/basename); the folder
    is created; a prefix that would leave `root` raises `ImageInputError`.
    """
    if "%" in filename_prefix:
        filename_prefix = fill_prefix_variables(filename_prefix, width, height, now or time.localtime())
    if "\x00" in filename_prefix:
        raise ImageInputError("filename_prefix", "a file name prefix", "a string containing NUL")
    normalized = os.path.normpath(filename_prefix)
    subfolder, filename = os.path.split(normalized)
    base = Path(root).resolve()
    folder = (base / subfolder).resolve() if subfolder else base
    if os.path.isabs(normalized) or not folder.is_relative_to(base):
        raise ImageInputError("filename_prefix", f"a prefix inside the folder {base}",
                              f"{filename_prefix!r}, which leads outside it")
    folder.mkdir(parents=True, exist_ok=True)
    return folder, filename, next_counter(folder, filename), Path(subfolder).as_posix() if subfolder else ""


def confined_file(root: Path, relative: str, *, input_name: str) -> Path:
    """`root / relative` resolved through symlinks, refused (ImageInputError) when `relative`
    is absolute, contains `..`, a backslash or NUL, or resolves outside `root`."""
    parts = relative.split("/")
    if (not relative or "\x00" in relative or "\\" in relative or os.path.isabs(relative)
            or any(part in ("", ".", "..") for part in parts)):
        raise ImageInputError(input_name, "a file name inside its folder (no '..', no absolute path)",
                              repr(relative))
    base = Path(root).resolve()
    path = base.joinpath(*parts).resolve()
    if not path.is_relative_to(base) or path == base:
        raise ImageInputError(input_name, f"a file inside {base}", f"{relative!r}, which resolves outside it")
    return path


def split_annotation(name: str, default_type: str = "input") -> tuple[str, str]:
    """`"x.png [output]"` -> `("x.png", "output")` (ComfyUI's annotated file names); a name
    without a known annotation keeps `default_type`."""
    for folder_type in FOLDER_TYPES:
        suffix = f" [{folder_type}]"
        if name.endswith(suffix):
            return name[: -len(suffix)], folder_type
    return name, default_type
