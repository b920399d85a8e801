"""ComfyUI's `comfy_extras.nodes_model_patch`: its nodes' facades (ModelPatchLoader,
USOStyleReference, QwenImageDiffsynthControlnet, ZImageFunControlnet, ...) plus `z_image_convert`,
the Z-Image Fun ControlNet key fusion packs call on a state dict they load themselves (Fill-Nodes'
FL_ZImageControlNetPatch; compat/lumina_controlnet.py over the engine's
`convert_zimage_fun_keys`)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"z_image_convert": "compat.lumina_controlnet:z_image_convert"})
