"""ComfyUI's `comfy.ldm.models` package for node packs."""
