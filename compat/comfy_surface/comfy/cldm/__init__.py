"""ComfyUI's `comfy.cldm` package (ControlNet networks) for node packs."""
