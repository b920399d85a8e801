"""ComfyUI's `comfy.conds` for node packs (compat/mp_conds.py): conditioning value wrappers with
`process_cond`, `can_concat`, `concat`, `size`."""
from compat.facade import facade

facade(__name__, {name: f"compat.mp_conds:{name}" for name in (
    "CONDRegular", "CONDNoiseShape", "CONDCrossAttn", "CONDConstant", "CONDList", "lcm")})
