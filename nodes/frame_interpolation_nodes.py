"""Frame interpolation nodes, V3 schemas as today's ComfyUI declares them
(`comfy_extras/nodes_frame_interpolation.py`); written here, the networks and the frame loop in
comfy_core/models/frame_interp/.

- FrameInterpolationModelLoader: a file of the `frame_interpolation` folder -> INTERP_MODEL (FILM,
  told by `extract.extract_sublevels.convs.0.0.conv.weight`, else RIFE's IFNet, raw RIFE names
  accepted); float16 on a CUDA device, else float32.
- FrameInterpolate: `multiplier - 1` model frames between each pair of input frames, at
  `t = k / multiplier`, the input frames kept exactly: `(N - 1) * multiplier + 1` frames, clamped
  to 0..1 (fewer than 2 frames come back unchanged). Frames too small for the network (FILM under
  64 pixels, RIFE's reflection padding) are padded and cropped back (comfy_core/models/frame_interp/model.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices, model_file, model_files, report_progress
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_frame_interpolation"
KIND = "frame_interpolation"
INTERP_MODEL = "INTERP_MODEL"

_model_files = model_files(KIND)  # the loader combo's live options


@v3_node("FrameInterpolationModelLoader", display_name="Load Frame Interpolation Model", category="loaders",
         python_module=MODULE,
         inputs=[InputSpec("model_name", _model_files, REQUIRED, {  # a live V3 combo
             "tooltip": "Select a frame interpolation model to load. Models must be placed in the "
                        "'frame_interpolation' folder.", "multiselect": False})],
         outputs=[Output(INTERP_MODEL)])
def load_frame_interpolation_model(model_name: str) -> tuple[Any]:
    """See the module docstring."""
    from comfy_core.models.frame_interp.model import FrameInterpolationWeightsError, load_frame_interpolation

    path = model_file(KIND, model_name, "model_name")
    device, offload = model_devices()
    try:
        return (load_frame_interpolation(path, load_device=device, offload_device=offload),)
    except FrameInterpolationWeightsError as exc:
        raise NodeInputError("model_name", "a FILM or RIFE frame interpolation model", str(exc)) from None


@v3_node("FrameInterpolate", display_name="Frame Interpolate", category="image/video", python_module=MODULE,
         search_aliases=["rife", "film", "frame interpolation", "slow motion", "interpolate frames", "vfi"],
         inputs=[Socket("interp_model", INTERP_MODEL), Socket("images", "IMAGE"),
                 Int("multiplier", default=2, min=2, max=16)],
         outputs=[Output("IMAGE")])
def frame_interpolate(interp_model: Any, images: "torch.Tensor", multiplier: int) -> tuple["torch.Tensor"]:
    """See the module docstring."""
    from comfy_core.models.frame_interp.model import InterpolationModel

    if not isinstance(interp_model, InterpolationModel):
        raise NodeInputError("interp_model", "an INTERP_MODEL (from FrameInterpolationModelLoader)",
                             describe(interp_model))
    images = checks.image_batch(images, "images")
    multiplier = checks.integer(multiplier, "multiplier", 2, 16)
    if images.shape[0] < 2:
        return (images,)
    if images.shape[-1] != 3:
        raise NodeInputError("images", "RGB frames (3 channels)", f"{images.shape[-1]} channels")
    return (interp_model.interpolate(images, multiplier, on_frame=report_progress),)
