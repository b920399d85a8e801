"""The LoRA training nodes of today's ComfyUI's comfy_extras/nodes_train.py: TrainLoraNode,
LoraModelLoader, SaveLoRA and LossGraphNode, declared as ComfyUI's V3 schema renders them
(graph/v3_schema.py); behaviour read from that file (the version with `quantized_backward` and
the "model/..." categories), written here over comfy_core/training.

* TrainLoraNode (a list node, as ComfyUI's `is_input_list`) trains adapters on the MODEL over
  the latents with their captions (MakeTrainingDataset / LoadTrainingDataset lists, or a plain
  LATENT and CONDITIONING) and returns ComfyUI's outputs: the LORA_MODEL (the trained tensors,
  named as ComfyUI saves them), the LOSS_MAP `{"loss": [...]}` (one loss per step) and the steps
  trained in all (with `existing_lora`, its steps, read from its `<n>_steps_` file name, added).
  As today's ComfyUI it returns no MODEL: LoraModelLoader applies the LORA_MODEL. Each step is
  reported as the node's progress, and an interrupted prompt stops the run between steps.
  How training runs and where it differs from ComfyUI: comfy_core/training/trainer.py.
* LoraModelLoader applies a LORA_MODEL at `strength_model` (0 returns the MODEL itself) as
  merged weight patches, or with `bypass` as forward-time adapters (records that cannot run that
  way, such as bias diffs, as weight patches: ComfyUI's `load_bypass_lora_for_models`).
* SaveLoRA writes the LORA_MODEL to `<output>/<prefix>_<counter>_.safetensors`, or
  `<prefix>_<steps>_steps_<counter>_.safetensors` given the steps (default prefix
  `loras/ComfyUI_trained_lora`), which LoraLoader reads from a loras folder.
* LossGraphNode shows the loss curve (comfy_core/training/loss_graph.py) as a preview image.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.environment import Environment, current_env, model_file, report_progress
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_train"
NONE_LORA = "[None]"
# comfy_core.training's names, spelled here so that rendering the nodes does not import torch
ALGORITHMS = ["LoRA", "LoHa", "LoKr", "OFT"]
OPTIMIZERS = ["AdamW", "Adam", "SGD", "RMSprop"]
LOSS_FUNCTIONS = ["MSE", "L1", "Huber", "SmoothL1"]


def _first(values: Any) -> Any:
    return values[0] if isinstance(values, list) and values else values


def _existing_lora_options(env: Any = None) -> list[str]:
    """The loras folders' files, then "[None]" (ComfyUI's order)."""
    env = env if isinstance(env, Environment) else current_env()
    return list(env.folders.filenames("loras")) + [NONE_LORA]


def _existing_steps(name: str) -> int:
    """The steps a trained LoRA's file name carries (`..._<n>_steps_...`, SaveLoRA's naming)."""
    head = name.split("_steps_")[0]
    try:
        return int(head.split("_")[-1])
    except ValueError:
        raise NodeInputError("existing_lora", "a LoRA saved by SaveLoRA with its steps, named "
                                              "'<prefix>_<steps>_steps_<counter>_.safetensors'", repr(name)) from None


def _latent_samples(latents: Any) -> list:
    import torch

    samples = []
    for index, latent in enumerate(latents if isinstance(latents, list) else [latents]):
        if not isinstance(latent, dict) or not isinstance(latent.get("samples"), torch.Tensor):
            raise NodeInputError("latents", "LATENTs ({'samples': tensor})", f"item {index}: {describe(latent)}")
        samples.append(latent["samples"])
    return samples


def _caption_entries(positive: Any) -> list:
    """ComfyUI's `_process_conditioning`: one CONDITIONING is its entries; several are flattened."""
    items = positive if isinstance(positive, list) else [positive]
    if len(items) == 1:
        entries = items[0]
    else:
        entries = []
        for cond in items:
            if isinstance(cond, list):
                entries.extend(cond)
            else:
                entries.append(cond)
    if not isinstance(entries, list) or not all(isinstance(e, (list, tuple)) and len(e) >= 2 for e in entries):
        raise NodeInputError("positive", "CONDITIONING (lists of [tensor, dict])", describe(entries))
    return entries


def _existing_records(model: Any, name: str) -> tuple[dict | None, int]:
    """The records of the LoRA to continue (parameter name -> record) and its steps."""
    if name == NONE_LORA:
        return None, 0
    steps = _existing_steps(name)
    from comfy_core.lora.keymap import unet_key_map
    from comfy_core.lora.loader import parse_lora
    from nodes.patching import load_lora_file

    tensors = load_lora_file(Path(model_file("loras", name, "existing_lora")))
    parsed = parse_lora(tensors, unet_key_map(model.model), name)
    if not parsed.patches:
        raise NodeInputError("existing_lora", "a LoRA for this model's layers", f"{name!r}, none of whose keys match")
    return parsed.patches, steps


