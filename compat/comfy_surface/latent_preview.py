"""ComfyUI's `latent_preview` for node packs (compat/previews.py; `TAESD` is comfy_core/models/taesd.py's,
`LatentPreviewMethod` is `comfy.cli_args`'); today's video-TAE previewer, `set_preview_method`,
`default_preview_method`, `VIDEO_TAES` and `preview_to_image(..., do_scale)` are in
compat/latent_preview_video.py."""
from compat.facade import facade, point

facade(__name__, {
    "LatentPreviewer": "compat.previews:LatentPreviewer",
    "Latent2RGBPreviewer": "compat.previews:Latent2RGBPreviewer",
    "TAESDPreviewerImpl": "compat.previews:TAESDPreviewerImpl",
    "get_previewer": "compat.previews:get_previewer",
    # a pack's replacement is the sampling nodes' step callback (nodes/sampling.py `step_callback`)
    "prepare_callback": point("prepare_callback", "compat.previews:prepare_callback"),
    "preview_to_image": "compat.latent_preview_video:preview_to_image",
    "TAEHVPreviewerImpl": "compat.latent_preview_video:TAEHVPreviewerImpl",
    "set_preview_method": "compat.latent_preview_video:set_preview_method",
    "VIDEO_TAES": "compat.latent_preview_video:VIDEO_TAES",
    "default_preview_method": "compat.latent_preview_video:default_preview_method",
    "MAX_PREVIEW_RESOLUTION": "compat.previews:MAX_PREVIEW_RESOLUTION",
    "LatentPreviewMethod": "compat.cli_args:LatentPreviewMethod",
    "args": "compat.cli_args:args",
    "TAESD": "comfy_core.models.taesd:TAESD",
})
