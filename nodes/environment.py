"""What the built-in nodes may know about their host: folders, devices, preview settings.

The host (server, command line, test) builds one `Environment` and hands it to the executor;
nodes reach it through `current_env()`, which reads the running node's context. There is no
module-level default instance: outside the executor a fresh default is built on each call.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comfy_core.folders import ModelFolders
from graph.context import current


@dataclass
class Environment:
    folders: ModelFolders
    output_dir: Path
    input_dir: Path
    temp_dir: Path
    user_dir: Path
    preview_method: str = "latent2rgb"  # "none" | "auto" | "latent2rgb" | "taesd" (--preview-method)
    memory: Any = None  # comfy_core.memory.MemoryManager, when the host manages devices
    dtype_policy: Any = None  # comfy_core loading options (e.g. force fp16), or None for defaults
    extra: dict[str, Any] = field(default_factory=dict)
    disable_metadata: bool = False  # --disable-metadata: save nodes write no prompt/workflow text chunks
    # Attention backend the loaders give loaded models and VAEs (comfy_core.attention names);
    # None keeps the default (sdpa). From ComfyUI's attention flags.
    attention_backend: str | None = None
    vae_attention_backend: str | None = None
    mmap: bool = True  # loaders map safetensors weights (False: --disable-mmap, copy into memory)
    preview_size: int = 512  # --preview-size: the longest side of a live preview frame

    @classmethod
    def rooted_at(cls, base: str | Path, **overrides: Any) -> "Environment":
        """ComfyUI's layout under one folder: models/, output/, input/, temp/, user/."""
        root = Path(base).resolve()
        values: dict[str, Any] = dict(
            folders=ModelFolders.default(root / "models"),
            output_dir=root / "output",
            input_dir=root / "input",
            temp_dir=root / "temp",
            user_dir=root / "user",
        )
        values.update(overrides)
        return cls(**values)

    def ensure_dirs(self) -> None:
        for path in (self.output_dir, self.input_dir, self.temp_dir, self.user_dir):
            path.mkdir(parents=True, exist_ok=True)


# The host's environment where no node is running (a pack's route handler or start-up code calling
# a built-in node, as ComfyUI's global folder_paths allows): set by the host for its tasks.
host_env: contextvars.ContextVar["Environment | None"] = contextvars.ContextVar("host_env", default=None)


def current_env() -> Environment:
    """The running node's environment, else the host's (`host_env`), else a default rooted at the
    working directory."""
    ctx = current()
    env = ctx.env if ctx is not None else None
    if isinstance(env, Environment):
        return env
    env = host_env.get()
    if isinstance(env, Environment):
        return env
    return Environment.rooted_at(Path.cwd())


def model_file(kind: str, name: Any, input_name: str) -> str:
    """The path of the model file `name` in the `kind` folders (checkpoints, loras, ...), for a
    loader node's combo input `input_name`; a name that is not a file there is that input's error."""
    from nodes.errors import NodeInputError

    path = current_env().folders.full_path(kind, name) if isinstance(name, str) else None
    if path is None:
        raise NodeInputError(input_name, f"a file in the {kind} folders", repr(name))
    return path


def model_files(kind: str, extensions: tuple[str, ...] | None = None):
    """A loader combo's live options: `options(env=None)` lists the files of one model-folder kind
    (model files, or those with `extensions`) in the given environment or the running node's."""
    def options(env: Any = None) -> list[str]:
        folders = (env if isinstance(env, Environment) else current_env()).folders
        return folders.filenames(kind, extensions) if extensions else folders.filenames(kind)
    return options


def report_progress(done: int, total: int) -> None:
    """The running node's progress bar (ComfyUI's `ProgressBar.update_absolute`); outside a
    node run it does nothing."""
    ctx = current()
    if ctx is not None:
        ctx.progress(done, total)


def model_devices() -> tuple[Any, Any]:
    """(load device, offload device) of the running node's memory manager, both the CPU without
    one: where a model that is not handed to the manager (MoGe, Depth Anything 3) runs and waits."""
    import torch

    memory = current_env().memory
    if memory is None:
        return torch.device("cpu"), torch.device("cpu")
    return memory.device, memory.offload_device
