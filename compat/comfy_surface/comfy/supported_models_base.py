"""ComfyUI's `comfy.supported_models_base` for node packs: `BASE`, the model-config base class
(comfy_core/models/model_config.py), which `model.model.model_config` instances derive from."""
from compat.facade import facade

facade(__name__, {"BASE": "comfy_core.models.model_config:BASE",
                  "ClipTarget": "compat.mp_detection:ClipTarget"})
