"""ComfyUI's `comfy.ldm.ace.vae.music_dcae_pipeline` for node packs: ACE-Step's music DCAE (mel
autoencoder plus vocoder, `comfy_core.models.music_dcae`)."""
from compat.facade import facade

facade(__name__, {"MusicDCAE": "comfy_core.models.music_dcae:MusicDCAE"})
