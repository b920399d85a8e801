"""ComfyUI's top-level `utils` package (its submodules only: install_util, json_util,
extra_config; compat/top_utils.py). A pack's own `utils` on `sys.path` wins (compat/finder.py)."""
