"""ComfyUI's `comfy.supported_models` for node packs: the config classes of the families we
load (comfy_core/models/model_config.py: SD1/SD2/SDXL/SVD and the DiT families' `SD3`, `Flux`,
`FluxSchnell`, `FluxInpaint`, `Chroma`, the Wan configs `WAN21_T2V`, `WAN21_I2V`, ...), so `isinstance(model.model.model_config,
comfy.supported_models.SDXL)` holds as in ComfyUI; ComfyUI's other config classes (HunyuanDiT,
GenmoMochi, WAN22_S2V, ...) exist and match no model (compat/mp_supported_models.py);
`models` lists ours in ComfyUI's match order."""
import comfy.supported_models_base as supported_models_base  # noqa: F401  (ComfyUI's module attribute)
from compat.facade import facade
from compat.mp_supported_models import OTHER_CONFIG_NAMES

_NAMES = ("SD15", "SD20", "SD21UnclipH", "SDXLRefiner", "SDXL", "SD15_instructpix2pix", "SDXL_instructpix2pix",
          "SVD_img2vid", "SD3", "Flux", "FluxInpaint", "FluxSchnell", "Chroma", "WAN21_T2V", "WAN21_I2V",
          "WAN21_FunControl2V", "WAN21_Vace", "WAN21_Camera", "WAN22_Camera", "WAN22_T2V")
facade(__name__, {**{name: f"comfy_core.models.model_config:{name}" for name in _NAMES},
                  **{name: f"compat.mp_supported_models:{name}" for name in OTHER_CONFIG_NAMES},
                  "models": "compat.mp_detection:SUPPORTED_MODELS"})
