"""ComfyUI's `comfy.supported_models` for node packs: the config classes of the families we
load (comfy_core/models/model_config.py), so `isinstance(model.model.model_config,
comfy.supported_models.SDXL)` holds as in ComfyUI; `models` lists them in ComfyUI's match order."""
import comfy.supported_models_base as supported_models_base  # noqa: F401  (ComfyUI's module attribute)
from compat.facade import facade

_NAMES = ("SD15", "SD20", "SD21UnclipH", "SDXLRefiner", "SDXL", "SD15_instructpix2pix", "SDXL_instructpix2pix",
          "SVD_img2vid")
facade(__name__, {**{name: f"comfy_core.models.model_config:{name}" for name in _NAMES},
                  "models": "compat.mp_detection:SUPPORTED_MODELS"})
