"""ComfyUI's `comfy_extras.nodes_easycache`: its nodes' facades (`EasyCacheNode`, `LazyCacheNode`)
plus the holders and wrapper functions packs import by name (a pack that distributes sampling
checks `isinstance(transformer_options["easycache"], EasyCacheHolder)`); they are ours, from
comfy_core/model_patches/step_cache.py."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
_HOME = "comfy_core.model_patches.step_cache:"
facade(__name__, {
    "EasyCacheHolder": _HOME + "EasyCacheHolder",
    "LazyCacheHolder": _HOME + "LazyCacheHolder",
    "easycache_forward_wrapper": _HOME + "easycache_forward_wrapper",
    "lazycache_predict_noise_wrapper": _HOME + "lazycache_predict_noise_wrapper",
    "easycache_calc_cond_batch_wrapper": _HOME + "easycache_calc_cond_batch_wrapper",
    "easycache_sample_wrapper": _HOME + "step_cache_sample_wrapper",
})
