"""Running prepared conditioning entries through the model in as few forward passes as possible.

For one sampler step at noise level sigma, every active entry (inside its start/end range) gives
an input crop (its `area`, or the whole latent), a weight map `mult` (strength x mask, or a linear
feather on area edges that are not on the border) and its model conditioning. Entries whose inputs
and conditioning can be concatenated run in one batch (cross-attention contexts of different
lengths are repeated to their least common multiple, which leaves attention unchanged, when that is
at most 4x the shorter). Outputs are accumulated per conditioning list as `sum(out*mult)/sum(mult)`.

Entries carrying `composable_weight` (AUTOMATIC1111's AND, Liu et al. 2022, "Compositional Visual
Generation with Composable Diffusion Models") are instead kept as separate terms; `cfg.py` combines
them as `uncond + sum_i w_i (cond_i - uncond)`.

Follows ComfyUI `comfy/samplers.py` (`get_area_and_mult`, `can_concat_cond`, `_calc_cond_batch`)
and `comfy/conds.py`; batch order is ComfyUI's (candidates popped from the end, so the negative rows
usually come first).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from comfy_core import extension_points
from comfy_core.wrappers import WrappersMP, copy_nested_dicts, merge_nested_dicts, run_wrapped

FEATHER = 8  # area-edge feather in latent pixels (at most a quarter of the area side)


@dataclass
class CondRun:
    """One entry's contribution at one step."""
    input_x: torch.Tensor  # [B, C, h, w] crop of x
    mult: torch.Tensor  # [B, C, h, w] weights
    conditioning: dict[str, torch.Tensor]  # model_conds repeated to the batch
    area: tuple[int, int, int, int] | None  # (h, w, y, x) or None for the full latent
    slot: int  # index of the output accumulator (which cond list / composable term)
    uuid: Any = None
    control: Any = None
    patches: Any = None
    hooks: Any = None  # the entry's hook group (comfy_core/hooks): runs are batched per group


