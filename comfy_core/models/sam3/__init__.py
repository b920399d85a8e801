"""SAM 3 / 3.1 (Segment Anything with Concepts; Carion et al. 2025), as ComfyUI loads and runs it:
`config.py` (sizes and markers from the file's names and shapes), `backbone.py` (ViTDet trunk and
FPN necks), `detector.py` (the concept detector), `sam_heads.py` (SAM's prompt encoder and mask
decoder), `model.py` (the network ComfyUI's nodes call), `clip.py` (its text encoder as a CLIP),
`load.py` (files -> MODEL + CLIP). Video tracking (memory encoder / attention, multiplex
propagation) is not built yet. Importing this package imports nothing heavy."""
