"""`folder_paths` for packs, over the server's `comfy_core.folders.ModelFolders` and folders.

ComfyUI's module (folder_paths.py) keeps `folder_names_and_paths = {kind: ([paths], {exts})}`
and the output/input/temp folders in globals; here every function reads the active
`CompatSession` (compat/session.py), so the answers are the running server's folders.
Semantics follow ComfyUI's functions of the same names (reference/comfyui-contract.md §4).
"""
from __future__ import annotations

import os
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Iterable, Iterator

from comfy_core.folders import MODEL_EXTENSIONS

from compat.session import active

# ComfyUI's `supported_pt_extensions`.
SUPPORTED_PT_EXTENSIONS: frozenset[str] = MODEL_EXTENSIONS
ANNOTATIONS = ("output", "input", "temp")


class UnknownFolderError(KeyError):
    """A folder kind nobody declared (ComfyUI raises KeyError there; packs catch that)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsafePathError(ValueError):
    """A file name or prefix that would lead outside its folder."""


def _kind_known(kind: str) -> None:
    session = active()
    if kind not in session.folders.kinds():
        raise UnknownFolderError(
            f"folder_paths: unknown folder kind {kind!r}; known: {', '.join(session.folders.kinds())}")


def _extensions(kind: str) -> set[str] | None:
    extra = active().extensions.get(kind)
    if extra is None:
        return set(SUPPORTED_PT_EXTENSIONS)
    return None if not extra else set(extra)  # an empty set means "every file", as in ComfyUI


def get_folder_paths(folder_name: str) -> list[str]:
    _kind_known(folder_name)
    return [str(p) for p in active().folders.paths(folder_name)]


def get_filename_list(folder_name: str) -> list[str]:
    """Relative file names (forward slashes, sorted) with the kind's extensions."""
    _kind_known(folder_name)
    return active().folders.filenames(folder_name, _extensions(folder_name))


def get_full_path(folder_name: str, filename: str) -> str | None:
    _kind_known(folder_name)
    path = active().folders.full_path(folder_name, filename)
    return str(path) if path is not None else None


def get_full_path_or_raise(folder_name: str, filename: str) -> str:
    path = get_full_path(folder_name, filename)
    if path is None:
        raise FileNotFoundError(f"Model in folder '{folder_name}' with filename '{filename}' not found.")
    return path


def add_model_folder_path(folder_name: str, full_folder_path: str, is_default: bool = False) -> None:
    """Add a search folder for a kind (a new kind is created); `is_default` puts it first."""
    active().folders.add(folder_name, full_folder_path, first=is_default)


def get_output_directory() -> str:
    return str(active().directory("output"))


def get_input_directory() -> str:
    return str(active().directory("input"))


def get_temp_directory() -> str:
    return str(active().directory("temp"))


def get_user_directory() -> str:
    return str(active().directory("user"))


def get_directory_by_type(type_name: str) -> str | None:
    return str(active().directory(type_name)) if type_name in ANNOTATIONS else None


def annotated_filepath(name: str) -> tuple[str, str | None]:
    """`("x.png", "/abs/output")` for `"x.png [output]"`; `(name, None)` without annotation."""
    for kind in ANNOTATIONS:
        suffix = f" [{kind}]"
        if name.endswith(suffix):
            return name[: -len(suffix)], str(active().directory(kind))
    return name, None


def get_annotated_filepath(name: str, default_dir: str | None = None) -> str:
    """The path meant by an annotated name (input folder by default). Unlike ComfyUI, a name
    that leaves its folder (absolute, `..`) is refused with `UnsafePathError`."""
    relative, base = annotated_filepath(name)
    if base is None:
        base = default_dir if default_dir is not None else get_input_directory()
    parts = Path(relative.replace("\\", "/")).parts
    if not relative or os.path.isabs(relative) or ".." in parts:
        raise UnsafePathError(f"folder_paths.get_annotated_filepath: {name!r} must be a file name inside {base}")
    return os.path.join(base, relative)


def exists_annotated_filepath(name: str) -> bool:
    try:
        return os.path.exists(get_annotated_filepath(name))
    except UnsafePathError:
        return False


def get_save_image_path(filename_prefix: str, output_dir: str, image_width: int = 0, image_height: int = 0
                        ) -> tuple[str, str, int, str, str]:
    """`(full_output_folder, filename, counter, subfolder, filename_prefix)`, ComfyUI's tuple:
    `%width%`/`%height%`/`%year%`... are filled in, the folder is created, the counter is one
    more than the largest `<filename>_<counter>_` in it; a prefix leaving `output_dir` raises."""
    from comfy_core.image.errors import ImageInputError
    from comfy_core.image.file_names import save_location

    try:
        folder, filename, counter, subfolder = save_location(Path(output_dir), filename_prefix, image_width,
                                                             image_height, now=time.localtime())
    except ImageInputError as exc:
        raise UnsafePathError(f"get_save_image_path: {exc}") from None
    return str(folder), filename, counter, subfolder, filename_prefix


def filter_files_extensions(files: Iterable[str], extensions: Iterable[str]) -> list[str]:
    exts = {e.lower() for e in extensions}
    return sorted(f for f in files if not exts or os.path.splitext(f)[1].lower() in exts)


class FolderNamesAndPaths(MutableMapping):
    """`folder_paths.folder_names_and_paths`: `{kind: ([paths], {extensions})}` as a live view.

    Packs read it and assign to it (`folder_names_and_paths["ipadapter"] = ([path], exts)`);
    an assignment adds the folders to the server's model folders and records the extensions.
    """

    def __getitem__(self, kind: str) -> tuple[list[str], set[str]]:
        session = active()
        if kind not in session.folders.kinds():
            raise UnknownFolderError(f"folder_paths: unknown folder kind {kind!r}")
        exts = session.extensions.get(kind, set(SUPPORTED_PT_EXTENSIONS))
        return [str(p) for p in session.folders.paths(kind)], exts

    def __setitem__(self, kind: str, value: Any) -> None:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"folder_names_and_paths[{kind!r}] must be ([paths], {{extensions}}), got {value!r}")
        paths, exts = value
        session = active()
        for path in paths:
            session.folders.add(kind, path)
        session.extensions[kind] = set(exts)

    def __delitem__(self, kind: str) -> None:
        raise TypeError("folder_paths.folder_names_and_paths: removing a folder kind is not supported")

    def __iter__(self) -> Iterator[str]:
        return iter(active().folders.kinds())

    def __len__(self) -> int:
        return len(active().folders.kinds())


def module_attribute(name: str) -> Any:
    """`folder_paths.<name>` for ComfyUI's module-level values that depend on the server."""
    session = active()
    if name == "models_dir":
        return str(session.folders.models_dir)
    if name == "base_path":
        return str(Path(session.folders.models_dir).parent)
    if name in ("output_directory", "input_directory", "temp_directory", "user_directory"):
        return str(session.directory(name.split("_")[0]))
    raise AttributeError(f"module 'folder_paths' has no attribute {name!r}")
