"""The names of AUTOMATIC1111's emphasis modes (webui 1.10 `modules/sd_emphasis.py`) and the
default, importable without torch; `comfy_core.prompt.emphasis` implements them."""
from __future__ import annotations

EMPHASIS_MODES: tuple[str, ...] = ("Original", "No norm", "Ignore", "None")
DEFAULT_EMPHASIS = "Original"
