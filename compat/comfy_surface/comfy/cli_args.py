"""ComfyUI's `comfy.cli_args` for node packs (compat/cli_args.py)."""
from compat.cli_args import LatentPreviewMethod, PerformanceFeature, args