def repeat_to_batch_size(tensor: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Trim or tile along dim 0 to `batch_size` rows (ComfyUI `comfy.utils.repeat_to_batch_size`)."""
    if tensor.shape[0] > batch_size:
        return tensor[:batch_size]
    if tensor.shape[0] < batch_size:
        reps = [math.ceil(batch_size / tensor.shape[0])] + [1] * (tensor.ndim - 1)
        return tensor.repeat(reps)[:batch_size]
    return tensor


def in_timestep_range(entry: dict, sigma: torch.Tensor) -> bool:
    """Whether `entry` is active at this step's sigma (its start/end percents, as sigmas)."""
    if "timestep_start" in entry and sigma[0] > entry["timestep_start"]:
        return False
    if "timestep_end" in entry and sigma[0] < entry["timestep_end"]:
        return False
    return True


def get_area_and_mult(entry: dict, x: torch.Tensor, sigma: torch.Tensor, slot: int) -> CondRun | None:
    """The crop, weight map and conditioning of one entry at this step, or None when inactive."""
    if not in_timestep_range(entry, sigma):
        return None
    strength = entry.get("strength", 1.0)
    area = None
    input_x = x
    if "area" in entry:
        h, w, y0, x0 = (int(v) for v in entry["area"])
        h = min(x.shape[2] - y0, h)
        w = min(x.shape[3] - x0, w)
        area = (h, w, y0, x0)
        input_x = x[:, :, y0:y0 + h, x0:x0 + w]
    if "mask" in entry:
        mask = entry["mask"][: input_x.shape[0]]
        if area is not None:
            mask = mask[:, area[2]:area[2] + area[0], area[3]:area[3] + area[1]]
        mask = mask * entry.get("mask_strength", 1.0)
        mask = mask.unsqueeze(1).repeat(input_x.shape[0] // mask.shape[0], input_x.shape[1], 1, 1)
    else:
        mask = torch.ones_like(input_x)
    mult = mask * strength
    if "mask" not in entry and area is not None:
        _feather(mult, area, x.shape)
    conditioning = {}
    for k, v in entry["model_conds"].items():
        v = plain_model_input(v)
        if k == "c_concat" and area is not None:  # noise-shaped: cut to the area (ComfyUI's CONDNoiseShape)
            v = v[:, :, area[2]:area[2] + area[0], area[3]:area[3] + area[1]]
        conditioning[k] = _to_batch(v, x.shape[0], x.device)
    return CondRun(input_x, mult, conditioning, area, slot, entry.get("uuid"), entry.get("control"), entry.get("patches"),
                   entry.get("hooks"))


def area_and_mult_in_force(entry: dict, x: torch.Tensor, sigma: torch.Tensor, slot: int) -> CondRun | None:
    """`get_area_and_mult` as a run calls it (ComfyUI's code calls `comfy.samplers.get_area_and_mult`):
    a host's replacement from the extension points in force (ComfyUI's signature, `(entry, x,
    sigma)`, returning None or an object with ComfyUI's `cond_obj` fields) made a run of `slot`;
    else `get_area_and_mult` above."""
    replaced = extension_points.current().get_area_and_mult
    if replaced is None:
        return get_area_and_mult(entry, x, sigma, slot)
    got = replaced(entry, x, sigma)
    if got is None:
        return None
    area = None if got.area is None else tuple(int(v) for v in got.area)
    return CondRun(got.input_x, got.mult, dict(got.conditioning), area, slot, got.uuid, got.control, got.patches,
                   getattr(got, "hooks", None))


def _feather(mult: torch.Tensor, area: tuple[int, int, int, int], full_shape: torch.Size) -> None:
    """Ramp the weights linearly over up to 8 latent pixels on area edges inside the latent (in place)."""
    h, w, y0, x0 = area
    for dim, (size, offset, full) in enumerate(((h, y0, full_shape[2]), (w, x0, full_shape[3]))):
        rr = min(FEATHER, mult.shape[2 + dim] // 4)
        if offset != 0:
            for t in range(rr):
                mult.narrow(2 + dim, t, 1).mul_((1.0 / rr) * (t + 1))
        if size + offset < full:
            for t in range(rr):
                mult.narrow(2 + dim, size - 1 - t, 1).mul_((1.0 / rr) * (t + 1))


def plain_model_input(value: Any) -> Any:
    """A model input as the runtime holds it: a ComfyUI `comfy.conds` wrapper in an entry's
    `model_conds` (a pack's own, or what ComfyUI's `process_conds` hands packs) is its `.cond`."""
    if hasattr(value, "process_cond") and hasattr(value, "cond"):
        return value.cond
    return value


def _to_batch(value: Any, batch_size: int, device: torch.device) -> Any:
    """A model input for a run of `batch_size` rows: tensors tiled along dim 0 (ComfyUI's
    CONDRegular), lists of tensors each tiled (CONDList: Flux's reference latents), anything else
    passed as it is (CONDConstant)."""
    if isinstance(value, torch.Tensor):
        return repeat_to_batch_size(value, batch_size).to(device)
    if isinstance(value, list):
        return [_to_batch(v, batch_size, device) for v in value]
    return value


def _input_can_concat(a: Any, b: Any) -> bool:
    """Whether two runs' values of one model input can share a forward pass."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_input_can_concat(x, y) for x, y in zip(a, b))
    if isinstance(a, (torch.Tensor, list)) or isinstance(b, (torch.Tensor, list)):
        return False
    return a == b


def _concat_input(values: list[Any]) -> Any:
    if isinstance(values[0], torch.Tensor):
        return torch.cat(values)
    if isinstance(values[0], list):
        return [_concat_input([v[i] for v in values]) for i in range(len(values[0]))]
    return values[0]


# Text contexts: batched by repeating each to the least common multiple of their token counts
# (ComfyUI's CONDCrossAttn): the model's and the ControlNets' own (CLIPTextEncodeControlnet).
CROSS_ATTN_KEYS = ("c_crossattn", "crossattn_controlnet")


def _crossattn_can_concat(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape == b.shape:
        return True
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        return False
    if min(a.shape[1], b.shape[1]) == 0:  # a zero-length context (Lens's empty prompt) repeats to nothing
        return False
    return math.lcm(a.shape[1], b.shape[1]) // min(a.shape[1], b.shape[1]) <= 4


def can_concat(a: CondRun, b: CondRun) -> bool:
    """Whether two runs can share one forward pass (same input shape and compatible conditioning)."""
    if a.input_x.shape != b.input_x.shape:
        return False
    if (a.control is None) != (b.control is None) or (a.control is not None and a.control is not b.control):
        return False
    if (a.patches is None) != (b.patches is None) or (a.patches is not None and a.patches is not b.patches):
        return False
    if a.conditioning.keys() != b.conditioning.keys():
        return False
    for k, va in a.conditioning.items():
        vb = b.conditioning[k]
        if k in CROSS_ATTN_KEYS:
            if not _crossattn_can_concat(va, vb):
                return False
        elif not _input_can_concat(va, vb):
            return False
    return True


def concat_conditioning(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Concatenate per-run conditioning along the batch; contexts repeated to the LCM token length."""
    out: dict[str, torch.Tensor] = {}
    for k in items[0]:
        tensors = [it[k] for it in items]
        if k in CROSS_ATTN_KEYS:
            length = 1
            for t in tensors:
                length = math.lcm(length, t.shape[1])
            tensors = [t.repeat(1, length // t.shape[1], 1) if t.shape[1] < length else t for t in tensors]
        out[k] = _concat_input(tensors)
    return out


ApplyModel = Callable[..., torch.Tensor]
# Where a sampling run with hooks keeps its `comfy_core.hooks.sampling.HookRun` (same name there).
HOOK_RUN_OPTION = "hook_run"


def run_batches(apply_model: ApplyModel, runs: list[CondRun], x: torch.Tensor, sigma: torch.Tensor,
                out_conds: list[torch.Tensor], out_counts: list[torch.Tensor], slot_kind: list[int],
                model_options: dict) -> list[torch.Tensor]:
    """Evaluate `runs` in concatenated batches, accumulate `sum(out*mult)` into `out_conds[slot]`
    and `sum(mult)` into `out_counts[slot]`, then divide in place and return `out_conds`.

    `slot_kind[slot]` is ComfyUI's cond_or_uncond marker for that slot (the index of its cond
    list), passed to the model in `transformer_options["cond_or_uncond"]`.

    Runs are batched per hook group (the entries' `hooks` object, None for none), groups in the
    order they first appear, each with its weights on the model (`model_options["hook_run"]`,
    comfy_core/hooks/sampling.py), as ComfyUI's `_calc_cond_batch` does.

    This one frame keeps ComfyUI's `_calc_cond_batch` locals, because packs read and rewrite them
    from a `model_function_wrapper` by walking up the stack (smZNodes' weighted AND: it reads
    `area`, `mult`, `out_conds` and `out_counts`, swaps `out_conds` for its own list and sets
    `batch_chunks` to 0 so that nothing is accumulated here, then reads what this returns).
    """
    hook_run = model_options.get(HOOK_RUN_OPTION)
    groups: dict[int, tuple[Any, list[CondRun]]] = {}
    for r in runs:
        if r.hooks is not None and hook_run is not None:
            hook_run.prepare(sigma, r.hooks, model_options)  # keyframes move on before any group runs
        groups.setdefault(id(r.hooks), (r.hooks, []))[1].append(r)
    for hooks, to_run in groups.values():
        hooked = hooks is not None and hook_run is not None
        # a hooked-only TransformerOptionsHook's dictionary joins these passes only (ComfyUI's apply_hooks)
        hooked_options = hook_run.transformer_options(hooks) if hooked else {}
        with hook_run.applied(hooks) if hooked else contextlib.nullcontext():
            while to_run:
                first = to_run[0]
                to_batch = [i for i, r in enumerate(to_run) if can_concat(r, first)]
                to_batch.reverse()
                batch = [to_run.pop(i) for i in to_batch]
                area = [r.area for r in batch]
                mult = [r.mult for r in batch]
                cond_or_uncond = [slot_kind[r.slot] for r in batch]
                slots = [r.slot for r in batch]
                batch_chunks = len(batch)
                output = _run_batch(apply_model, batch, sigma, cond_or_uncond, model_options,
                                    hooked_options).chunk(batch_chunks)
                for o in range(batch_chunks):  # batch_chunks read again: a wrapper may have set it to 0
                    s, n = out_conds[slots[o]], out_counts[slots[o]]
                    a = area[o]
                    if a is not None:
                        h, w, y0, x0 = a
                        s = s[:, :, y0:y0 + h, x0:x0 + w]
                        n = n[:, :, y0:y0 + h, x0:x0 + w]
                    s += output[o] * mult[o]
                    n += mult[o]
    for i in range(len(out_conds)):
        out_conds[i] /= out_counts[i]
    return out_conds


def _run_batch(apply_model: ApplyModel, batch: list[CondRun], sigma: torch.Tensor, cond_or_uncond: list[int],
               model_options: dict, hooked_options: dict) -> torch.Tensor:
    """One forward pass of the concatenated `batch` (through `model_function_wrapper` if any).
    `hooked_options`: what the batch's hook group adds under the run's `transformer_options`."""
    input_x = torch.cat([r.input_x for r in batch])  # [sum B, C, h, w]
    c: dict[str, Any] = concat_conditioning([r.conditioning for r in batch])
    sigma_ = torch.cat([sigma] * len(batch))
    run_options = model_options.get("transformer_options", {})
    if hooked_options:  # ComfyUI: the hooks' dictionary, the run's options merged over it
        transformer_options = merge_nested_dicts(copy_nested_dicts(hooked_options), run_options, copy_dict1=False)
    else:
        transformer_options = dict(run_options)
    patches = batch[-1].patches
    if patches is not None:
        merged = dict(transformer_options.get("patches", {}))
        for name, plist in patches.items():
            merged[name] = merged.get(name, []) + list(plist)
        transformer_options["patches"] = merged
    transformer_options["cond_or_uncond"] = cond_or_uncond[:]
    transformer_options["uuids"] = [r.uuid for r in batch]
    transformer_options["sigmas"] = sigma
    c["transformer_options"] = transformer_options
    control = batch[-1].control
    if control is not None:
        c["control"] = control.get_control(input_x, sigma_, c, len(cond_or_uncond), transformer_options)
    wrapper = model_options.get("model_function_wrapper")
    if wrapper is not None:
        return wrapper(apply_model, {"input": input_x, "timestep": sigma_, "c": c, "cond_or_uncond": cond_or_uncond})
    return apply_model(input_x, sigma_, **c)


def _apply_model_of(model: Any) -> ApplyModel:
    """ComfyUI passes the diffusion model (which has `apply_model`); our own callers may pass the
    `apply_model` function itself. Either way, the function to run."""
    apply_model = getattr(model, "apply_model", None)
    return apply_model if callable(apply_model) else model


def calc_cond_batch_in_force() -> Callable[..., list[torch.Tensor]]:
    """`calc_cond_batch` as a run calls it (ComfyUI's code calls `comfy.samplers.calc_cond_batch`):
    a pack's replacement from the extension points in force, else `calc_cond_batch` below."""
    return extension_points.current().calc_cond_batch or calc_cond_batch


def calc_cond_batch(model: Any, conds: list[list[dict] | None], x_in: torch.Tensor,
                    timestep: torch.Tensor, model_options: dict) -> list[torch.Tensor]:
    """The weighted-average model output for each conditioning list (ComfyUI `calc_cond_batch`,
    its parameter names too: packs call it by keyword, `x_in=`, `timestep=` (the sigmas)).

    `model` is the diffusion model (ComfyUI's signature; anything with `apply_model`) or an
    `apply_model` function. `conds[0]` is the positive list, `conds[1]` the negative (None:
    skipped, result 0). As ComfyUI: a `model_options["context_handler"]` that wants the call runs
    it (context windows), and the `calc_cond_batch` wrappers of `model_options` run around it.
    """
    handler = model_options.get("context_handler")
    if handler is not None and handler.should_use_context(model, conds, x_in, timestep, model_options):
        return handler.execute(_calc_cond_batch_outer, model, conds, x_in, timestep, model_options)
    return _calc_cond_batch_outer(model, conds, x_in, timestep, model_options)


def _calc_cond_batch_outer(model: Any, conds: list[list[dict] | None], x: torch.Tensor, sigma: torch.Tensor,
                           model_options: dict) -> list[torch.Tensor]:
    return run_wrapped(WrappersMP.CALC_COND_BATCH, model_options, _calc_cond_batch, model, conds, x, sigma,
                       model_options)


def _calc_cond_batch(model: Any, conds: list[list[dict] | None], x: torch.Tensor, sigma: torch.Tensor,
                     model_options: dict) -> list[torch.Tensor]:
    apply_model = _apply_model_of(model)
    out_conds = [torch.zeros_like(x) for _ in conds]
    out_counts = [torch.full_like(x, 1e-37) for _ in conds]
    runs = []
    defaults: list[list[dict]] = []
    for slot, entries in enumerate(conds):
        defaults.append([e for e in entries or () if "default" in e])
        for e in entries or ():
            if "default" in e:
                continue
            r = area_and_mult_in_force(e, x, sigma, slot)
            if r is not None:
                runs.append(r)
    if any(defaults):
        runs += default_runs(runs, defaults, x, sigma)
    # each slot's marker is the index of its cond list, as ComfyUI's (0 positive, 1 negative, 2.. more)
    return run_batches(apply_model, runs, x, sigma, out_conds, out_counts, list(range(len(conds))), model_options)


def default_runs(runs: list[CondRun], defaults: list[list[dict]], x: torch.Tensor,
                 sigma: torch.Tensor) -> list[CondRun]:
    """Runs for `default` entries (ConditioningSetDefaultCombine): each weighted by what the
    slot's other runs leave uncovered, `relu(1 - sum of their weights)`, and skipped when that is
    zero everywhere (ComfyUI's `finalize_default_conds`)."""
    remaining = [torch.ones_like(x) for _ in defaults]
    for r in runs:
        if not defaults[r.slot]:
            continue
        target = remaining[r.slot]
        if r.area is not None:
            h, w, y0, x0 = r.area
            target = target[:, :, y0:y0 + h, x0:x0 + w]
        target -= r.mult
    out = []
    for slot, entries in enumerate(defaults):
        if not entries:
            continue
        mult = torch.relu_(remaining[slot])
        if torch.max(mult) == 0.0:
            continue
        for e in entries:
            r = area_and_mult_in_force(e, x, sigma, slot)
            if r is None:
                continue
            if r.area is not None:  # a default entry with an area sees its part of what is left
                h, w, y0, x0 = r.area
                r.mult = mult[:, :, y0:y0 + h, x0:x0 + w]
            else:
                r.mult = mult
            out.append(r)
    return out


def calc_composable(apply_model: ApplyModel, cond: list[dict], uncond: list[dict] | None, x: torch.Tensor,
                    sigma: torch.Tensor, model_options: dict) -> tuple[list[tuple[torch.Tensor, torch.Tensor, float]],
                                                                       torch.Tensor | None, torch.Tensor]:
    """Evaluate a positive list with `composable_weight` entries, all in shared batches.

    Returns `(terms, plain, uncond)`: `terms` = [(prediction, coverage, weight)] for each composable
    entry (coverage = where its weights are non-zero), `plain` = the weighted average of the other
    positive entries (or None), `uncond` = the negative's average.
    """
    composable = [e for e in cond if "composable_weight" in e]
    plain = [e for e in cond if "composable_weight" not in e]
    # slot 0: plain positive, 1: negative, 2..: one per composable entry
    n_slots = 2 + len(composable)
    out_counts = [torch.full_like(x, 1e-37) for _ in range(n_slots)]
    runs = []
    for slot, entries in ((0, plain), (1, uncond or [])):
        for e in entries:
            r = area_and_mult_in_force(e, x, sigma, slot)
            if r is not None:
                runs.append(r)
    active = []
    for j, e in enumerate(composable):
        r = area_and_mult_in_force(e, x, sigma, 2 + j)
        if r is not None:
            runs.append(r)
            active.append(j)
    slot_kind = [0, 1] + [0] * len(composable)
    results = run_batches(apply_model, runs, x, sigma, [torch.zeros_like(x) for _ in range(n_slots)], out_counts,
                          slot_kind, model_options)
    terms = [(results[2 + j], out_counts[2 + j] > 1e-30, float(composable[j]["composable_weight"])) for j in active]
    has_plain = any(in_timestep_range(e, sigma) for e in plain)
    return terms, (results[0] if has_plain else None), results[1]
