"""ComfyUI's `comfy.float` for node packs (compat/ldm_float.py)."""
from compat.facade import facade

facade(__name__, {
    "stochastic_rounding": "compat.ldm_float:stochastic_rounding",
    "manual_stochastic_round_to_float8": "compat.ldm_float:manual_stochastic_round_to_float8",
})
