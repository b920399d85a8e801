"""The nodes of ComfyUI's comfy_extras/nodes_multigpu.py (2026): MultiGPU_WorkUnits ("MultiGPU CFG
Split"), SelectModelDevice, SelectCLIPDevice, SelectVAEDevice, declared as ComfyUI's V3 schema
renders them (graph/v3_schema.py); behaviour read from that file, comfy/multigpu.py and
comfy/model_management.py (`get_gpu_device_options`, `resolve_gpu_device_option`), written here.

This runtime computes on one device (its memory manager's: one GPU, or the CPU), so the nodes do
what ComfyUI does on a single-device machine:
* The device combos offer what ComfyUI offers there: ["default", "cpu"] (model, CLIP) and
  ["default"] (VAE); the `gpu:N` entries appear only with several GPUs. As in ComfyUI, any value
  passes validation (a workflow made on a multi-GPU machine opens here).
* A device name resolves as ComfyUI resolves it against the device list: "default" -> none
  (the loader's own devices), "cpu" -> the CPU, "gpu:0" -> the one GPU (on a CPU-only machine,
  none), any other `gpu:N` or unknown name -> unavailable: the input passes through (a clone)
  and a message is logged.
* The output is always a clone; the input is never changed. The first selection on a chain
  records the loader's load / offload devices on its clone (ComfyUI records them on the shared
  module; here they travel with the clones), so that "default" restores them later.
  - "default": load and offload devices back to the recorded ones (the VAE's offload device
    back to its recorded one, ComfyUI's `vae_offload_device()` on one device).
  - "cpu" (model, CLIP): load and offload device both the CPU; a model whose weights are not
    float32 computes in float32 there (ComfyUI's `unet_manual_cast` on a CPU: neither fp16 nor
    bf16 is used on it), as the object patch `manual_cast_dtype` (ComfyUI's
    `set_model_compute_dtype`) when its layers cast their weights as they run (fp8 storage); a
    model of plain bfloat16 / float16 layers computes in that dtype on the CPU, where ComfyUI
    would cast to float32 (making the layers cast would change the module every clone shares).
    The VAE refuses "cpu" (passes through, as ComfyUI).
  - "gpu:0" on a GPU machine: load device the GPU, offload device the recorded one.
* MultiGPU_WorkUnits: with no second device there is nothing to deep-clone; ComfyUI logs "No
  extra torch devices need initialization" and returns a clone of the model, as here.
"""
from __future__ import annotations

import logging
from inspect import cleandoc
from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices
from nodes.errors import NodeInputError, describe

log = logging.getLogger(__name__)

MODULE = "comfy_extras.nodes_multigpu"
CATEGORY = "advanced/multigpu"
_BASE_LOAD = "_select_base_load_device"
_BASE_OFFLOAD = "_select_base_offload_device"


# -- devices ---------------------------------------------------------------------------------------

def runtime_devices() -> list:
    """The devices this runtime computes on (ComfyUI's `get_all_torch_devices`): its one device."""
    return [model_devices()[0]]


def device_options(env: Any = None, device_count: int = 1) -> list[str]:
    """ComfyUI's `get_gpu_device_options()`: "default", "cpu", then `gpu:i` for each device only
    when there are several. This runtime computes on one device (its memory manager's,
    `runtime_devices`), so the count is 1 unless given: the editor's combo is rendered without
    asking torch (importing it would cost every server start, and `/object_info` stays torch-free)."""
    return ["default", "cpu"] + ([f"gpu:{i}" for i in range(device_count)] if device_count > 1 else [])


def device_options_no_cpu(env: Any = None, device_count: int = 1) -> list[str]:
    """ComfyUI's `get_gpu_device_options_no_cpu()`: the options without "cpu" (the VAE's)."""
    return [option for option in device_options(env, device_count) if option != "cpu"]


def resolve_device_option(option: Any) -> Any:
    """ComfyUI's `resolve_gpu_device_option`: "default" / None -> None, "cpu" -> the CPU, `gpu:i`
    -> the i-th GPU of the device list (None when there is no such GPU), anything else -> None."""
    import torch

    if option is None or option == "default":
        return None
    if option == "cpu":
        return torch.device("cpu")
    if not isinstance(option, str) or not option.startswith("gpu:"):
        return None
    try:
        index = int(option[len("gpu:"):])
    except ValueError:
        return None
    gpus = [device for device in runtime_devices() if device.type != "cpu"]
    return gpus[index] if 0 <= index < len(gpus) else None


