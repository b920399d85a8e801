"""Upscale models (ESRGAN, Real-ESRGAN, SwinIR, HAT, DAT, ... as `spandrel` detects them from
their weights) and the overlapping-tile scaling they run under.

- `tiling`: ComfyUI's `tiled_scale` / `tiled_scale_multidim` semantics (feathered blending of
  overlapping tiles) in bounded memory: the output plus a band of one tile row.
- `files`: reading a weight file the way ComfyUI's `load_torch_file` unwraps it.
- `loading`: state-dict preparation and `spandrel` model detection (image models only).
- `run`: upscaling an IMAGE batch with a loaded model, tile 512 / overlap 32, halving the tile on
  out-of-memory, as ComfyUI's ImageUpscaleWithModel.
- `latent_models`: latent upscale models (ComfyUI's `latent_upscale_models` folder): the registry
  of kinds told apart by tensor names, loading, the LATENT_UPSCALE_MODEL wire object, and
  LTXVLatentUpsampler's un-normalise / upscale / normalise.
- `ltx_latent_upsampler`: LTX's latent upsampler network (spatial x2, rational, temporal and
  spatiotemporal variants of LTX-Video 0.9 and LTX-2 / 2.3 / 2.5), its configuration from names,
  shapes and metadata.

`spandrel` (and the torchvision it needs) is imported only inside the functions that load or run
a model, so importing this package stays light. No graph import.
"""
