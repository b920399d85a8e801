"""ComfyUI's `comfy.supported_models` for node packs: the config classes of the families we
load (each in its family package's `supported_models.py`, comfy_core/families/<name>/: SD1/SD2/SDXL/SVD
and the DiT families' `SD3`, `Flux`, `FluxSchnell`, `FluxInpaint`, `Chroma`, the Wan configs `WAN21_T2V`,
`WAN21_I2V`, ...; compat/mp_supported_models.py: OUR_CONFIG_TARGETS), so `isinstance(model.model.model_config,
comfy.supported_models.SDXL)` holds as in ComfyUI; ComfyUI's other config classes (HunyuanDiT,
GenmoMochi, WAN22_S2V, ...) exist and match no model (compat/mp_supported_models.py);
`models` lists ours in ComfyUI's match order."""
import comfy.supported_models_base as supported_models_base  # noqa: F401  (ComfyUI's module attribute)
from compat.facade import facade
from compat.mp_supported_models import OTHER_CONFIG_NAMES, OUR_CONFIG_TARGETS

facade(__name__, {**OUR_CONFIG_TARGETS,
                  **{name: f"compat.mp_supported_models:{name}" for name in OTHER_CONFIG_NAMES},
                  "models": "compat.mp_detection:SUPPORTED_MODELS"})
