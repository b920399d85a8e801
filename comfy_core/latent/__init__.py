"""Latent maths on LATENT samples `[B, C, h, w]` (or video `[B, C, t, h, w]`): arithmetic
between latents, batch regrouping, and the LATENT_OPERATION callables, after ComfyUI's
comfy_extras/nodes_latent.py and nodes_rebatch.py (0.3.64), written here.

    arithmetic  repeat_to_batch, resize_spatial, fit_to, interpolate, concat, cut
    operations  gaussian_kernel, TonemapReinhard, Sharpen, OperationOnCFG (pre-CFG hook)
    rebatch     rebatch_latents
    nested      NestedTensor (the nested LATENT, ComfyUI's comfy.nested_tensor), pack_latents / unpack_latents

Pure torch functions and small value objects with no graph import; the latent nodes check
inputs and call them. Import submodules directly; nothing happens at import.
"""
