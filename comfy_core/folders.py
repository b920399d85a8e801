"""Model folders: where checkpoints, VAEs, LoRAs, embeddings... are looked up.

A `ModelFolders` object is built once by the host (server, command line, notebook) from a base
directory plus any ComfyUI-format `extra_model_paths.yaml` files, then passed explicitly. The
yaml format is ComfyUI's: top-level sections (`comfyui:`, `a111:`, anything) each with an
optional `base_path`, an optional `is_default`, and `kind: path` entries whose value may hold
several paths, one per line. Relative paths resolve against `base_path`, which itself resolves
against the yaml file's own folder. The `a111` section names AUTOMATIC1111's folders
(`checkpoints: models/Stable-diffusion`, `loras: models/Lora`, ...).

This module does not import torch, so the graph engine may use it too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import yaml

# Folder kind -> the file extensions it lists. ComfyUI's `supported_pt_extensions`.
MODEL_EXTENSIONS: frozenset[str] = frozenset({".ckpt", ".pt", ".pt2", ".bin", ".pth", ".safetensors", ".pkl", ".sft"})

DEFAULT_KINDS: Mapping[str, str] = {
    # kind -> sub-folder of the models directory
    "checkpoints": "checkpoints",
    "vae": "vae",
    "loras": "loras",
    "embeddings": "embeddings",
    # A legacy kind's folder joins its kind's (`LEGACY_KINDS`), in ComfyUI's order: text_encoders
    # then clip, unet then diffusion_models.
    "text_encoders": "text_encoders",
    "clip": "clip",
    "unet": "unet",
    "diffusion_models": "diffusion_models",
    "diffusers": "diffusers",
    "upscale_models": "upscale_models",
    "controlnet": "controlnet",
    "vae_approx": "vae_approx",
    "clip_vision": "clip_vision",
    "style_models": "style_models",
    "gligen": "gligen",
    "hypernetworks": "hypernetworks",
    "configs": "configs",
    "model_patches": "model_patches",  # ComfyUI's ModelPatchLoader (USO, DiffSynth ControlNets, ...)
    # the rest of ComfyUI 0.3.64's kinds, then today's (its folder_paths.py, late 2026)
    "photomaker": "photomaker",
    "classifiers": "classifiers",
    "audio_encoders": "audio_encoders",
    "latent_upscale_models": "latent_upscale_models",
    "background_removal": "background_removal",
    "frame_interpolation": "frame_interpolation",
    "geometry_estimation": "geometry_estimation",
    "optical_flow": "optical_flow",
    "detection": "detection",
}

# Kinds whose folder is beside the models directory, under the base directory (ComfyUI's
# `custom_nodes`, `datasets` and `fonts`).
BASE_KINDS: Mapping[str, str] = {"custom_nodes": "custom_nodes", "datasets": "datasets", "fonts": "fonts"}

# Kinds that list other files than MODEL_EXTENSIONS (ComfyUI's folder_names_and_paths): an empty
# set lists every file; `{""}` lists files without an extension (classifiers); "folder" is
# ComfyUI's marker for diffusers, whose entries are folders.
KIND_EXTENSIONS: Mapping[str, frozenset[str]] = {
    "configs": frozenset({".yaml"}),
    "diffusers": frozenset({"folder"}),
    "classifiers": frozenset({""}),
    "custom_nodes": frozenset(),
    "datasets": frozenset(),
    "fonts": frozenset({".ttf", ".otf"}),
}

# Kinds with more than one default folder, after the one above (ComfyUI's folder_paths lists
# models/t2i_adapter as a second "controlnet" folder).
EXTRA_DEFAULT_FOLDERS: Mapping[str, tuple[str, ...]] = {"controlnet": ("t2i_adapter",)}

# ComfyUI's legacy kind names (folder_paths.map_legacy): each is another name of one kind, whose
# folders include the legacy folder (models/clip is a text_encoders folder, models/unet a
# diffusion_models one). Asking for either name gives the same folders.
LEGACY_KINDS: Mapping[str, str] = {"unet": "diffusion_models", "clip": "text_encoders"}


def canonical_kind(kind: str) -> str:
    """The kind a legacy name stands for (`"clip"` -> `"text_encoders"`), any other kind as it is."""
    return LEGACY_KINDS.get(kind, kind)


@dataclass(frozen=True)
class FolderEntry:
    """One model file: `root` is `paths(kind)[path_index]`, `name` is relative to it (forward
    slashes), as ComfyUI's model library lists files."""

    path_index: int
    root: Path
    name: str

    @property
    def path(self) -> Path:
        return self.root / self.name


