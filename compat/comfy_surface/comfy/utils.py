"""ComfyUI's `comfy.utils` for node packs (compat/progress.py, compat/tensors.py)."""
from compat.progress import ProgressBar
from compat.tensors import common_upscale, load_torch_file, repeat_to_batch_size

PROGRESS_BAR_ENABLED = True
