"""ComfyUI's `latent_preview` for node packs (compat/previews.py; `TAESD` is comfy_core/models/taesd.py's,
`LatentPreviewMethod` is `comfy.cli_args`')."""
from compat.facade import facade, point

facade(__name__, {
    "LatentPreviewer": "compat.previews:LatentPreviewer",
    "Latent2RGBPreviewer": "compat.previews:Latent2RGBPreviewer",
    "TAESDPreviewerImpl": "compat.previews:TAESDPreviewerImpl",
    "get_previewer": "compat.previews:get_previewer",
    # a pack's replacement is the sampling nodes' step callback (nodes/sampling.py `step_callback`)
    "prepare_callback": point("prepare_callback", "compat.previews:prepare_callback"),
    "preview_to_image": "compat.previews:preview_to_image",
    "MAX_PREVIEW_RESOLUTION": "compat.previews:MAX_PREVIEW_RESOLUTION",
    "LatentPreviewMethod": "compat.cli_args:LatentPreviewMethod",
    "args": "compat.cli_args:args",
    "TAESD": "comfy_core.models.taesd:TAESD",
})
