"""Upscale-model nodes: ComfyUI's `comfy_extras.nodes_upscale_model` (UpscaleModelLoader,
ImageUpscaleWithModel).

Names, sockets and semantics are ComfyUI 0.3.64's, written here; the work is in
comfy_core/upscale/ (loading through `spandrel`, tiled scaling). UPSCALE_MODEL is spandrel's
`ImageModelDescriptor`, as in ComfyUI, so packs that read `.scale` or `.model` keep working.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.context import current
from graph.native import Combo, Input, Output, node
import nodes.checks as checks
from nodes.environment import current_env, model_file, model_files
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch and spandrel are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import them (server start-up).

MODULE = "comfy_extras.nodes_upscale_model"
KIND = "upscale_models"


_model_files = model_files(KIND)  # the loader combo's live options


@node("UpscaleModelLoader", display_name="Load Upscale Model", category="loaders", python_module=MODULE,
      inputs=[Combo("model_name", _model_files)], outputs=[Output("UPSCALE_MODEL")])
def upscale_model_loader(model_name: str) -> tuple[Any]:
    """The single-image model in `models/upscale_models/<model_name>`, architecture and scale
    detected from its weights by spandrel."""
    from comfy_core.upscale.files import UpscaleModelError
    from comfy_core.upscale.loading import load_upscale_model

    if not isinstance(model_name, str):
        raise NodeInputError("model_name", f"a file name in the {KIND} folders", describe(model_name))
    path = model_file(KIND, model_name, "model_name")
    try:
        return (load_upscale_model(path),)
    except UpscaleModelError as exc:
        raise NodeInputError("model_name", "a single-image upscale model spandrel can load", str(exc)) from exc


def _upscale_model(value: Any) -> Any:
    """An UPSCALE_MODEL: a spandrel ImageModelDescriptor (callable, with scale and channels)."""
    if not (callable(value) and all(hasattr(value, a) for a in ("scale", "input_channels", "model", "to"))):
        raise NodeInputError("upscale_model", "an UPSCALE_MODEL (a spandrel ImageModelDescriptor)", describe(value))
    return value


@node("ImageUpscaleWithModel", display_name="Upscale Image (using Model)", category="image/upscaling",
      python_module=MODULE, inputs=[Input("upscale_model", "UPSCALE_MODEL"), Input("image", "IMAGE")],
      outputs=[Output("IMAGE")])
def image_upscale_with_model(upscale_model: Any, image: torch.Tensor) -> tuple[torch.Tensor]:
    """Every image scaled by the model, in 512-pixel tiles overlapping by 32 (halved on
    out-of-memory, down to 128), on the host's compute device; clamped to 0..1, 3 channels.
    Progress is reported per tile, and an interrupt stops it between tiles."""
    import torch

    from comfy_core.upscale.run import upscale_image, wants_room

    model = _upscale_model(upscale_model)
    image = checks.image_batch(image, "image")
    if image.shape[-1] != model.input_channels:
        raise NodeInputError("image", f"an IMAGE with {model.input_channels} channels (the model's input)",
                             describe(image))
    memory = current_env().memory
    device = memory.device if memory is not None else torch.device("cpu")
    if memory is not None and wants_room(model, image, device):
        memory.free_all()  # offload other models first, as ComfyUI frees memory before upscaling
    ctx = current()
    return (upscale_image(model, image, device=device,
                          offload_device=memory.offload_device if memory is not None else "cpu",
                          progress=ctx.progress if ctx is not None else None),)
