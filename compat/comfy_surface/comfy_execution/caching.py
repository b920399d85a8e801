"""ComfyUI's `comfy_execution.caching`: its executor's cache classes, working standalone for packs
that build, use or patch them (compat/execution_caching.py). The engine's own executor does not
use them (its cache is graph/'s): a pack's replacement of a method here (ComfyUI-LG_HotReload's
`HierarchicalCache.set_prompt`) affects the instances packs build only."""
from compat.facade import facade

facade(__name__, {name: f"compat.execution_caching:{name}" for name in (
    "NODE_CLASS_CONTAINS_UNIQUE_ID", "include_unique_id_in_input", "Unhashable", "to_hashable",
    "CacheKeySet", "CacheKeySetID", "CacheKeySetInputSignature", "BasicCache", "HierarchicalCache",
    "NullCache", "LRUCache", "RAMPressureCache", "DependencyAwareCache", "RAM_CACHE_DEFAULT_RAM_USAGE",
    "RAM_CACHE_OLD_WORKFLOW_OOM_MULTIPLIER", "RAM_CACHE_LARGE_INTERMEDIATE", "all_outputs_dynamic",
    # today's module imports these two (comfy.system_memory, comfy.model_patcher); a pack or test
    # replacing `caching.virtual_memory_available` steers RAMPressureCache.ram_release
    "virtual_memory_available", "is_model_patcher_output")})
