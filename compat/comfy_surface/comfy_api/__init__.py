"""ComfyUI's `comfy_api` package for node packs: the V3 API (compat/v3/)."""
