"""Model patching nodes with ComfyUI's names and semantics: LoraLoader, LoraLoaderModelOnly,
and ours, SetAttentionBackend (MODEL: the UNet's self and cross attention) and
SetVAEAttentionBackend (VAE).

Each returns clones with one more patch; inputs are never mutated, so cached outputs stay valid.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graph.native import Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes._names import ATTENTION_BACKENDS, OPTIONAL_BACKENDS, missing_optional_backends
from nodes.environment import current_env, model_file
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch and comfy_core are imported inside the functions that run: registering these nodes and
# rendering /object_info must not import torch (server start-up, see nodes/_names.py).

log = logging.getLogger(__name__)


def _lora_names(env: Any = None) -> list[str]:
    folders = env.folders if env is not None and hasattr(env, "folders") else current_env().folders
    return folders.filenames("loras")


def load_lora_file(path: Path) -> dict[str, torch.Tensor]:
    """A LoRA file's tensors (`.safetensors`, or a pickled `.ckpt`/`.pt` read with weights_only).

    Read by our checkpoint reader, not safetensors' `load_file`, whose reader leaks a little
    per tensor on every call (`comfy_core.checkpoint.reader.load_tensor_file`)."""
    import torch

    from comfy_core.checkpoint.reader import load_tensor_file

    try:
        if path.suffix.lower() == ".safetensors":
            return load_tensor_file(path)[0]
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise NodeInputError("lora_name", "a readable LoRA file (.safetensors, or a .ckpt/.pt of tensors)",
                             f"{path.name!r}: {exc}") from exc
    if isinstance(data, dict) and "state_dict" in data and isinstance(data["state_dict"], dict):
        data = data["state_dict"]
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise NodeInputError("lora_name", "a LoRA file holding a name -> tensor mapping", repr(path.name))
    return data


def _patchable(value: Any, input_name: str) -> None:
    """A MODEL or CLIP (None too: ComfyUI's LoRA loading skips a missing one) that takes weight patches."""
    if value is not None and not hasattr(value, "add_patches"):
        raise NodeInputError(input_name, f"a {input_name.upper()} object (with weight patches)", describe(value))


def _apply_lora(model: Any, clip: Any, lora_name: str, strength_model: float,
                strength_clip: float, apply: Any = None, done: str = "patched") -> tuple[Any, Any]:
    """The LoRA loaders' work: the file read and matched as ComfyUI's `load_lora_for_models`, its
    records put on clones by `apply` (merged weight patches unless given: LoraLoaderBypass's
    bypass), the file's metadata attached; `done` words the log line."""
    _patchable(model, "model")
    _patchable(clip, "clip")
    if strength_model == 0 and strength_clip == 0:
        return model, clip  # ComfyUI's shortcut: nothing to load
    path = model_file("loras", lora_name, "lora_name")
    # The file's state names the patches, so re-running this node on an unchanged file (say, after
    # strength_clip changed) gives a MODEL with the same cache signature and downstream nodes hit.
    # Taken before reading, so a file rewritten meanwhile never gets the old name.
    stat = Path(path).stat()
    source = ("lora-file", str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)
    tensors = load_lora_file(Path(path))
    from comfy_core.lora.loader import add_weight_patches, load_lora_for_models

    new_model, new_clip, report = load_lora_for_models(model, clip, tensors, strength_model, strength_clip,
                                                       lora_name, source, apply or add_weight_patches)
    log.info("LoRA %s %s %d model and %d clip weights", lora_name, done, report.model_keys, report.clip_keys)
    metadata = _lora_metadata(Path(path))
    if metadata and new_model is not None and new_model is not model:
        # ComfyUI's LoRA loaders attach the file's metadata (GetICLoRAParameters reads it).
        new_model.attachments["lora_metadata"] = metadata
    return new_model, new_clip


def _lora_metadata(path: Path) -> dict[str, str]:
    """A `.safetensors` LoRA's header metadata (other files have none)."""
    if path.suffix.lower() != ".safetensors":
        return {}
    from comfy_core.checkpoint.reader import CheckpointFile

    with CheckpointFile(path) as file:
        return dict(file.metadata or {})


# LoraLoader's inputs, also LoraLoaderBypass's (nodes/lora_bypass.py); the model-only loaders'.
LORA_INPUTS = (Input("model", "MODEL", tooltip="The diffusion model the LoRA will be applied to."),
               Input("clip", "CLIP", tooltip="The CLIP model the LoRA will be applied to."),
               Combo("lora_name", _lora_names, tooltip="The name of the LoRA."),
               Float("strength_model", default=1.0, min=-100.0, max=100.0, step=0.01,
                     tooltip="How strongly to modify the diffusion model. This value can be negative."),
               Float("strength_clip", default=1.0, min=-100.0, max=100.0, step=0.01,
                     tooltip="How strongly to modify the CLIP model. This value can be negative."))
LORA_MODEL_ONLY_INPUTS = (Input("model", "MODEL"), Combo("lora_name", _lora_names),
                          Float("strength_model", default=1.0, min=-100.0, max=100.0, step=0.01))


@node("LoraLoader", category="loaders", display_name="Load LoRA",
      description="LoRAs modify diffusion and CLIP models, altering the way in which latents are denoised, "
                  "such as applying styles. Multiple LoRA nodes can be linked together.",
      inputs=list(LORA_INPUTS),
      outputs=[Output("MODEL", tooltip="The modified diffusion model."),
               Output("CLIP", tooltip="The modified CLIP model.")])
def lora_loader(model: Any, clip: Any, lora_name: str, strength_model: float, strength_clip: float) -> tuple:
    return _apply_lora(model, clip, lora_name, strength_model, strength_clip)


@node("LoraLoaderModelOnly", category="loaders", display_name="LoraLoaderModelOnly",
      description="LoRAs modify diffusion models; this loader applies one to the MODEL only.",
      inputs=list(LORA_MODEL_ONLY_INPUTS),
      outputs=[Output("MODEL")])
def lora_loader_model_only(model: Any, lora_name: str, strength_model: float) -> tuple:
    return (_apply_lora(model, None, lora_name, strength_model, 0.0)[0],)


def _backend_options(env: Any = None) -> list[str]:
    """The backends that run here. An optional backend whose package is not installed is left
    out without importing torch (so /object_info stays torch-free at start-up); when one is
    installed, comfy_core probes it on the host's compute device."""
    missing = missing_optional_backends()
    if len(missing) == len(OPTIONAL_BACKENDS):  # no optional package at all: the others run anywhere
        return [name for name in ATTENTION_BACKENDS if name not in missing]
    from comfy_core.attention import available_backends

    memory = getattr(env, "memory", None)
    return available_backends(getattr(memory, "device", None))


def _validate_backend(backend: str) -> bool | str:
    # Runs at validation time (the combo check is off for `backend`, so this message is the one shown).
    from comfy_core.attention import available_backends, backend_names, unavailable_reason

    if backend not in backend_names():
        return f"unknown attention backend {backend!r}; available here: {available_backends()}"
    memory = getattr(current_env(), "memory", None)
    reason = unavailable_reason(backend, getattr(memory, "device", None))
    return True if reason is None else f"attention backend {backend!r} is not available: {reason}"


@node("SetAttentionBackend", category="advanced/model", display_name="Set Attention Backend",
      description="Returns a clone of the model whose attention (self and cross, UNet) runs on the chosen "
                  "backend, for this clone's runs only.",
      inputs=[Input("model", "MODEL"),
              Combo("backend", _backend_options, default="sdpa",
                    tooltip="sdpa: PyTorch fused attention (default); sub_quadratic: chunked, memory bounded; "
                            "split: sliced to fit free memory; naive: reference; xformers: optional extra.")],
      outputs=[Output("MODEL")],
      validate_inputs=_validate_backend)
def set_attention_backend(model: Any, backend: str) -> tuple:
    return (_clone_with_backend(checks.model(model), backend),)


@node("SetVAEAttentionBackend", category="advanced/model", display_name="Set VAE Attention Backend",
      description="Returns a clone of the VAE whose attention runs on the chosen backend, for this clone only.",
      inputs=[Input("vae", "VAE"),
              Combo("backend", _backend_options, default="sdpa")],
      outputs=[Output("VAE")],
      validate_inputs=_validate_backend)
def set_vae_attention_backend(vae: Any, backend: str) -> tuple:
    return (_clone_with_backend(checks.vae(vae), backend),)


def _clone_with_backend(target: Any, backend: str) -> Any:
    """A clone of a (checked) MODEL or VAE patcher whose attention runs on `backend` (checked
    again at run time: what validation saw may have changed, e.g. a GPU that went away)."""
    from comfy_core.attention import unavailable_reason

    reason = unavailable_reason(backend)
    if reason is not None:
        raise NodeInputError("backend", "an attention backend available here", f"{backend!r}, which is not: {reason}")
    patched = target.clone()
    patched.set_attention_backend(backend)
    return patched
