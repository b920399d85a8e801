"""Train a LoRA on a MODEL: forward-time trainable adapters over frozen base weights.

Behaviour of today's ComfyUI's comfy_extras/nodes_train.py (`TrainLoraNode.execute`,
`TrainSampler`, `TrainGuider`, `_run_training_loop`), written here over our runtime:

- The adapters (comfy_core/training/adapters.py) go onto a clone of the MODEL as a forward-time
  bypass (comfy_core/patching/bypass.py, `norms_and_biases=True`): every layer computes
  `base(x) + adapter(x)` with the adapters' tensors as trainable parameters. The base weights are
  never written and get no gradients (`requires_grad` is off for the run and restored after).
- The run is a sampling run: a `BasicGuider` over the clone samples with a SAMPLER object whose
  `sample` is the training loop (ComfyUI's `TrainSampler`), so the model is patched and placed,
  and the conditioning prepared per entry (cross-attention, ADM, extra inputs), exactly as for
  sampling; each step calls the guider for an x0 prediction.
- A step draws the batch, the noise and the sigmas as ComfyUI does, from one private CPU
  generator in the order ComfyUI draws from torch's global one (no global state changes): first
  the noise its guider draws for the whole dataset from `seed`, then per step `randperm` of the
  dataset (bucket mode: a bucket by size, then `randperm` in it), the generator re-seeded with
  `seed + 1000·step`, the batch's noise (`randn` in its shape) and one `rand()` per sample,
  turned into a sigma by the model's `percent_to_sigma`.
- The loss follows the model's sampling type through `model_sampling` as ComfyUI's: the input
  is `noise_scaling(sigma, noise, x0)` (eps / v: `x0 + sigma·noise`; flow: `sigma·noise +
  (1 - sigma)·x0`), the target `noise_scaling(0, 0, x0)` (the clean latent), the prediction the
  model's denoised output (`calculate_denoised`), compared in float32 by the chosen loss. Each
  step's loss is divided by the accumulation count before `backward`; the optimizer steps every
  `grad_accumulation_steps` steps (`steps · grad_accumulation_steps` steps in all), gradients
  cast to their parameter's dtype first. The loss of every step is recorded.
- Gradient checkpointing as ComfyUI's `find_modules_at_depth` + `patch`: the modules at
  `checkpoint_depth` of the network (the network itself counting as depth 1, containers not
  counted) run under `torch.utils.checkpoint` (non-reentrant), as object patches of their
  `forward` on the clone, so they are undone with the run.
- Mixed precision: `bf16` autocasts the model calls to bfloat16; `fp32` runs in float32;
  `none` keeps the model's dtype (float16 models autocast to float16, with a gradient scaler when
  the LoRA is not bfloat16; others bfloat16), as ComfyUI.

Where this differs from ComfyUI, on purpose: a batch whose samples have different captions runs
each caption on its own samples (ComfyUI hands the batch all its captions at once, which the
sampler averages over every sample); the latents of every mode enter model space
(`process_latent_in`; ComfyUI leaves bucket and multi-resolution batches in VAE space); the LoRA
initialisation draws from `seed` (ComfyUI's draws from torch's unseeded global generator); a
LoRA to resume from keeps its norm and bias diffs (ComfyUI restarts those at zero); every trained
layer runs as a forward-time adapter whatever `bypass_mode` says (ComfyUI without it adds the
delta to the weight on each call, the same sum); `offloading` and `quantized_backward` change
nothing here (the model stays on its device; no layer here runs a quantised backward).
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.utils.checkpoint
from torch import nn

from comfy_core.patching.bypass import add_bypass
from comfy_core.sampling.guider import BasicGuider, Sampler, process_latent_in
from comfy_core.training.adapters import (ALGORITHMS, NETWORK_PREFIX, TrainingSetupError, frozen_patches,
                                          lora_state_dict, trainable_layers)

log = logging.getLogger(__name__)

OPTIMIZERS = ("AdamW", "Adam", "SGD", "RMSprop")
LOSS_FUNCTIONS = ("MSE", "L1", "Huber", "SmoothL1")
TRAINING_DTYPES = ("bf16", "fp32", "none")
LORA_DTYPES = ("bf16", "fp32")
_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}

# progress(done, total) after each step; may raise to stop the run (an interrupt).
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TrainSettings:
    """TrainLoraNode's settings, with its defaults."""

    batch_size: int = 1
    grad_accumulation_steps: int = 1
    steps: int = 16
    learning_rate: float = 0.0005
    rank: int = 8
    optimizer: str = "AdamW"
    loss_function: str = "MSE"
    seed: int = 0
    training_dtype: str = "bf16"
    lora_dtype: str = "bf16"
    algorithm: str = "LoRA"
    gradient_checkpointing: bool = True
    checkpoint_depth: int = 1
    bucket_mode: bool = False

    def check(self) -> None:
        for name, low in (("batch_size", 1), ("grad_accumulation_steps", 1), ("steps", 1), ("rank", 1),
                          ("checkpoint_depth", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise TrainingSetupError(f"{name} must be an integer >= {low}, got {value!r}", name)
        rate = self.learning_rate
        if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate)):
            raise TrainingSetupError(f"learning_rate must be a positive number, got {self.learning_rate!r}",
                                     "learning_rate")
        for name, options in (("optimizer", OPTIMIZERS), ("loss_function", LOSS_FUNCTIONS),
                              ("training_dtype", TRAINING_DTYPES), ("lora_dtype", LORA_DTYPES),
                              ("algorithm", ALGORITHMS)):
            if getattr(self, name) not in options:
                raise TrainingSetupError(f"{name} must be one of {', '.join(options)}, got {getattr(self, name)!r}",
                                         name)