class ModelFolderError(ValueError):
    """An unknown folder kind, an unreadable yaml file, or a file that does not exist."""


@dataclass
class ModelFolders:
    """Search paths per model kind, in priority order."""

    models_dir: Path
    _paths: dict[str, list[Path]] = field(default_factory=dict)

    @classmethod
    def default(cls, models_dir: str | os.PathLike) -> "ModelFolders":
        root = Path(models_dir).resolve()
        folders = cls(root)
        for kind, sub in DEFAULT_KINDS.items():
            folders._paths.setdefault(canonical_kind(kind), []).append(root / sub)
        for kind, subs in EXTRA_DEFAULT_FOLDERS.items():
            folders._paths[kind].extend(root / sub for sub in subs)
        for kind, sub in BASE_KINDS.items():
            folders._paths.setdefault(kind, []).append(root.parent / sub)
        return folders

    def create_default_dirs(self) -> list[Path]:
        """Create the models directory and every kind's default sub-folder in it (ComfyUI ships
        them in its checkout, and packs list `models/<kind>` at import); returns those created.
        Folders outside the models directory (yaml-added, base-directory kinds) are left alone."""
        created = []
        for paths in self._paths.values():
            for path in paths:
                if path.parent == self.models_dir and not path.is_dir():
                    path.mkdir(parents=True, exist_ok=True)
                    created.append(path)
        return created

    def kinds(self) -> list[str]:
        """Every kind, the legacy names included (packs and compat ask for them by name)."""
        return sorted(set(self._paths) | {old for old, new in LEGACY_KINDS.items() if new in self._paths})

    def declare(self, kind: str) -> None:
        """Make `kind` known, with no folder yet (a pack's `folder_names_and_paths[kind] = ((), exts)`
        in ComfyUI): it lists no file until a folder is added."""
        self._paths.setdefault(canonical_kind(kind), [])

    def add(self, kind: str, path: str | os.PathLike, first: bool = False) -> None:
        resolved = Path(path).resolve()
        paths = self._paths.setdefault(canonical_kind(kind), [])
        if resolved in paths:
            paths.remove(resolved)
        if first:
            paths.insert(0, resolved)
        else:
            paths.append(resolved)

    def paths(self, kind: str) -> list[Path]:
        if canonical_kind(kind) not in self._paths:
            raise ModelFolderError(f"unknown model folder kind {kind!r}; known: {', '.join(self.kinds())}")
        return list(self._paths[canonical_kind(kind)])

    def filenames(self, kind: str, extensions: Iterable[str] | None = MODEL_EXTENSIONS) -> list[str]:
        """Every file under the kind's folders, relative, with forward slashes, sorted, unique."""
        return sorted({entry.name for entry in self.entries(kind, extensions)})

    def entries(self, kind: str, extensions: Iterable[str] | None = MODEL_EXTENSIONS) -> list["FolderEntry"]:
        """Every file under the kind's folders, folder by folder in priority order (a name in two
        folders appears twice, with each folder's index into `paths(kind)`).

        Symbolic links are followed (people link model folders from shared drives or an
        AUTOMATIC1111 install); a link back to a folder already walked is skipped, so a link
        loop cannot hang the listing. Hidden files and folders are left out.
        """
        exts = {e.lower() for e in extensions} if extensions is not None else None
        found: list[FolderEntry] = []
        for index, root in enumerate(self.paths(kind)):
            if not root.is_dir():
                continue
            for dirpath, files in walk_folder(root):
                for name in sorted(files):
                    if name.startswith("."):
                        continue
                    if exts is not None and Path(name).suffix.lower() not in exts:
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    found.append(FolderEntry(index, root, rel.replace(os.sep, "/")))
        return found

    def full_path(self, kind: str, name: str) -> Path | None:
        """The first existing file called `name` (relative) in the kind's folders, or None.

        `name` may come from a remote prompt, so it is confined lexically: an absolute name or
        one with a `..` part is refused. Links inside the folders are followed, as ComfyUI does:
        model folders are set up by the machine's owner, and a checkpoint or a whole folder that
        is a symbolic link to another drive is ordinary. The returned path is the one under the
        folder (not the link's target), so it names what `filenames()` listed.
        """
        rel = Path(name.replace("\\", "/"))
        if not name or rel.is_absolute() or ".." in rel.parts:
            return None
        for root in self.paths(kind):
            candidate = root / rel
            if candidate.is_file():
                return candidate
        return None

    def folders_holding(self, kind: str, marker: str) -> list[str]:
        """The sub-folders (relative, forward slashes, sorted, unique) of the kind's folders that
        contain a file named `marker`: ComfyUI's DiffusersLoader lists the folders holding a
        `model_index.json`. Links are followed; hidden folders are left out."""
        found: set[str] = set()
        for root in self.paths(kind):
            if not root.is_dir():
                continue
            for dirpath, files in walk_folder(root):
                if marker in files:
                    found.add(os.path.relpath(dirpath, root).replace(os.sep, "/"))
        return sorted(found)

    def full_folder_path(self, kind: str, name: str) -> Path | None:
        """The first existing folder called `name` (relative; confined as in `full_path`) in the
        kind's folders, or None."""
        rel = Path(name.replace("\\", "/"))
        if not name or rel.is_absolute() or ".." in rel.parts:
            return None
        for root in self.paths(kind):
            candidate = root / rel
            if candidate.is_dir():
                return candidate
        return None

    def full_path_or_raise(self, kind: str, name: str) -> Path:
        path = self.full_path(kind, name)
        if path is None:
            where = ", ".join(str(p) for p in self.paths(kind))
            raise ModelFolderError(f"model {name!r} not found in {kind} folders ({where})")
        return path

    def extend_from_yaml(self, yaml_path: str | os.PathLike) -> list[Path]:
        """Add every folder named in an extra_model_paths.yaml; returns its custom_nodes folders."""
        mapping, custom_nodes = load_extra_model_paths(yaml_path)
        for kind, paths in mapping.items():
            for path in paths:
                self.add(kind, path)
        return custom_nodes


