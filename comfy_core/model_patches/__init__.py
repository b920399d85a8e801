"""Model patches: the runtime maths of ComfyUI's model-patch and guidance nodes (FreeU, PAG, SAG,
ToMe, HyperTile, Kohya Deep Shrink, Differential Diffusion, FreSca, hypernetworks, attention
multipliers, Perp-Neg, compute dtype, the EasyCache / LazyCache step caches, the DiTs' first-block
cache), one concept per module.

Each patch is a small value object installed on a clone of a MODEL (or CLIP) patcher under one of
ComfyUI's `model_options` keys (block patches in `transformer_options["patches"]`, attention
replacements in `transformer_options["patches_replace"]`, sampler hooks at the top level) and is
called by the UNet or the sampler with ComfyUI's arguments. Settings are data, so equal settings
give equal `cache_signature()`s. torch-only; nothing here imports graph/ or nodes/.
"""
