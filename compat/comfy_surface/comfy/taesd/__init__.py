"""ComfyUI's `comfy.taesd` package for node packs (submodule `taesd`)."""
