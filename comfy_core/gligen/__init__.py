"""GLIGEN (Li et al. 2023, "GLIGEN: Open-Set Grounded Text-to-Image Generation"): text boxes as
extra tokens that gated self-attention layers inside the UNet's transformer blocks attend to.

- `model`: `GligenModel` (the position net and one gated self-attention "fuser" per UNet
  transformer), `set_position` / `set_empty` -> the `middle_patch` the sampler installs;
- `load`: `load_gligen(path)` -> the GLIGEN wire object (a `Patcher` over a `GligenModel`, whose
  `.model.set_position(...)` packs call as in ComfyUI).
"""
