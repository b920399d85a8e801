"""Image maths on IMAGE tensors `[B, H, W, C]` in 0..1 (and `[B, C, H, W]` planes where noted):
compositing, blend modes, Gaussian filters, grey-scale morphology, YCbCr, ordered dithering,
fitting, noise, stitching. Pure torch functions with no graph import; the image nodes in nodes/
check their inputs and call them. `names` holds the option lists without importing torch.
"""
