"""ComfyUI's `comfy` package for node packs: a compatibility surface (see compat/__init__.py)."""
