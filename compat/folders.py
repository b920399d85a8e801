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
from types import ModuleType
from typing import Any, Iterable, Iterator

from comfy_core.folders import KIND_EXTENSIONS, MODEL_EXTENSIONS, canonical_kind, subfolders

from compat.facade import FacadeModule
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


def kind_extensions(kind: str) -> set[str]:
    """The extensions a kind lists, as `folder_names_and_paths[kind][1]` (empty: every file):
    a pack's declaration, else the kind's own (configs: .yaml, ...), else the model files'."""
    declared = active().extensions.get(kind)
    if declared is not None:
        return set(declared)
    return set(KIND_EXTENSIONS.get(canonical_kind(kind), SUPPORTED_PT_EXTENSIONS))


def _extensions(kind: str) -> set[str] | None:
    extensions = kind_extensions(kind)
    return extensions or None  # an empty set means "every file", as in ComfyUI


def map_legacy(folder_name: str) -> str:
    """ComfyUI's legacy kind names: `unet` is `diffusion_models`, `clip` is `text_encoders`."""
    return canonical_kind(folder_name)


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


def _set_directory(kind: str, path: str) -> None:
    """ComfyUI's `set_<kind>_directory`: the running server's folder changes for everyone (a
    global there; the session's environment here)."""
    setattr(active().env, f"{kind}_dir", Path(path))


def set_output_directory(output_dir: str) -> None:
    _set_directory("output", output_dir)


def set_input_directory(input_dir: str) -> None:
    _set_directory("input", input_dir)


def set_temp_directory(temp_dir: str) -> None:
    _set_directory("temp", temp_dir)


def set_user_directory(user_dir: str) -> None:
    _set_directory("user", user_dir)


def get_input_subfolders() -> list[str]:
    """Every folder under the input folder, relative, forward slashes, sorted (not the root)."""
    return subfolders(get_input_directory())


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


# ComfyUI's cache of content types by extension, which packs may extend ("webp" is an image to
# every platform's mimetypes only recently; "fbx" is a 3-D model).
EXTENSION_CONTENT_TYPES: dict[str, str] = {"webp": "image", "fbx": "model"}


def filter_files_content_types(files: Iterable[str], content_types: Iterable[str]) -> list[str]:
    """The files whose content type (`image`, `video`, `audio`, `model`: the first part of the
    extension's MIME type) is one of `content_types`, in their order."""
    import mimetypes

    wanted = set(content_types)
    result = []
    for name in files:
        extension = name.split(".")[-1]
        kind = EXTENSION_CONTENT_TYPES.get(extension)
        if kind is None:
            mime, _ = mimetypes.guess_type(name, strict=False)
            if not mime:
                continue
            kind = EXTENSION_CONTENT_TYPES.setdefault(extension, mime.split("/")[0])
        if kind in wanted:
            result.append(name)
    return result


def recursive_search(directory: str, excluded_dir_names: list[str] | None = None
                     ) -> tuple[list[str], dict[str, float]]:
    """`(files relative to directory, {folder: mtime})` of everything under `directory`, links
    followed, the named folders left out; `([], {})` when it is not a folder."""
    if not os.path.isdir(directory):
        return [], {}
    excluded = set(excluded_dir_names or ())
    files: list[str] = []
    folders: dict[str, float] = {directory: os.path.getmtime(directory)}
    for dirpath, subdirs, names in os.walk(directory, followlinks=True, topdown=True):
        subdirs[:] = [d for d in subdirs if d not in excluded]
        files.extend(os.path.relpath(os.path.join(dirpath, n), directory) for n in names)
        for sub in subdirs:
            path = os.path.join(dirpath, sub)
            try:
                folders[path] = os.path.getmtime(path)
            except FileNotFoundError:  # removed while walking
                continue
    return files, folders


def get_filename_list_(folder_name: str) -> tuple[list[str], dict[str, float], float]:
    """ComfyUI's uncached listing: `(sorted names, {folder: mtime}, time.perf_counter())`."""
    _kind_known(folder_name)
    names: set[str] = set()
    folders: dict[str, float] = {}
    extensions = kind_extensions(folder_name)
    for root in get_folder_paths(folder_name):
        files, found = recursive_search(root, excluded_dir_names=[".git"])
        names.update(filter_files_extensions(files, extensions))
        folders.update(found)
    return sorted(names), folders, time.perf_counter()


