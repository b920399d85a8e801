"""ApplyFBCacheOnModel as scripts and packs reach WaveSpeed's node: `nodes.NODE_CLASS_MAPPINGS[
"ApplyFBCacheOnModel"]().patch(model, object_to_patch, residual_diff_threshold, ...)` (the facade
class compat/node_facades.py builds from the built-in's spec) with the
pack's method name, parameter order and defaults (compat/comfy_node_functions.json,
comfy_node_arguments.json)."""
from __future__ import annotations



def test_the_pack_method_with_its_parameter_order_and_defaults(session, tmp_path):
    from compat.node_facades import class_for
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.wrappers import BLOCK_SPLIT
    from tests.fixtures.flux_files import write_tiny_flux

    model = load_diffusion_model(write_tiny_flux(tmp_path / "flux.safetensors"))
    from nodes.first_block_cache import apply_fbcache_on_model

    cls = class_for(apply_fbcache_on_model.__node_spec__)  # what nodes.NODE_CLASS_MAPPINGS holds for it
    assert cls.FUNCTION == "patch" and cls.CATEGORY == "wavespeed"
    (patched,) = cls().patch(model, "diffusion_model", 0.12)
    holder = patched.model_options["transformer_options"][BLOCK_SPLIT]
    assert (holder.residual_diff_threshold, holder.max_consecutive_cache_hits, holder.start, holder.end) == \
        (0.12, -1, 0.0, 1.0)
    # the pack's order: max_consecutive_cache_hits comes before start and end
    (patched,) = cls().patch(model, "diffusion_model", 0.2, 3, 0.1, 0.9)
    holder = patched.model_options["transformer_options"][BLOCK_SPLIT]
    assert (holder.max_consecutive_cache_hits, holder.start, holder.end) == (3, 0.1, 0.9)
    assert cls().patch(model, "diffusion_model", 0.0)[0] is model
