"""Images, as ComfyUI handles them: IMAGE tensors `[B, H, W, C]` in 0..1 (and `[B, C, H, W]`
planes where noted). Pure functions with no graph import; the image nodes in nodes/ check their
inputs and call them. numpy, torch and Pillow are imported inside the functions that use them
where a module is read at start-up (names, file naming), so importing those stays torch-free.
Import submodules directly; nothing happens at import.

Maths: composite, porter_duff, blend (modes), filters (Gaussian blur, sharpen), morphology,
color (YCbCr), dither, fit, noise, stitch; `names` holds their option lists.
Files and pixels: errors (ImageInputError), pixels (image_to_uint8, check_image_batch), resize
(center_crop, upscale_samples = ComfyUI's common_upscale, lanczos), decode (LoadImage /
LoadImageMask frames), file_names (prefix variables, counters, save locations, confinement),
png (metadata, save_images, SaveTarget, write_image_batch, preview_target).
"""