class CacheHelper:
    """ComfyUI's `folder_paths.cache_helper`: inside `with cache_helper:` listings put in it with
    `set` are answered by `get` (ComfyUI's /object_info lists each kind once so); outside, `get`
    answers the default and `set` keeps nothing."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[list[str], dict[str, float], float]] = {}
        self.active = False

    def get(self, key: str, default: Any = None) -> Any:
        return self.cache.get(key, default) if self.active else default

    def set(self, key: str, value: tuple[list[str], dict[str, float], float]) -> None:
        if self.active:
            self.cache[key] = value

    def clear(self) -> None:
        self.cache.clear()

    def __enter__(self) -> "CacheHelper":
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False
        self.clear()


cache_helper = CacheHelper()
# ComfyUI keeps listings here between calls; this engine lists afresh on every call, so it stays
# empty unless a pack fills it (packs clear or pop entries to force a new listing: harmless here).
filename_list_cache: dict[str, tuple[list[str], dict[str, float], float]] = {}


def cached_filename_list_(folder_name: str) -> tuple[list[str], dict[str, float], float] | None:
    """A listing kept by `cache_helper` or in `filename_list_cache` whose folders are unchanged
    (same mtimes, none added), else None: ComfyUI's rule."""
    kind = canonical_kind(folder_name)
    held = cache_helper.get(kind)
    if held is not None:
        return held
    out = filename_list_cache.get(kind)
    if out is None:
        return None
    for folder, mtime in out[1].items():
        if not os.path.isdir(folder) or os.path.getmtime(folder) != mtime:
            return None
    if any(os.path.isdir(p) and p not in out[1] for p in get_folder_paths(kind)):
        return None
    return out


class FolderNamesAndPaths(MutableMapping):
    """`folder_paths.folder_names_and_paths`: `{kind: ([paths], {extensions})}` as a live view.

    Packs read it and assign to it (`folder_names_and_paths["ipadapter"] = ([path], exts)`);
    an assignment adds the folders to the server's model folders and records the extensions.
    """

    def __getitem__(self, kind: str) -> tuple[list[str], set[str]]:
        session = active()
        if kind not in session.folders.kinds():
            raise UnknownFolderError(f"folder_paths: unknown folder kind {kind!r}")
        # The kind's own extension set, kept: packs add to it in place, as in ComfyUI
        # (`folder_names_and_paths[kind][1].add(".json")`), and later listings see the addition.
        extensions = session.extensions.setdefault(kind, kind_extensions(kind))
        return [str(p) for p in session.folders.paths(kind)], extensions

    def __setitem__(self, kind: str, value: Any) -> None:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"folder_names_and_paths[{kind!r}] must be ([paths], {{extensions}}), got {value!r}")
        paths, exts = value
        session = active()
        session.folders.declare(kind)  # known even with no folder yet: `((), {".json"})`
        for path in paths:
            session.folders.add(kind, path)
        session.extensions[kind] = exts if isinstance(exts, set) else set(exts)

    def __delitem__(self, kind: str) -> None:
        raise TypeError("folder_paths.folder_names_and_paths: removing a folder kind is not supported")

    def __iter__(self) -> Iterator[str]:
        return iter(active().folders.kinds())

    def __len__(self) -> int:
        return len(active().folders.kinds())


class FolderPathsModule(FacadeModule):
    """The `folder_paths` module: its `__file__` is `<base path>/folder_paths.py`.

    In ComfyUI `folder_paths.py` sits in the install root, so packs take
    `os.path.dirname(folder_paths.__file__)` for that root and keep their files there
    (ComfyUI-Login's `login/` password folder, workspace-manager's `my_workflows/`, older
    Custom-Scripts' `web/extensions/`). Here the module's file is in our source tree; the root a
    ComfyUI user expects is the server's base folder (`--base-directory`, else the folder it was
    started in: `folder_paths.base_path`), so that is what its folder reads as, per server as
    `base_path` is. Without a server (tooling reading modules' files) it is the module's own file.
    The module's spec (`__spec__.origin`, what `importlib.reload` and `inspect.getsource` read
    the source through) and its code's file names stay the real ones; an assignment to
    `__file__` (importlib's on reload) is kept as that fallback."""

    @property  # type: ignore[misc]
    def __file__(self) -> str:  # type: ignore[override]
        try:
            base = module_attribute("base_path")
        except Exception:  # noqa: BLE001 -- no server in force: the module's own file
            return ModuleType.__dict__["__dict__"].__get__(self)["__file__"]
        return os.path.join(base, "folder_paths.py")

    @__file__.setter
    def __file__(self, value: str) -> None:
        ModuleType.__dict__["__dict__"].__get__(self)["__file__"] = value


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