@dataclass
class TrainResult:
    """What a run made: ComfyUI's LORA_MODEL (`lora`), the loss of every step, and a clone of the
    MODEL running the trained adapters (forward-time, detached copies) for inference."""

    lora: dict[str, torch.Tensor]
    losses: list[float]
    model: Any
    layers: int = 0


@dataclass
class Dataset:
    """The training samples in one of ComfyUI's three layouts, and each sample's caption slot.

    `standard`: one tensor `[N, C, h, w]`; `multires`: N tensors `[1, C, h_i, w_i]`; `buckets`:
    tensors `[B_i, C, h_i, w_i]`, samples numbered bucket after bucket. `slots[i]` is the index
    into the caption entries of sample i."""

    mode: str
    samples: Any
    slots: list[int]
    count: int
    bucket_offsets: list[int] = field(default_factory=list)


# -- data ------------------------------------------------------------------------------------------

def make_dataset(latents: Sequence[torch.Tensor], captions: int, bucket_mode: bool = False) -> Dataset:
    """ComfyUI's `_process_latents_*` and `_validate_and_expand_conditioning`: `latents` are the
    LATENT inputs' sample tensors, `captions` how many conditioning entries there are (one per
    sample, or one for all)."""
    if not latents:
        raise TrainingSetupError("latents: no latent given", "latents")
    for i, t in enumerate(latents):
        if not isinstance(t, torch.Tensor) or t.ndim < 3 or t.shape[0] < 1:
            raise TrainingSetupError(f"latents[{i}]: expected a [batch, channels, ...] tensor, got "
                                     f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}",
                                     "latents")
    if bucket_mode:
        count = sum(int(t.shape[0]) for t in latents)
        if captions != count:
            raise TrainingSetupError(f"bucket_mode: {count} latents in {len(latents)} buckets need {count} "
                                     f"conditioning entries (one per latent), got {captions}", "positive")
        offsets = [0]
        for t in latents:
            offsets.append(offsets[-1] + int(t.shape[0]))
        return Dataset("buckets", list(latents), list(range(count)), count, offsets)
    if len(latents) == 1:
        samples: Any = latents[0]
        mode = "standard"
        count = int(samples.shape[0])
    else:
        singles = [t[i:i + 1] for t in latents for i in range(t.shape[0])]
        shapes = {tuple(t.shape) for t in singles}
        count = len(singles)
        if len(shapes) > 1:
            mode, samples = "multires", singles
        else:
            mode, samples = "standard", torch.cat(singles, dim=0)
    if captions == 1:
        slots = [0] * count
    elif captions == count:
        slots = list(range(count))
    else:
        raise TrainingSetupError(f"Number of positive conditions ({captions}) does not match number of images "
                                 f"({count}).", "positive")
    return Dataset(mode, samples, slots, count)


