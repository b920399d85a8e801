"""ComfyUI's `comfy.samplers` functions whose signature differs from our runtime's, as thin
adapters over comfy_core.sampling (conditioning preparation, batching, schedulers).

Each takes ComfyUI's arguments (comfy/samplers.py, 0.3.64) and calls our function; the entries
are our prepared conditioning dicts (comfy_core.sampling.conditioning), the batch items ComfyUI's
`cond_obj` (`input_x`, `mult`, `conditioning`, `area`, `control`, `patches`, `uuid`, `hooks`; the
conditioning values are tensors, not ComfyUI's `CONDRegular` wrappers; `process_conds` hands packs
ComfyUI's wrappers, which the runtime's batching reads as their values). torch is imported by the
functions, not by this module.
"""
from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


# -- noise ---------------------------------------------------------------------------------------

def prepare_noise(latent_image: torch.Tensor, seed: int, noise_inds: Any = None) -> torch.Tensor:
    """ComfyUI's `comfy.sample.prepare_noise(latent_image, seed, noise_inds=None)`: the seeded
    CPU noise in the latent's shape (comfy_core.sampling.noise.prepare_noise), `noise_inds` the
    batch indices whose noise to draw."""
    from comfy_core.sampling.noise import prepare_noise as ours

    return ours(latent_image, seed, noise_inds)


# -- batching ------------------------------------------------------------------------------------

# ComfyUI's `cond_obj`: what `get_area_and_mult` returns, a named tuple packs index (`p[0]` is
# the input crop) and read by name.
cond_obj = collections.namedtuple("cond_obj", ["input_x", "mult", "conditioning", "area", "control", "patches",
                                               "uuid", "hooks"])


def get_area_and_mult(conds: dict, x_in: torch.Tensor, timestep_in: torch.Tensor) -> Any:
    """One prepared entry's crop, weights and model conditioning at this step as a `cond_obj`,
    or None when the entry is outside its timestep range (ComfyUI's `get_area_and_mult`; our
    runtime's, comfy_core.sampling.cond_batch). It is the built-in of the extension point
    `get_area_and_mult`: a pack's replacement that calls it gets ours, and what the replacement
    returns is what the run batches (cond_batch.area_and_mult_in_force)."""
    from comfy_core.sampling import cond_batch

    run = cond_batch.get_area_and_mult(conds, x_in, timestep_in, 0)
    if run is None:
        return None
    return cond_obj(run.input_x, run.mult, run.conditioning, run.area, run.control, run.patches, run.uuid, run.hooks)


def can_concat_cond(c1: Any, c2: Any) -> bool:
    """Whether two batch items can share one model call (ComfyUI's `can_concat_cond`)."""
    from comfy_core.sampling import cond_batch

    return cond_batch.can_concat(c1, c2)


def cond_cat(c_list: list[dict]) -> dict:
    """Batch items' model conditioning concatenated along the batch (ComfyUI's `cond_cat`)."""
    from comfy_core.sampling import cond_batch

    return cond_batch.concat_conditioning(c_list)


def calc_cond_uncond_batch(model: Any, cond: Any, uncond: Any, x_in: torch.Tensor, timestep: torch.Tensor,
                           model_options: dict) -> tuple:
    """Deprecated in ComfyUI (it logs so too): `calc_cond_batch` on `[cond, uncond]`."""
    from comfy_core import extension_points
    from comfy_core.sampling import cond_batch

    log.warning("comfy.samplers.calc_cond_uncond_batch is deprecated; use calc_cond_batch")
    calc_cond_batch = extension_points.current().calc_cond_batch or cond_batch.calc_cond_batch  # as ComfyUI's global
    return tuple(calc_cond_batch(model, [cond, uncond], x_in, timestep, model_options))


# -- conditioning preparation ----------------------------------------------------------------------

def resolve_areas_and_cond_masks_multidim(conditions: list[dict], dims: Any, device: Any) -> None:
    """In place: percentage areas to latent units, masks resized to the latent `dims` (h, w), a
    mask's bounds as the area where `set_area_to_bounds` (ComfyUI's function of the same name)."""
    from comfy_core.sampling.conditioning import resolve_area_and_mask

    dims = tuple(dims)
    if len(dims) != 2:
        raise NotImplementedError(f"resolve_areas_and_cond_masks_multidim: only 2-D latents are supported, got {dims}")
    for i, entry in enumerate(conditions):
        conditions[i] = resolve_area_and_mask(entry, (int(dims[0]), int(dims[1])), device)


def resolve_areas_and_cond_masks(conditions: list[dict], h: int, w: int, device: Any) -> None:
    """ComfyUI's 2-D form of `resolve_areas_and_cond_masks_multidim`."""
    resolve_areas_and_cond_masks_multidim(conditions, (h, w), device)


def create_cond_with_same_area_if_none(conds: list[dict], c: dict) -> None:
    """Give `conds` an entry over `c`'s area unless one exists (in place, ComfyUI's function)."""
    from comfy_core.sampling.conditioning import add_same_area_twin

    add_same_area_twin(conds, c)


def calculate_start_end_timesteps(model: Any, conds: list[dict]) -> None:
    """In place: `start_percent` / `end_percent` to `timestep_start` / `timestep_end` sigmas."""
    from comfy_core.sampling.conditioning import resolve_timestep_range

    for i, entry in enumerate(conds):
        conds[i] = resolve_timestep_range(entry, model.model_sampling)


def pre_run_control(model: Any, conds: list[dict]) -> None:
    """Get each entry's ControlNet ready for a run on `model` (ComfyUI's `pre_run_control`)."""
    percent_to_sigma = model.model_sampling.percent_to_sigma
    for entry in conds:
        if entry.get("control") is not None:
            entry["control"].pre_run(model, percent_to_sigma)


