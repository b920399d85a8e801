"""ComfyUI's `comfy_extras.nodes_easycache` as packs import it: the node classes under ComfyUI's
class names, and the holder classes and wrappers the nodes install (ours), so a pack's
`isinstance(..., EasyCacheHolder)` check sees the holder a run carries."""
from __future__ import annotations


def test_module_holds_the_nodes_holders_and_wrappers(session):
    import comfy_extras.nodes_easycache as module

    from comfy_core.model_patches import step_cache as sc

    assert set(module.NODE_CLASS_MAPPINGS) == {"EasyCache", "LazyCache"}
    assert module.EasyCacheNode is module.NODE_CLASS_MAPPINGS["EasyCache"]
    assert module.LazyCacheNode is module.NODE_CLASS_MAPPINGS["LazyCache"]
    assert module.EasyCacheHolder is sc.EasyCacheHolder and module.LazyCacheHolder is sc.LazyCacheHolder
    assert module.easycache_sample_wrapper is sc.step_cache_sample_wrapper
    assert module.easycache_forward_wrapper is sc.easycache_forward_wrapper
    assert module.lazycache_predict_noise_wrapper is sc.lazycache_predict_noise_wrapper
    assert module.easycache_calc_cond_batch_wrapper is sc.easycache_calc_cond_batch_wrapper
    # ComfyUI's constructor order: threshold, start, end, subsample_factor, offload_cache_diff, verbose
    holder = module.EasyCacheHolder(0.2, 0.15, 0.95, 8, False, True, output_channels=4)
    assert (holder.subsample_factor, holder.verbose, holder.output_channels, holder.name) == (8, True, 4, "EasyCache")