def _device_combo(options: Any) -> InputSpec:
    """V3's `Combo.Input("device", options=...)`, the options read from the runtime at render time."""
    return InputSpec("device", options, REQUIRED, {"multiselect": False})


def _any_device(device: Any = "default") -> bool:
    """VALIDATE_INPUTS: every device name is accepted (unknown ones pass through at run time);
    naming `device` here turns the combo check off for it, as in ComfyUI."""
    return True


# -- retargeting a patcher -------------------------------------------------------------------------

def _remember_base(patcher: Any) -> None:
    """Record the loader's devices on the (already cloned) patcher once per chain."""
    if not hasattr(patcher, _BASE_LOAD):
        setattr(patcher, _BASE_LOAD, patcher.load_device)
        setattr(patcher, _BASE_OFFLOAD, patcher.offload_device)


def _apply_device(patcher: Any, resolved: Any, base_offload: Any = None) -> Any:
    """Route the cloned `patcher` to `resolved` (None: the recorded loader devices; the CPU: both
    devices; a GPU: load there, offload to the recorded device). With one device there is never
    a second copy of the weights to make: the memory manager moves the shared module."""
    _remember_base(patcher)
    offload = base_offload if base_offload is not None else getattr(patcher, _BASE_OFFLOAD)
    if resolved is None:
        patcher.load_device, patcher.offload_device = getattr(patcher, _BASE_LOAD), offload
    elif resolved.type == "cpu":
        patcher.load_device = patcher.offload_device = resolved
    else:
        patcher.load_device, patcher.offload_device = resolved, offload
    return patcher


def _casts_at_run_time(module: Any) -> bool:
    """True when every layer holding non-float32 weights casts them to its input's dtype as it
    runs (`comfy_cast_weights`: fp8 storage, ComfyUI's manual-cast layers)."""
    import torch

    for layer in module.modules():
        weight = layer._parameters.get("weight") if hasattr(layer, "_parameters") else None
        if weight is not None and weight.dtype != torch.float32 and not getattr(layer, "comfy_cast_weights", False):
            return False
    return True


def _cpu_compute_dtype(model: Any) -> None:
    """ComfyUI's `_force_supported_compute_dtype` for the CPU: weights that are not float32
    compute in float32 there, as the clone's object patch `manual_cast_dtype` (ComfyUI's
    `set_model_compute_dtype`). Here that needs layers that cast their weights as they run (fp8
    storage); a model built of plain bfloat16 / float16 layers computes in their dtype, which the
    CPU runs too (ComfyUI forces casting layers; this runtime does not change the shared module)."""
    import torch

    dtype = model.model_dtype() if callable(getattr(model, "model_dtype", None)) else torch.float32
    if dtype == torch.float32 or not hasattr(model.model, "manual_cast_dtype"):
        return
    if not _casts_at_run_time(model.model):
        log.info("Select Model Device: %s weights compute in %s on cpu (its layers do not cast).", dtype, dtype)
        return
    log.info("Select Model Device: using %s compute dtype on cpu (model weight dtype was %s).", torch.float32, dtype)
    model.add_object_patch("manual_cast_dtype", torch.float32)


def _unavailable(what: str, device: Any) -> None:
    log.info("Select %s Device: requested device '%s' not available, passing through unchanged.", what, device)


def _device_name(device: Any) -> Any:
    if device is not None and not isinstance(device, str):
        raise NodeInputError("device", "a device name (default, cpu, gpu:N)", describe(device))
    return device


# -- nodes -----------------------------------------------------------------------------------------

@v3_node("MultiGPU_WorkUnits", display_name="MultiGPU CFG Split", category=CATEGORY, python_module=MODULE,
         description=cleandoc("""
             Prepares model to have sampling accelerated via splitting work units.

             Should be placed after nodes that modify the model object itself, such as compile or attention-switch nodes.

             Other than those exceptions, this node can be placed in any order.
             """),
         inputs=[Socket("model", "MODEL"), Int("max_gpus", default=2, min=1, step=1)],
         outputs=[Output("MODEL")])
def multigpu_work_units(model: Any, max_gpus: int) -> tuple[Any]:
    """A clone of the model: there is no extra device to put a copy on (module docstring)."""
    model = checks.model(model)
    checks.integer(max_gpus, "max_gpus", 1)
    log.info("No extra torch devices need initialization, skipping initializing MultiGPU Work Units.")
    return (model.clone(),)


