"""ComfyUI's `comfy.ldm.minimax.model` for node packs: MiniMax H3's DiT (ours,
`comfy_core.families.minimax_h3.dit.MiniMaxH3Model`, for `isinstance`) and the audio/video schedule
maps `time_shift_sigma` (ours) and `time_shift_slope` (compat/ldm_minimax.py)."""
from compat.facade import facade

facade(__name__, {
    "MiniMaxH3Model": "comfy_core.families.minimax_h3.dit:MiniMaxH3Model",
    "time_shift_sigma": "comfy_core.families.minimax_h3.layout:time_shift_sigma",
    "time_shift_slope": "compat.ldm_minimax:time_shift_slope",
})
