"""ComfyUI's deprecated `comfy_extras.chainner_models` package (its models now come from spandrel)."""
