"""What a host (and through it a node pack) may change in the runtime: one typed object.

ComfyUI lets packs change behaviour by reassigning module globals (`comfy.samplers.sampling_function
= f`, `comfy.ldm.modules.attention.optimized_attention = f`, `comfy.k_diffusion.sampling.sample_x =
f`, extending `KSAMPLER_NAMES`, ...). comfy_core never reads such a global: every point a pack may
change is a field of `ExtensionPoints`, and the runtime reads the object in force for the run
(`current()`), which the host sets per node call (`use(points)`; compat's session does, and turns a
pack's assignment to a ComfyUI surface name into a change of its own object). A library user
without a host gets `BUILT_IN`: every field empty, every point its built-in behaviour.

A field left `None` (or an empty table) means "ours"; the runtime looks the built-in up itself, so
this module imports nothing of comfy_core and sits at the bottom of its layer order
(docs/dev/layers.md).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Callable, Iterator, Optional


@dataclasses.dataclass
class ExtensionPoints:
    """The replaceable parts of one runtime (one compat session, or the built-in one)."""

    # --- sampling ---
    # Sampler functions by the name k-diffusion gives them without `sample_` (ComfyUI's
    # `comfy.k_diffusion.sampling.sample_<name>`; the sampler name, except that ddim runs "euler"
    # and dpm_fast / dpm_adaptive are given their sigma range), added or replacing ours.
    samplers: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    # The live name lists the sampler and scheduler combos offer (ComfyUI's `SAMPLER_NAMES`, which
    # is also `KSampler.SAMPLERS`, `KSAMPLER_NAMES`, `SCHEDULER_NAMES` = `KSampler.SCHEDULERS`),
    # as a host's packs left them; None: ours (comfy_core.sampling.samplers.registry,
    # comfy_core.sampling.scheduler_names).
    sampler_names: Optional[list[str]] = None
    ksampler_names: Optional[list[str]] = None
    scheduler_names: Optional[list[str]] = None
    # Schedules by scheduler name (ComfyUI's `SCHEDULER_HANDLERS` entries, `SchedulerHandler`s),
    # added or replacing ours.
    scheduler_handlers: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The per-step noise of ancestral / SDE samplers (k-diffusion's `default_noise_sampler`).
    default_noise_sampler: Optional[Callable[..., Any]] = None
    # ComfyUI's `comfy.samplers.sampling_function` / `cfg_function` / `calc_cond_batch` / `sample`.
    sampling_function: Optional[Callable[..., Any]] = None
    cfg_function: Optional[Callable[..., Any]] = None
    calc_cond_batch: Optional[Callable[..., Any]] = None
    sample: Optional[Callable[..., Any]] = None
    # ComfyUI's `comfy.samplers.get_area_and_mult(conds, x_in, timestep_in)`: one prepared entry's
    # input crop, weights and conditioning at a step, or None to leave the entry out of the step
    # (smZNodes' step ranges); a result has the fields of ComfyUI's `cond_obj` (input_x, mult,
    # conditioning, area, control, patches, uuid, hooks). None: comfy_core.sampling.cond_batch's.
    get_area_and_mult: Optional[Callable[..., Any]] = None
    # ComfyUI's `comfy.samplers.KSampler.sample` (called with the KSampler as `self`) and
    # `comfy.sample.sample` (the KSampler nodes' entry: steps, sampler and scheduler names).
    ksampler_sample: Optional[Callable[..., Any]] = None
    sample_steps: Optional[Callable[..., Any]] = None
    # ComfyUI's `latent_preview.prepare_callback(model, steps, x0_output_dict=None)`: the sampling
    # nodes' step callback `callback(step, x0, x, total_steps)`, called with the live tensors (packs
    # that edit them in place change the step: diffusion-cg, resharpen). None: the nodes' own.
    prepare_callback: Optional[Callable[..., Any]] = None
    # --- attention ---
    # ComfyUI's `optimized_attention` / `optimized_attention_masked` (None: the patcher's backend).
    attention: Optional[Callable[..., Any]] = None
    attention_masked: Optional[Callable[..., Any]] = None
    # Named attention functions added to the built-in ones (ComfyUI's `register_attention_function`
    # / `REGISTERED_ATTENTION_FUNCTIONS`; comfy_core.attention.calling `get_attention_function`).
    attention_functions: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    # ComfyUI's `comfy.ldm.flux.math.attention` (`comfy.ldm.flux.layers.attention`, also Chroma's):
    # the RoPE attention of Flux-style blocks (None: comfy_core.families.flux.math `attention`).
    flux_attention: Optional[Callable[..., Any]] = None
    # --- models ---
    # `resolver(family_name) -> class or None`: the class a loaded model is made an instance of
    # (compat answers ComfyUI's comfy.model_base classes, which packs compare with `type(...)`).
    model_class: Optional[Callable[[str], Optional[type]]] = None
    # ComfyUI's `openaimodel.forward_timestep_embed(ts, x, emb, context, transformer_options, ...)`
    # and `openaimodel.apply_control(h, control, name)`: how the UNet runs one block and adds one
    # ControlNet residual (None: comfy_core.models.unet's).
    forward_timestep_embed: Optional[Callable[..., Any]] = None
    apply_control: Optional[Callable[..., Any]] = None
    # `resolver(core_class) -> subclass or None`: the class a patcher of the core class
    # `core_class` (comfy_core.patching's ModelPatcher, ClipPatcher) is made an instance of when
    # built (compat answers ComfyUI's `comfy.model_patcher.ModelPatcher`, with its `set_model_*`
    # methods); clones keep the class. None: the core classes.
    model_patcher_class: Optional[Callable[[type], Optional[type]]] = None
    # ComfyUI's `comfy.lora.calculate_weight` (None: ours).
    calculate_weight: Optional[Callable[..., Any]] = None
    # ComfyUI's `comfy.sd.save_checkpoint(output_path, model, clip=None, vae=None, clip_vision=None,
    # metadata=None, extra_keys={})`: how the checkpoint save nodes write their file (packs wrap it,
    # art-venture to save fp16). None: comfy_core.saving's `save_checkpoint`.
    save_checkpoint: Optional[Callable[..., Any]] = None
    # --- the host's executor (read by the host, never by comfy_core) ---
    # ComfyUI's `execution.execute` (one node of a prompt) and `execution._async_map_node_over_list`
    # (one node's calls) as a pack replaced them: the host's executor then leads every node step
    # and every node call through them (compat/execution_routes.py `node_routes`). None: unrouted.
    node_execute: Optional[Callable[..., Any]] = None
    map_node_over_list: Optional[Callable[..., Any]] = None
    # ComfyUI's `execution.validate_prompt` as a pack replaced it: the server's POST /prompt then
    # validates through it (packs reset per-prompt state there, as Haoming02's diffusion-cg does).
    prompt_validation: Optional[Callable[..., Any]] = None
    # ComfyUI's `execution.get_input_data` as a pack replaced it: called with ComfyUI's arguments
    # before a node's calls, which get what it returns (metadata savers note which node is saving).
    node_input_data: Optional[Callable[..., Any]] = None


BUILT_IN = ExtensionPoints()

_current: contextvars.ContextVar[ExtensionPoints] = contextvars.ContextVar("extension_points", default=BUILT_IN)


def current() -> ExtensionPoints:
    """The extension points in force in this context (`BUILT_IN` unless a host set others)."""
    return _current.get()


def set_current(points: ExtensionPoints) -> contextvars.Token:
    """Make `points` the ones in force in this context from now on (a host's per-node-call hook)."""
    return _current.set(points)


def reset_current(token: contextvars.Token) -> None:
    _current.reset(token)


@contextlib.contextmanager
def use(points: ExtensionPoints) -> Iterator[ExtensionPoints]:
    """`points` in force for the block, the previous ones after it."""
    token = _current.set(points)
    try:
        yield points
    finally:
        _current.reset(token)
