"""ComfyUI's `comfy.ldm.aura` (AuraFlow): a family this engine does not implement; its classes are
importable stand-ins (compat/unsupported_networks.py)."""
