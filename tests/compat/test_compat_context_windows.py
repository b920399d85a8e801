"""`comfy.context_windows` as packs use it (compat/comfy_surface/comfy/context_windows.py): a pack
builds ComfyUI's handler itself, puts it in a MODEL clone's options, hooks its callbacks through
`comfy.patcher_extension`, and `comfy.samplers.calc_cond_batch` runs it; `comfy_extras.
nodes_context_windows` holds the two nodes."""
from __future__ import annotations

import torch


def test_a_pack_built_handler_runs_in_calc_cond_batch(session):
    import comfy.context_windows as cw
    import comfy.patcher_extension
    import comfy.samplers

    from comfy_core.sampling import context_windows as ours

    assert cw.IndexListContextHandler is ours.IndexListContextHandler
    assert cw.ContextSchedules.STATIC_STANDARD == "standard_static"
    assert cw.ContextFuseMethods.LIST_STATIC == ["pyramid", "relative", "flat", "overlap-linear"]
    handler = cw.IndexListContextHandler(context_schedule=cw.get_matching_context_schedule("standard_static"),
                                         fuse_method=cw.get_matching_fuse_method("flat"), context_length=4,
                                         context_overlap=1, dim=2)
    windows = []
    comfy.patcher_extension.add_callback_with_key(
        cw.IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS, "my_pack",
        lambda h, model, x, conds, t, mo, idx, window, *rest: windows.append(window.index_list), handler.callbacks)
    frames = []

    def apply_model(x, sigma, c_crossattn=None, transformer_options=None, **_):
        frames.append(x.shape[2])
        return x * 2.0

    x = torch.randn(1, 3, 10, 2, 2)
    options = {"context_handler": handler, "transformer_options": {"sample_sigmas": torch.tensor([2.0, 0.0])}}
    (out,) = comfy.samplers.calc_cond_batch(apply_model, [[{"model_conds": {"c_crossattn": torch.zeros(1, 4, 8)}}]],
                                           x, torch.tensor([2.0]), options)
    # today's default causal_window_fix: a window not at frame 0 also runs the frame before it
    assert windows == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]] and frames == [4, 5, 5]
    torch.testing.assert_close(out, x * 2.0)
    assert cw.create_windows_batched(10, handler, {}) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_comfy_extras_module_holds_the_nodes(session):
    import comfy_extras.nodes_context_windows as module

    # today's module also holds LTX's (LTXVContextWindows, class LTXVContextWindowsNode)
    assert set(module.NODE_CLASS_MAPPINGS) == {"ContextWindowsManual", "WanContextWindowsManual", "LTXVContextWindows"}
    assert module.LTXVContextWindowsNode is module.NODE_CLASS_MAPPINGS["LTXVContextWindows"]