_MODEL_DOC = cleandoc("""
    Place the diffusion model on a specific device (default / cpu / gpu:N).

    - "default" restores the device assigned by the loader (even after a
      prior Select Model Device call).
    - "cpu" pins both the load and offload device to CPU.
    - "gpu:N" pins the load device to the Nth available GPU; the offload
      device is restored to the loader's original choice.

    When the requested device differs from the device the input model is
    already on, a fresh model is spawned via the loader's reload factory
    (cached_patcher_init) so the new patcher owns independent weights on
    the new device. Loaders that don't support multigpu (no factory) will
    cause the node to pass through unchanged with a warning.

    If the workflow already has MultiGPU CFG Split applied and the chosen
    GPU collides with one of the existing multigpu clones, that clone is
    dropped so two patchers don't end up bound to the same device.

    When the selected device does not exist on the current machine
    (e.g. a workflow built on a 2-GPU box opened on a 1-GPU box),
    the node passes the model through unchanged and logs a message
    instead of failing.

    NOTE: Placing Select Model Device *after* a node that has already
    consumed the same model (e.g. a KSampler that ran on this model on
    the original device) is not recommended -- any state the prior
    consumer mutated on the original model will be observed when the
    selected device matches the original (fast path). Place Select Model
    Device before any consumer of the model.
    """)


@v3_node("SelectModelDevice", display_name="Select Model Device", category=CATEGORY, python_module=MODULE,
         description=_MODEL_DOC, inputs=[Socket("model", "MODEL"), _device_combo(device_options)],
         outputs=[Output("MODEL")], validate_inputs=_any_device)
def select_model_device(model: Any, device: str = "default") -> tuple[Any]:
    """A clone of the model routed to `device` (module docstring)."""
    model = checks.model(model).clone()
    resolved = resolve_device_option(_device_name(device))
    if resolved is None and device not in (None, "default"):
        _unavailable("Model", device)
        return (model,)
    model = _apply_device(model, resolved)
    if resolved is not None and resolved.type == "cpu":
        _cpu_compute_dtype(model)
    return (model,)


_CLIP_DOC = cleandoc("""
    Place the CLIP text encoder on a specific device (default / cpu / gpu:N).

    - "default" restores the device assigned by the loader.
    - "cpu" pins both the load and offload device to CPU.
    - "gpu:N" pins the load device to the Nth available GPU.

    When the selected device does not exist on the current machine
    (e.g. a workflow built on a 2-GPU box opened on a 1-GPU box),
    the node passes the CLIP through unchanged and logs a message
    instead of failing.
    """)


@v3_node("SelectCLIPDevice", display_name="Select CLIP Device", category=CATEGORY, python_module=MODULE,
         description=_CLIP_DOC, inputs=[Socket("clip", "CLIP"), _device_combo(device_options)],
         outputs=[Output("CLIP")], validate_inputs=_any_device)
def select_clip_device(clip: Any, device: str = "default") -> tuple[Any]:
    """A clone of the CLIP whose patcher is routed to `device` (module docstring)."""
    clip = checks.clip(clip).clone()
    resolved = resolve_device_option(_device_name(device))
    if resolved is None and device not in (None, "default"):
        _unavailable("CLIP", device)
        return (clip,)
    clip.patcher = _apply_device(clip.patcher, resolved)
    return (clip,)


_VAE_DOC = cleandoc("""
    Place the VAE on a specific device (default / gpu:N).

    - "default" restores the device assigned by the loader.
    - "gpu:N" pins the load device to the Nth available GPU; the offload
      device is set to the standard VAE offload device.

    CPU is intentionally not exposed in the UI for the VAE; if a workflow
    supplies "cpu" anyway (e.g. opened from another machine), the request
    is dropped with a log message and the VAE is passed through unchanged.

    When the selected device does not exist on the current machine
    (e.g. a workflow built on a 2-GPU box opened on a 1-GPU box),
    the node passes the VAE through unchanged and logs a message
    instead of failing.
    """)


@v3_node("SelectVAEDevice", display_name="Select VAE Device", category=CATEGORY, python_module=MODULE,
         description=_VAE_DOC, inputs=[Socket("vae", "VAE"), _device_combo(device_options_no_cpu)],
         outputs=[Output("VAE")], validate_inputs=_any_device)
def select_vae_device(vae: Any, device: str = "default") -> tuple[Any]:
    """A clone of the VAE routed to `device`; "cpu" is refused (passed through), as in ComfyUI."""
    vae = checks.vae(vae).clone()
    resolved = resolve_device_option(_device_name(device))
    if resolved is None and device not in (None, "default"):
        _unavailable("VAE", device)
        return (vae,)
    if resolved is not None and resolved.type == "cpu":
        log.info("Select VAE Device: CPU is not a supported choice, passing through unchanged.")
        return (vae,)
    return (_apply_device(vae.patcher, resolved),)
