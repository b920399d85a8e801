"""ComfyUI's `comfy.ldm.flux` package for node packs (this engine runs no Flux model; the shared
DiT helpers packs import live here)."""
