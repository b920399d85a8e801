"""ComfyUI's `comfy.ldm.lumina` package for node packs (this engine runs no Lumina model)."""