def load_extra_model_paths(yaml_path: str | os.PathLike) -> tuple[dict[str, list[Path]], list[Path]]:
    """Parse a ComfyUI-format extra_model_paths.yaml.

    Returns `(kind -> [paths], custom_nodes folders)`, every path absolute. Paths are resolved
    against the section's `base_path`, and a relative `base_path` against the yaml's folder.
    """
    yaml_file = Path(yaml_path).resolve()
    try:
        config = yaml.safe_load(yaml_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ModelFolderError(f"cannot read {yaml_file}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelFolderError(f"{yaml_file}: expected a mapping of sections, got {type(config).__name__}")
    mapping: dict[str, list[Path]] = {}
    custom_nodes: list[Path] = []
    for section_name, section in config.items():
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ModelFolderError(f"{yaml_file}: section {section_name!r} must be a mapping")
        base = Path(os.path.expandvars(os.path.expanduser(str(section.get("base_path", "")))))
        if not base.is_absolute():
            base = yaml_file.parent / base
        for kind, value in section.items():
            if kind in ("base_path", "is_default"):
                continue
            for line in str(value).splitlines():
                line = line.strip()
                if not line:
                    continue
                path = Path(os.path.expandvars(os.path.expanduser(line)))
                full = (path if path.is_absolute() else base / path).resolve()
                if kind == "custom_nodes":
                    custom_nodes.append(full)
                else:
                    mapping.setdefault(kind, []).append(full)
    return mapping, custom_nodes


def walk_folder(root: Path) -> Iterator[tuple[str, list[str]]]:
    """`(folder, file names)` under `root`, links followed, hidden folders left out, sorted; a
    link back to a folder already walked is skipped, so a link loop cannot hang a listing."""
    walked: set[str] = set()
    for dirpath, dirnames, files in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in walked:
            dirnames[:] = []
            continue
        walked.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        yield dirpath, files


def subfolders(root: str | os.PathLike) -> list[str]:
    """Every folder under `root` (not `root` itself), relative with forward slashes, sorted:
    ComfyUI's `folder_paths.get_input_subfolders` for the input folder; [] when `root` is no folder."""
    if not os.path.isdir(root):
        return []
    found = []
    for dirpath, _dirs, _files in os.walk(root):
        relative = os.path.relpath(dirpath, root)
        if relative != ".":
            found.append(relative.replace(os.sep, "/"))
    return sorted(found)