@v3_node("TrainLoraNode", display_name="Train LoRA", category="model/training", python_module=MODULE,
         experimental=True, input_is_list=True,
         inputs=[Socket("model", "MODEL", tooltip="The model to train the LoRA on."),
                 Socket("latents", "LATENT",
                        tooltip="The Latents to use for training, serve as dataset/input of the model."),
                 Socket("positive", "CONDITIONING", tooltip="The positive conditioning to use for training."),
                 Int("batch_size", default=1, min=1, max=10000, tooltip="The batch size to use for training."),
                 Int("grad_accumulation_steps", default=1, min=1, max=1024,
                     tooltip="The number of gradient accumulation steps to use for training."),
                 Int("steps", default=16, min=1, max=100000, tooltip="The number of steps to train the LoRA for."),
                 Float("learning_rate", default=0.0005, min=0.0000001, max=1.0, step=0.0000001,
                       tooltip="The learning rate to use for training."),
                 Int("rank", default=8, min=1, max=128, tooltip="The rank of the LoRA layers."),
                 Combo("optimizer", OPTIMIZERS, default="AdamW", tooltip="The optimizer to use for training."),
                 Combo("loss_function", LOSS_FUNCTIONS, default="MSE",
                       tooltip="The loss function to use for training."),
                 Int("seed", default=0, min=0, max=0xFFFFFFFFFFFFFFFF,
                     tooltip="The seed to use for training (used in generator for LoRA weight initialization and "
                             "noise sampling)"),
                 Combo("training_dtype", ["bf16", "fp32", "none"], default="bf16",
                       tooltip="The dtype to use for training. 'none' preserves the model's native compute dtype "
                               "instead of overriding it. For fp16 models, GradScaler is automatically enabled."),
                 Combo("lora_dtype", ["bf16", "fp32"], default="bf16", tooltip="The dtype to use for lora."),
                 Boolean("quantized_backward", default=False,
                         tooltip="When using training_dtype 'none' and training on quantized model, doing backward "
                                 "with quantized matmul when enabled."),
                 Combo("algorithm", ALGORITHMS, default=ALGORITHMS[0], tooltip="The algorithm to use for training."),
                 Boolean("gradient_checkpointing", default=True, tooltip="Use gradient checkpointing for training."),
                 Int("checkpoint_depth", default=1, min=1, max=5, tooltip="Depth level for gradient checkpointing."),
                 Boolean("offloading", default=False,
                         tooltip="Offload model weights to CPU during training to save GPU memory."),
                 InputSpec("existing_lora", _existing_lora_options, REQUIRED,
                           {"tooltip": "The existing LoRA to append to. Set to None for new LoRA.",
                            "default": NONE_LORA, "multiselect": False}),
                 Boolean("bucket_mode", default=False,
                         tooltip="Enable resolution bucket mode. When enabled, expects pre-bucketed latents from "
                                 "ResolutionBucket node."),
                 Boolean("bypass_mode", default=False,
                         tooltip="Enable bypass mode for training. When enabled, adapters are applied via forward "
                                 "hooks instead of weight modification. Useful for quantized models where weights "
                                 "cannot be directly modified.")],
         outputs=[Output("LORA_MODEL", "lora", tooltip="LoRA weights"),
                  Output("LOSS_MAP", "loss_map", tooltip="Loss history"),
                  Output("INT", "steps", tooltip="Total training steps")])
def train_lora_node(model: list, latents: list, positive: list, batch_size: list, grad_accumulation_steps: list,
                    steps: list, learning_rate: list, rank: list, optimizer: list, loss_function: list, seed: list,
                    training_dtype: list, lora_dtype: list, quantized_backward: list, algorithm: list,
                    gradient_checkpointing: list, checkpoint_depth: list, offloading: list, existing_lora: list,
                    bucket_mode: list, bypass_mode: list) -> tuple[dict, dict, int]:
    """Train adapters on the MODEL; (LORA_MODEL, LOSS_MAP, total steps)."""
    from comfy_core.training.adapters import TrainingSetupError
    from comfy_core.training.trainer import TrainSettings, train_lora

    patcher = checks.model(_first(model))
    samples = _latent_samples(latents)
    entries = _caption_entries(positive)
    old, old_steps = _existing_records(patcher, _first(existing_lora))
    settings = TrainSettings(
        batch_size=_first(batch_size), grad_accumulation_steps=_first(grad_accumulation_steps),
        steps=_first(steps), learning_rate=_first(learning_rate), rank=_first(rank), optimizer=_first(optimizer),
        loss_function=_first(loss_function), seed=_first(seed), training_dtype=_first(training_dtype),
        lora_dtype=_first(lora_dtype), algorithm=_first(algorithm),
        gradient_checkpointing=bool(_first(gradient_checkpointing)), checkpoint_depth=_first(checkpoint_depth),
        bucket_mode=bool(_first(bucket_mode)))
    try:
        result = train_lora(patcher, samples, entries, settings, old, progress=report_progress)
    except TrainingSetupError as exc:
        raise NodeInputError(exc.input_name, "a value training can use", str(exc)) from exc
    return (result.lora, {"loss": list(result.losses)}, settings.steps + old_steps)