def _cloned(value: Any) -> Any:
    """A copy of a conditioning entry with every tensor cloned (ComfyUI's `process_cond_list`):
    tensors made in inference mode cannot be saved for backward."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cloned(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_cloned(v) for v in value)
    return value


# -- pieces ----------------------------------------------------------------------------------------

def make_optimizer(name: str, parameters: list[nn.Parameter], learning_rate: float) -> torch.optim.Optimizer:
    """ComfyUI's `_create_optimizer`: torch's optimizer of that name at `learning_rate`, its defaults."""
    cls = {"AdamW": torch.optim.AdamW, "Adam": torch.optim.Adam, "SGD": torch.optim.SGD,
           "RMSprop": torch.optim.RMSprop}[name]
    return cls(parameters, lr=learning_rate)


def make_loss(name: str) -> nn.Module:
    """ComfyUI's `_create_loss_function` (mean reductions)."""
    return {"MSE": nn.MSELoss, "L1": nn.L1Loss, "Huber": nn.HuberLoss, "SmoothL1": nn.SmoothL1Loss}[name]()


def modules_at_depth(root: nn.Module, depth: int, name: str = NETWORK_PREFIX) -> list[str]:
    """ComfyUI's `find_modules_at_depth`: the dotted names of the modules at `depth`, counting
    each module that is not a container (ModuleList, Sequential, ModuleDict) as one level, `root`
    itself as depth 1."""
    found: list[str] = []

    def walk(module: nn.Module, path: str, level: int) -> None:
        if not isinstance(module, (nn.ModuleList, nn.Sequential, nn.ModuleDict)):
            level += 1
            if level == depth:
                found.append(path)
                return
        for child_name, child in module.named_children():
            walk(child, f"{path}.{child_name}", level)

    walk(root, name, 0)
    return found


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`forward` recomputed in the backward pass instead of keeping its activations."""
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


def _precision(training_dtype: str, lora_dtype: torch.dtype,
               model_dtype: torch.dtype) -> tuple[torch.dtype | None, bool]:
    """(autocast dtype or None for plain float32, whether a gradient scaler is used)."""
    if training_dtype == "fp32":
        return None, False
    if training_dtype == "bf16":
        return torch.bfloat16, False
    if model_dtype == torch.float16:
        return torch.float16, lora_dtype != torch.bfloat16
    return torch.bfloat16, False


# -- the loop ----------------------------------------------------------------------------------

class TrainingLoop(Sampler):
    """The SAMPLER object whose `sample` trains (ComfyUI's `TrainSampler`): run by the guider with
    the model patched and the conditioning prepared; returns zeros like the latent it is given."""

    def __init__(self, dataset: Dataset, settings: TrainSettings, parameters: list[nn.Parameter],
                 progress: Progress | None = None) -> None:
        self.dataset = dataset
        self.settings = settings
        self.parameters = parameters
        self.progress = progress
        self.losses: list[float] = []
        self.autocast: torch.dtype | None = None
        self.use_scaler = False

    def sample(self, guider: Any, sigmas: torch.Tensor, extra_args: dict, callback: Any, noise: torch.Tensor,
               latent_image: torch.Tensor | None = None, denoise_mask: torch.Tensor | None = None,
               disable_pbar: bool = True) -> torch.Tensor:
        dm = guider.inner_model
        settings = self.settings
        prepared = list(guider.conds.get("positive") or [])
        model_options, seed_arg = extra_args.get("model_options"), extra_args.get("seed")
        device = noise.device
        base = [p for p in dm.parameters()]
        flags = [p.requires_grad for p in base]
        optimizer = make_optimizer(settings.optimizer, self.parameters, settings.learning_rate)
        criterion = make_loss(settings.loss_function)
        scaler = torch.amp.GradScaler(device.type) if self.use_scaler else None
        generator = torch.Generator(device="cpu").manual_seed(int(settings.seed))
        # The noise ComfyUI's guider draws for the whole dataset before the loop: drawn here only
        # to leave the generator where ComfyUI's global one is when the first step draws.
        torch.randn(self._dummy_shape(), generator=generator)
        total = settings.steps * settings.grad_accumulation_steps
        try:
            for p in base:
                p.requires_grad_(False)
            with torch.inference_mode(False), torch.enable_grad():
                for step in range(total):
                    loss = self._step(guider, dm, prepared, step, generator, criterion, scaler, device,
                                      model_options, seed_arg)
                    self.losses.append(loss)
                    if (step + 1) % settings.grad_accumulation_steps == 0:
                        self._update(optimizer, scaler)
                    if self.progress is not None:
                        self.progress(step + 1, total)
        finally:
            for p, flag in zip(base, flags):
                p.requires_grad_(flag)
            guider.conds["positive"] = prepared
            optimizer.zero_grad(set_to_none=True)
        return torch.zeros_like(latent_image if latent_image is not None else noise)

    def _dummy_shape(self) -> tuple[int, ...]:
        data = self.dataset
        if data.mode == "standard":
            return tuple(data.samples.shape)
        first = data.samples[0]
        return (data.count, *first.shape[1:])

    def _update(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        for p in self.parameters:
            if p.grad is not None and p.grad.dtype != p.dtype:
                p.grad = p.grad.to(p.dtype)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def _step(self, guider: Any, dm: Any, prepared: list, step: int, generator: torch.Generator, criterion: nn.Module,
              scaler: Any, device: torch.device, model_options: Any, seed_arg: Any) -> float:
        """One step: its batches drawn (`draw`), their loss, `backward` of loss / accumulation."""
        batches = self.draw(step, generator, dm)
        total: Any = 0.0
        for latent, indices, noise, sigmas in batches:
            total = total + self._loss(guider, dm, prepared, latent, indices, noise, sigmas, criterion, device,
                                       model_options, seed_arg)
        if len(batches) > 1:  # multi-resolution: the mean of the samples' losses, one backward
            total = total / len(batches)
        self._backward(total / self.settings.grad_accumulation_steps, scaler)
        return float(total.item())

    def draw(self, step: int, generator: torch.Generator, dm: Any) -> list[tuple[torch.Tensor, list[int], torch.Tensor,
                                                                                  torch.Tensor]]:
        """The step's batches `(latent [b, C, h, w], sample indices, noise, sigmas [b])` in ComfyUI's
        draw order: one batch, or (multi-resolution) one per sample."""
        data, settings = self.dataset, self.settings
        if data.mode == "buckets":
            weights = torch.tensor([float(t.shape[0]) for t in data.samples])
            bucket = int(torch.multinomial(weights, 1, generator=generator).item())
            size = int(data.samples[bucket].shape[0])
            relative = torch.randperm(size, generator=generator)[: min(settings.batch_size, size)].tolist()
            generator.manual_seed(int(settings.seed) + step * 1000)
            latent = data.samples[bucket][relative]
            indices = [data.bucket_offsets[bucket] + r for r in relative]
            return [(latent, indices, *self._noise_and_sigmas(latent, generator, dm))]
        indices = torch.randperm(data.count, generator=generator)[: settings.batch_size].tolist()
        generator.manual_seed(int(settings.seed) + step * 1000)
        if data.mode == "standard":
            latent = data.samples[indices]
            return [(latent, indices, *self._noise_and_sigmas(latent, generator, dm))]
        return [(data.samples[i], [i], *self._noise_and_sigmas(data.samples[i], generator, dm)) for i in indices]

    def _noise_and_sigmas(self, latent: torch.Tensor, generator: torch.Generator,
                          dm: Any) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(tuple(latent.shape), generator=generator, dtype=torch.float32)
        ms = dm.model_sampling
        sigmas = [ms.percent_to_sigma(torch.rand((1,), generator=generator).item()) for _ in range(latent.shape[0])]
        return noise, torch.tensor(sigmas, dtype=torch.float32)

    def _backward(self, loss: torch.Tensor, scaler: Any) -> None:
        (scaler.scale(loss) if scaler is not None else loss).backward()

    def _loss(self, guider: Any, dm: Any, prepared: list, latent: torch.Tensor, indices: list[int],
              noise: torch.Tensor, sigmas: torch.Tensor, criterion: nn.Module, device: torch.device,
              model_options: Any, seed_arg: Any) -> torch.Tensor:
        """The loss of one batch: x_t made from the drawn noise and sigmas, predicted per caption."""
        ms = dm.model_sampling
        x0 = process_latent_in(dm.latent_format, latent.to(device=device, dtype=torch.float32))
        noise, sigmas = noise.to(device), sigmas.to(device)
        xt = ms.noise_scaling(sigmas, noise, x0, False)
        target = ms.noise_scaling(torch.zeros_like(sigmas), torch.zeros_like(noise), x0, False)
        slots = [self.dataset.slots[i] for i in indices]
        order: list[int] = []
        parts: list[torch.Tensor] = []
        autocast = (torch.autocast(device.type, dtype=self.autocast) if self.autocast is not None
                    else contextlib.nullcontext())
        with autocast:
            for slot in dict.fromkeys(slots):  # each caption on its own samples, in order of first use
                where = [j for j, s in enumerate(slots) if s == slot]
                guider.conds["positive"] = [prepared[slot]]
                parts.append(guider(xt[where], sigmas[where], model_options=model_options, seed=seed_arg))
                order.extend(where)
        prediction = torch.cat(parts, dim=0)
        if order != sorted(order):
            prediction = prediction[torch.tensor(order).argsort()]
        return criterion(prediction.float(), target.float())


def train_lora(model: Any, latents: Sequence[torch.Tensor], conditioning: Sequence[Any],
               settings: TrainSettings = TrainSettings(), existing: Mapping[Any, Any] | None = None,
               progress: Progress | None = None) -> TrainResult:
    """Train adapters on `model` (a ModelPatcher, left as it is) over `latents` (sample tensors of
    the LATENT inputs, in VAE space) with `conditioning` (the caption entries `[tensor, dict]`,
    one per sample or one for all); `existing`: a LoRA's records to continue (parameter name ->
    record). `progress(done, total)` is called after each step and may raise to stop."""
    settings.check()
    if not conditioning:
        raise TrainingSetupError("positive: no conditioning given", "positive")
    dataset = make_dataset(latents, len(conditioning), settings.bucket_mode)
    captions = [_cloned(list(entry)) for entry in conditioning]
    lora_dtype = _DTYPES[settings.lora_dtype]
    with torch.inference_mode(False):
        trainee = model.clone()
        device = torch.device(getattr(trainee, "load_device", "cpu"))
        generator = torch.Generator(device="cpu").manual_seed(int(settings.seed))
        layers = trainable_layers(trainee.model, settings.algorithm, settings.rank, lora_dtype, device, generator,
                                  existing)
        if not layers:
            raise TrainingSetupError("model: no trainable layer (linear, convolution or norm) under "
                                     f"{NETWORK_PREFIX!r}")
        records = {k: r for layer in layers for k, r in layer.patches.items()}
        count, skipped = add_bypass(trainee, records, 1.0, norms_and_biases=True)
        if skipped:
            raise TrainingSetupError(f"these adapters cannot run at forward time: {skipped[:3]}")
        if settings.gradient_checkpointing:
            dm = trainee.model
            for name in modules_at_depth(getattr(dm, NETWORK_PREFIX), settings.checkpoint_depth):
                owner = dm.get_submodule(name)
                trainee.add_object_patch(f"{name}.forward", _checkpointed(owner.forward))
        parameters = [p for layer in layers for p in layer.parameters()]
        loop = TrainingLoop(dataset, settings, parameters, progress)
        model_dtype = trainee.model.get_dtype() if hasattr(trainee.model, "get_dtype") else torch.float32
        loop.autocast, loop.use_scaler = _precision(settings.training_dtype, lora_dtype, model_dtype)
        guider = BasicGuider(trainee)
        guider.set_conds(captions)
        first = dataset.samples[0] if dataset.mode != "standard" else dataset.samples
        dummy = first[:1].to(torch.float32)
        sigma_max = float(trainee.get_model_object("model_sampling").sigma_max)
        log.info("Training %s on %d layers (%d adapters), %d samples, %d steps", settings.algorithm, len(layers),
                 count, dataset.count, settings.steps * settings.grad_accumulation_steps)
        guider.sample(torch.zeros_like(dummy), dummy, loop, torch.tensor([sigma_max, 0.0]), seed=int(settings.seed))
    trained = model.clone()
    add_bypass(trained, frozen_patches(layers), 1.0, norms_and_biases=True)
    return TrainResult(lora_state_dict(layers, lora_dtype), loop.losses, trained, len(layers))
