"""ComfyUI's `comfy.rmsnorm` (compat/rms_norm.py)."""
from compat.facade import facade

facade(__name__, {"rms_norm": "compat.rms_norm:rms_norm", "RMSNorm": "compat.rms_norm:RMSNorm",
                  "rms_norm_torch": "torch.nn.functional:rms_norm"})
