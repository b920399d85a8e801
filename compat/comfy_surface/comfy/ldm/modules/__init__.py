"""ComfyUI's `comfy.ldm.modules` package for node packs."""
