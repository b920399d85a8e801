"""ComfyUI's `comfy.ldm.modules.sub_quadratic_attention` (compat/sub_quadratic.py)."""
from compat.facade import facade

facade(__name__, {"efficient_dot_product_attention": "compat.sub_quadratic:efficient_dot_product_attention"})
