"""ComfyUI's `comfy_extras.nodes_audio`: its nodes' facades plus the module-level `load(filepath)`
ComfyUI's LoadAudio / RecordAudio read files with (web-viewer's audio nodes call it on browser
recordings) and `f32_pcm` (compat/extras_audio.py, over the decoder our LoadAudio uses)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {name: f"compat.extras_audio:{name}" for name in ("load", "f32_pcm")})
