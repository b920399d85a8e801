"""Upscale models (ESRGAN, Real-ESRGAN, SwinIR, HAT, DAT, ... as `spandrel` detects them from
their weights) and the overlapping-tile scaling they run under.

- `tiling`: ComfyUI's `tiled_scale` / `tiled_scale_multidim` semantics (feathered blending of
  overlapping tiles) in bounded memory: the output plus a band of one tile row.
- `files`: reading a weight file the way ComfyUI's `load_torch_file` unwraps it.
- `loading`: state-dict preparation and `spandrel` model detection (image models only).
- `run`: upscaling an IMAGE batch with a loaded model, tile 512 / overlap 32, halving the tile on
  out-of-memory, as ComfyUI's ImageUpscaleWithModel.

`spandrel` (and the torchvision it needs) is imported only inside the functions that load or run
a model, so importing this package stays light. No graph import.
"""
