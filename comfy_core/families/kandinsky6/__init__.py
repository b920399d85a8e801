"""Kandinsky 6 (joint video + audio generation): today's ComfyUI's `comfy/ldm/kandinsky6/`,
`comfy_extras/nodes_kandinsky6.py`, `comfy/text_encoders/kandinsky6.py`; written here.

So far this package holds the release contract (`contract.py`: the latent sizes, patch size and
generation defaults of ComfyUI's `core_contract.py`), the joint video+audio LATENT the three
Kandinsky 6 nodes build and edit (`latents.py`), and the DiT's configuration read from a file's
names and shapes (`config.py`, after ComfyUI's `detection.py`, release and diffusers layouts).
The DiT network, its Qwen2.5-VL + CLIP-L text encoder set and the 44.1 kHz MMAudio VAE + BigVGAN
v2 vocoder are not written yet, so the family is not registered in `comfy_core/families/__init__.py` (no `definition()`).
"""
