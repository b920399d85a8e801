"""ComfyUI's `comfy_execution.progress`: the per-prompt progress registry and its handlers over our
engine's progress (compat/progress_api.py). ComfyUI's module global `global_progress_registry` is
not mirrored: `get_progress_state()` gives the running prompt's registry."""
from compat.facade import facade

facade(__name__, {name: f"compat.progress_api:{name}" for name in (
    "NodeState", "NodeProgressState", "PreviewImageTuple", "ProgressHandler", "CLIProgressHandler",
    "WebUIProgressHandler", "ProgressRegistry", "reset_progress_state", "add_progress_handler",
    "get_progress_state")})
