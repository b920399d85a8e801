"""ComfyUI's `comfy.ldm.genmo.joint_model.asymm_models_joint` (Mochi's DiT, not implemented here:
stand-ins, so `isinstance(network, AsymmDiTJoint)` is False for ours; compat/ldm_genmo.py)."""
from compat.facade import facade

facade(__name__, {name: "compat.ldm_genmo:" + name for name in (
    "modulated_rmsnorm", "residual_tanh_gated_rmsnorm", "AsymmetricAttention", "AsymmetricJointBlock", "FinalLayer",
    "AsymmDiTJoint")})
