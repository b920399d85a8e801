"""ComfyUI's `comfy_execution` package for node packs: a compatibility surface (compat/)."""
