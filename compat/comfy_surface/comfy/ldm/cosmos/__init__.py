"""ComfyUI's `comfy.ldm.cosmos` package for node packs: only `predict2`, Cosmos-Predict2's
`MiniTrainDIT`, which is the network of the Anima family built here (comfy_core/families/anima).
The Cosmos 1 video models, their tokenizer and VAE (`model`, `blocks`, `vae`, `cosmos_tokenizer`)
are a family not implemented here."""
from compat.submodules import submodule_attribute

__getattr__ = submodule_attribute(__name__)  # submodules as attributes, as after ComfyUI start-up
