"""ComfyUI's import surface for node packs (comfy.*, comfy_api, folder_paths, server, ...).

Thin facades over our own modules, installed as an import hook when packs load. Nothing of ours
imports this package.
"""