def _lora_model(value: Any, input_name: str = "lora") -> dict:
    import torch

    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items()):
        raise NodeInputError(input_name, "a LORA_MODEL (a name -> tensor state dict, as TrainLoraNode gives)",
                             describe(value))
    return value


def _bypass_or_patch(clone: Any, patches: dict, strength: float) -> int:
    """ComfyUI's `load_bypass_lora_for_models` for one clone: the records that can run at forward
    time as a bypass, the rest (bias diffs, DoRA, ...) as weight patches; how many keys."""
    from comfy_core.patching.bypass import add_bypass, bypass_entries

    bypassed = {k: r for k, r in patches.items() if bypass_entries({k: r}, strength, clone.model)[0]}
    rest = {k: r for k, r in patches.items() if k not in bypassed}
    count = add_bypass(clone, bypassed, strength)[0] if bypassed else 0
    return count + (len(clone.add_patches(rest, strength)) if rest else 0)


@v3_node("LoraModelLoader", display_name="Load LoRA Model", category="model/loaders", python_module=MODULE,
         experimental=True,
         inputs=[Socket("model", "MODEL", tooltip="The diffusion model the LoRA will be applied to."),
                 Socket("lora", "LORA_MODEL", tooltip="The LoRA model to apply to the diffusion model."),
                 Float("strength_model", default=1.0, min=-100.0, max=100.0,
                       tooltip="How strongly to modify the diffusion model. This value can be negative."),
                 Boolean("bypass", default=False,
                         tooltip="When enabled, applies LoRA in bypass mode without modifying base model weights. "
                                 "Useful for training and when model weights are offloaded.")],
         outputs=[Output("MODEL", "model", tooltip="The modified diffusion model.")])
def lora_model_loader(model: Any, lora: Any, strength_model: float, bypass: bool = False) -> tuple[Any]:
    """The MODEL with the LORA_MODEL applied at `strength_model` (merged, or as a bypass)."""
    model = checks.model(model)
    lora = _lora_model(lora)
    if strength_model == 0:
        return (model,)
    from comfy_core.lora.loader import add_weight_patches, load_lora_for_models

    apply = _bypass_or_patch if bypass else add_weight_patches
    new_model, _clip, _report = load_lora_for_models(model, None, lora, float(strength_model), 0.0,
                                                     "trained LoRA", None, apply)
    return (new_model,)


@v3_node("SaveLoRA", display_name="Save LoRA Weights", category="model/merging", python_module=MODULE,
         experimental=True, output_node=True, search_aliases=["export lora"],
         inputs=[Socket("lora", "LORA_MODEL",
                        tooltip="The LoRA model to save. Do not use the model with LoRA layers."),
                 String("prefix", default="loras/ComfyUI_trained_lora",
                        tooltip="The prefix to use for the saved LoRA file."),
                 Int("steps", optional=True,
                     tooltip="Optional: The number of steps the LoRA has been trained for, used to name the saved "
                             "file.")],
         outputs=[])
def save_lora(lora: Any, prefix: str, steps: int | None = None, prompt: Any = None, extra_pnginfo: Any = None) -> tuple:
    """Write the LORA_MODEL as a .safetensors in the output folder."""
    from comfy_core.checkpoint.save import write_safetensors
    from comfy_core.image.file_names import save_location
    from nodes.errors import image_input_errors

    lora = _lora_model(lora)
    checks.text(prefix, "prefix")
    folder = Path(current_env().output_dir)
    with image_input_errors():
        folder, filename, counter, _subfolder = save_location(folder, prefix, 0, 0)
    if steps is None:
        name = f"{filename}_{counter:05}_.safetensors"
    else:
        name = f"{filename}_{checks.integer(steps, 'steps')}_steps_{counter:05}_.safetensors"
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / name, {k: v.contiguous() for k, v in lora.items()})
    return ()


@v3_node("LossGraphNode", display_name="Plot Loss Graph", category="model/training", python_module=MODULE,
         experimental=True, output_node=True,
         search_aliases=["training chart", "training visualization", "plot loss"],
         inputs=[Socket("loss", "LOSS_MAP", tooltip="Loss map from training node."),
                 String("filename_prefix", default="loss_graph", tooltip="Prefix for the saved loss graph image.")],
         outputs=[])
def loss_graph(loss: Any, filename_prefix: str, prompt: Any = None, extra_pnginfo: Any = None) -> dict:
    """The loss curve as a preview image (ComfyUI's `ui.PreviewImage`)."""
    from comfy_core.image.png import preview_target, write_image_batch
    from comfy_core.training.loss_graph import draw_loss_graph
    from nodes.errors import image_input_errors
    from nodes.image import metadata_enabled

    values = loss.get("loss") if isinstance(loss, dict) else None
    if not isinstance(values, (list, tuple)) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise NodeInputError("loss", "a LOSS_MAP {'loss': [numbers, ...]} with at least one loss", describe(loss))
    image = draw_loss_graph(values)
    env = current_env()
    with image_input_errors():
        return write_image_batch(image, "ComfyUI", preview_target(env.temp_dir), prompt=prompt,
                                 extra_pnginfo=extra_pnginfo, metadata=metadata_enabled(env))
