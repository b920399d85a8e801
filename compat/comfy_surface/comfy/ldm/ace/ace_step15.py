"""ComfyUI's `comfy.ldm.ace.ace_step15` (the ACE-Step 1.5 network: AceStepConditionGenerationModel,
its condition encoder, DiT and audio tokenizer): not provided, because this engine's ACE-Step 1.5
network (comfy_core/families/ace_step15/network.py) does not have the structure of ComfyUI's
classes. The module imports; reading any of its names raises `AceStep15NetworkNotProvidedError`,
an ImportError that says so (compat/ace_step15_api.py)."""
from compat.ace_step15_api import network_module_getattr

__getattr__ = network_module_getattr(__name__)
