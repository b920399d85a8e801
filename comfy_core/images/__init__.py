"""Image maths and image files, for the image nodes and for packs' helpers (compat): IMAGE
tensors `[B, H, W, C]` in 0..1 to and from pixels, resizing, decoding files, saved-file naming
and PNG writing, as ComfyUI does them. numpy, torch and Pillow are imported inside the functions
that use them, so importing these modules stays torch-free (server start-up). Import submodules
directly; nothing happens at import.

    errors      ImageInputError (names the node, the input, what was expected and received)
    pixels      image_to_uint8, check_image_batch
    resize      center_crop, upscale_samples (ComfyUI's common_upscale), lanczos
    decode      load_image_frames, load_mask_channel (ComfyUI's LoadImage / LoadImageMask)
    file_names  fill_prefix_variables, next_counter, save_location, confined_file, split_annotation
    png         png_metadata, save_images, SaveTarget, write_image_batch, preview_target
"""
