"""ModelPatchLoader and USOStyleReference (today's ComfyUI, comfy_extras/nodes_model_patch.py):
model patch files from the `model_patches` folder, and USO's style reference on a Flux model.

ModelPatchLoader reads a file and tells its kind from its key names (comfy_core/model_patches/
patch_files.py); the USO style projector, Qwen-Image's DiffSynth ControlNet and the Z-Image Fun
ControlNet (applied by QwenImageDiffsynthControlnet / ZImageFunControlnet,
nodes/diffsynth_controlnet.py) and Wan's MultiTalk / InfiniteTalk audio patch (applied by
WanInfiniteTalkToVideo, nodes/wan_audio_nodes.py) are built, the other kinds ComfyUI knows (Wan Uni3C, ...) are
refused with an error naming the kind.
USOStyleReference stacks three layers of a SigLIP CLIP_VISION_OUTPUT and returns a clone of the
MODEL whose Flux transformer prepends the projected style tokens to the text stream
(`post_input` patch, comfy_core/model_patches/uso.py).

Both are V1 nodes in today's ComfyUI (no V3-only fields in `/object_info`).
"""
from __future__ import annotations

from typing import Any, Callable

from graph.native import Combo, Input, Output, node
import nodes.checks as checks
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError, describe

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up).

MODULE = "comfy_extras.nodes_model_patch"
MODEL_PATCHES = "model_patches"


def _patch_files(env: Any = None) -> list[str]:
    return (env if isinstance(env, Environment) else current_env()).folders.filenames(MODEL_PATCHES)


@node("ModelPatchLoader", display_name="Load Model Patch", category="model/loaders", python_module=MODULE,
      experimental=True, inputs=[Combo("name", _patch_files)], outputs=[Output("MODEL_PATCH")])
def model_patch_loader(name: str) -> tuple[Any]:
    """A file of the model_patches folders -> MODEL_PATCH (a patcher over the patch's network)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.model_patches.errors import ModelPatchError
    from comfy_core.model_patches.patch_files import load_model_patch

    env = current_env()
    path = model_file(MODEL_PATCHES, name, "name")
    device = getattr(env.memory, "device", None)
    try:
        patch = load_model_patch(path, load_device=device, offload_device="cpu", mmap=env.mmap)
    except (ModelPatchError, CheckpointError) as exc:
        raise NodeInputError("name", "a model patch file this engine builds (a USO style projector, a "
                               "Qwen-Image DiffSynth or a Z-Image Fun ControlNet, Wan's MultiTalk)",
                             str(exc)) from None
    if env.memory is not None:
        env.memory.track(patch)
    return (patch,)


def _uso_projector(model_patch: Any) -> Any:
    from comfy_core.model_patches.uso import UsoStyleProjector

    module = getattr(model_patch, "model", None)
    if not isinstance(module, UsoStyleProjector) or not hasattr(model_patch, "applied"):
        raise NodeInputError("model_patch", "a USO style projector MODEL_PATCH (ModelPatchLoader)",
                             describe(module if module is not None else model_patch))
    return module


@node("USOStyleReference", display_name="Apply USO Style Reference", category="model/patch/flux",
      python_module=MODULE, experimental=True,
      inputs=[Input("model", "MODEL"), Input("model_patch", "MODEL_PATCH"),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT")],
      outputs=[Output("MODEL")])
def uso_style_reference(model: Any, model_patch: Any, clip_vision_output: Any) -> tuple[Any]:
    """A clone of the Flux MODEL with USO's style tokens before its text tokens."""
    from comfy_core.model_patches.errors import ModelPatchError
    from comfy_core.model_patches.uso import UsoStyleProjectorPatch, uso_style_layers

    model = checks.model(model)
    projector = _uso_projector(model_patch)
    family = getattr(getattr(model.model, "family", None), "architecture", None)
    network = getattr(model.model, "diffusion_model", None)
    width = getattr(network, "hidden_size", None)
    # USO's tokens enter at the Flux transformer's post_input point, which only Flux runs.
    if getattr(family, "name", None) != "flux" or width != projector.config.hidden_size:
        raise NodeInputError("model", f"a Flux model of hidden width {projector.config.hidden_size} (USO's projector)",
                             f"{getattr(family, 'name', None) or type(network).__name__} of width {width}")
    try:
        layers = uso_style_layers(clip_vision_output)
    except ModelPatchError as exc:
        raise NodeInputError("clip_vision_output", "a SigLIP CLIP vision output with at least 20 layers",
                             str(exc)) from None
    config = projector.config
    if tuple(layers.shape[2:]) != (config.siglip_tokens, config.siglip_width):
        raise NodeInputError("clip_vision_output", f"{config.siglip_tokens} SigLIP tokens of width "
                             f"{config.siglip_width} (the projector's)",
                             f"{layers.shape[2]} tokens of width {layers.shape[3]}")
    patched = model.clone()
    patched.add_block_patch("post_input", UsoStyleProjectorPatch(model_patch, layers))
    return (patched,)
