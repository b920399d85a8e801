"""ComfyUI's `comfy.nested_tensor` for node packs (comfy_core/latent/nested.py): `NestedTensor`, the
nested LATENT's samples (LTX-2's [video, audio]), and `cat_nested`. The class is ours, so a pack's
`NestedTensor([...])` is what the samplers and the audio-video nodes take as nested."""
from compat.facade import facade

facade(__name__, {name: f"comfy_core.latent.nested:{name}" for name in ("NestedTensor", "cat_nested")})
