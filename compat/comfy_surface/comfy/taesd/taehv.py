"""ComfyUI's `comfy.taesd.taehv` for node packs: the tiny video autoencoder is not implemented here;
its classes are importable stand-ins (compat/taehv_api.py)."""
from compat.facade import facade

facade(__name__, {name: "compat.taehv_api:" + name for name in ("TAEHV", "MemBlock", "TPool", "TGrow")})
