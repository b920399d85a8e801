"""ComfyUI's `comfy.ldm` package (model code) for node packs: facades over our modules."""