def apply_empty_x_to_equal_area(conds: list[dict], uncond: list[dict], name: str,
                                uncond_fill_func: Callable[[list, int], Any]) -> None:
    """Give `uncond`'s full-latent entries values of `name` from `conds`' full-latent entries
    when none of them has one (in place; ComfyUI's function, `uncond_fill_func(values, i)` picks
    the value for the i-th entry)."""
    values = [c[name] for c in conds if "area" not in c and c.get(name) is not None]
    if any("area" not in c and c.get(name) is not None for c in uncond):
        return
    without = [i for i, c in enumerate(uncond) if "area" not in c]
    if not without or not values:
        return
    for i in range(len(values)):
        index = without[i % len(without)]
        uncond[index] = {**uncond[index], name: uncond_fill_func(values, i)}


def encode_model_conds(model_function: Callable[..., dict], conds: list[dict], noise: torch.Tensor, device: Any,
                       prompt_type: str, **kwargs: Any) -> list[dict]:
    """Each entry with `model_function(**options)`'s results merged into its `model_conds`, the
    options being the entry's plus `device`, `noise`, default width/height (latent size x 8),
    `prompt_type` and `kwargs` where the entry has none (ComfyUI's `encode_model_conds`)."""
    out = []
    for entry in conds:
        params = dict(entry)
        params["device"] = device
        params["noise"] = noise
        params.setdefault("width", noise.shape[3] * 8 if noise.ndim >= 4 else None)
        params.setdefault("height", noise.shape[2] * 8)
        params.setdefault("prompt_type", prompt_type)
        for key, value in kwargs.items():
            params.setdefault(key, value)
        result = model_function(**params)
        entry = dict(entry)
        entry["model_conds"] = {**entry.get("model_conds", {}), **(result or {})}
        out.append(entry)
    return out


def process_conds(model: Any, noise: torch.Tensor, conds: dict[str, list[dict]], device: Any,
                  latent_image: torch.Tensor | None = None, denoise_mask: torch.Tensor | None = None,
                  seed: int | None = None, latent_shapes: list | None = None) -> dict[str, list[dict]]:
    """Every preparation step for `conds` ({"positive": entries, "negative": entries, ...}) on the
    diffusion `model` (ComfyUI's `process_conds`): areas and masks, timestep ranges, model
    conditioning, twin areas, GLIGEN, ControlNets. Returns the prepared dict. `latent_shapes`:
    a packed nested latent's part shapes, for the model's conditions."""
    from comfy_core.sampling.conditioning import prepare_conds, prepare_control

    prepared = prepare_conds(conds, noise.to(device) if device is not None else noise, model.model_sampling,
                             getattr(model, "encode_adm", None), concat_cond=getattr(model, "concat_cond", None),
                             latent_image=latent_image, denoise_mask=denoise_mask, seed=seed,
                             extra_inputs=getattr(model, "extra_inputs", None), latent_shapes=latent_shapes)
    prepare_control(prepared, model)
    from compat.mp_conds import comfy_entries

    # ComfyUI's model_conds hold comfy.conds wrappers (packs read `.cond`); the runtime's batching reads them too
    return {name: comfy_entries(entries) for name, entries in prepared.items()}


def get_mask_aabb(masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per mask of a `[B, h, w]` batch, its bounding box `(x0, y0, x1, y1)` and whether it is
    empty (ComfyUI's `get_mask_aabb`)."""
    import torch

    b = masks.shape[0]
    boxes = torch.zeros((b, 4), device=masks.device, dtype=torch.int)
    empty = torch.zeros((b,), device=masks.device, dtype=torch.bool)
    for i in range(b):
        if masks[i].numel() == 0:
            continue
        ys, xs = torch.where(masks[i] != 0)
        if ys.numel() == 0:
            empty[i] = True
            continue
        boxes[i] = torch.stack([xs.min(), ys.min(), xs.max(), ys.max()]).to(torch.int)
    return boxes, empty


# -- schedulers with ComfyUI's signatures ----------------------------------------------------------

def simple_scheduler(model_sampling: Any, steps: int) -> torch.Tensor:
    from comfy_core.sampling import schedulers

    return schedulers.simple(model_sampling, steps)


def ddim_scheduler(model_sampling: Any, steps: int) -> torch.Tensor:
    from comfy_core.sampling import schedulers

    return schedulers.ddim_uniform(model_sampling, steps)


def normal_scheduler(model_sampling: Any, steps: int, sgm: bool = False, floor: bool = False) -> torch.Tensor:
    """`floor` is accepted and unused, as in ComfyUI."""
    from comfy_core.sampling import schedulers

    return schedulers.sgm_uniform(model_sampling, steps) if sgm else schedulers.normal(model_sampling, steps)


def beta_scheduler(model_sampling: Any, steps: int, alpha: float = 0.6, beta: float = 0.6) -> torch.Tensor:
    from comfy_core.sampling import schedulers

    return schedulers.beta(model_sampling, steps, alpha=alpha, beta_=beta)


def linear_quadratic_schedule(model_sampling: Any, steps: int, threshold_noise: float = 0.025,
                              linear_steps: int | None = None) -> torch.Tensor:
    from comfy_core.sampling import schedulers

    return schedulers.linear_quadratic(model_sampling, steps, threshold_noise, linear_steps)


def kl_optimal_scheduler(n: int, sigma_min: float, sigma_max: float) -> torch.Tensor:
    from comfy_core.sampling import schedulers

    return schedulers.kl_optimal(n, sigma_min, sigma_max)
