"""ComfyUI's `comfy.text_encoders` package for node packs (submodules: sd2_clip, sd3_clip)."""
