"""ComfyUI's `comfy.gligen` (compat/gligen_api.py): the GLIGEN model class and its fuser."""
from compat.facade import facade

facade(__name__, {"Gligen": "compat.gligen_api:Gligen", "GatedSelfAttentionDense": "compat.gligen_api:GatedSelfAttention"})
