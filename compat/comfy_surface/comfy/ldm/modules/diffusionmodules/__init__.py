"""ComfyUI's `comfy.ldm.modules.diffusionmodules` package for node packs."""
