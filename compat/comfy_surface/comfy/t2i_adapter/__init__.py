"""ComfyUI's `comfy.t2i_adapter` package for node packs."""
