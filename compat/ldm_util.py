"""Small helpers of ComfyUI's `comfy.ldm.util` and `comfy.ldm.modules.diffusionmodules.util` /
`model.py` for node packs (behaviour of those files, written here): module initialisers,
layer factories and the VAE attention function packs call."""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping

import torch
from torch import nn

from compat.ldm_ops import disable_weight_init


def exists(value: Any) -> bool:
    return value is not None


def default(value: Any, fallback: Any) -> Any:
    """`value`, or `fallback` when `value` is None; a function `fallback` is called (as
    comfy.ldm.util's `default`, unlike the attention module's)."""
    if value is not None:
        return value
    return fallback() if inspect.isfunction(fallback) else fallback


def get_obj_from_str(string: str, reload: bool = False) -> Any:
    """The object `package.module.Name` names."""
    module, _, name = string.rpartition(".")
    mod = importlib.import_module(module)
    if reload:
        mod = importlib.reload(mod)
    return getattr(mod, name)


def instantiate_from_config(config: Mapping[str, Any]) -> Any:
    """`target(**params)` from an LDM-style `{"target": "pkg.Class", "params": {...}}`."""
    if "target" not in config:
        if config in ("__is_first_stage__", "__is_unconditional__"):
            return None
        raise KeyError("instantiate_from_config: the config has no 'target' key")
    return get_obj_from_str(config["target"])(**config.get("params", {}))


def count_params(model: nn.Module, verbose: bool = False) -> int:
    total = sum(p.numel() for p in model.parameters())
    if verbose:
        print(f"{type(model).__name__} has {total * 1.e-6:.2f} M params.")
    return total


def mean_flat(tensor: torch.Tensor) -> torch.Tensor:
    """The mean over all non-batch dimensions."""
    return tensor.mean(dim=list(range(1, tensor.dim())))


def zero_module(module: nn.Module) -> nn.Module:
    """Zero every parameter of `module` in place and return it (ControlNet's zero convolutions)."""
    for p in module.parameters():
        p.detach().zero_()
    return module


def scale_module(module: nn.Module, scale: float) -> nn.Module:
    for p in module.parameters():
        p.detach().mul_(scale)
    return module


def conv_nd(dims: int, *args: Any, **kwargs: Any) -> nn.Module:
    """A 1-, 2- or 3-D torch convolution."""
    convs = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
    if dims not in convs:
        raise ValueError(f"unsupported dimensions: {dims}")
    return convs[dims](*args, **kwargs)


def linear(*args: Any, **kwargs: Any) -> nn.Module:
    return nn.Linear(*args, **kwargs)


def normalization(channels: int, dtype: Any = None) -> nn.Module:
    """The 32-group norm of the LDM UNet (eps 1e-5)."""
    return nn.GroupNorm(32, channels, dtype=dtype)


def checkpoint(func: Callable[..., Any], inputs: tuple, params: Any, flag: bool) -> Any:
    """`func(*inputs)`, with activation checkpointing when `flag` (training only)."""
    if flag:
        from torch.utils.checkpoint import checkpoint as torch_checkpoint

        return torch_checkpoint(func, *inputs, use_reentrant=False)
    return func(*inputs)


def extract_into_tensor(a: torch.Tensor, t: torch.Tensor, x_shape: tuple) -> torch.Tensor:
    b = t.shape[0]
    return a.gather(-1, t).reshape(b, *((1,) * (len(x_shape) - 1)))


def normalize_transformer(in_channels: int, dtype: Any = None, device: Any = None) -> nn.Module:
    """attention.py's `Normalize`: 32 groups, eps 1e-6."""
    return nn.GroupNorm(32, in_channels, eps=1e-6, affine=True, dtype=dtype, device=device)


def normalize_vae(in_channels: int, num_groups: int = 32) -> nn.Module:
    """model.py's `Normalize` (the VAE's): eps 1e-6, built from `comfy.ops` as ComfyUI's."""
    return disable_weight_init.GroupNorm(num_groups=num_groups, num_channels=in_channels, eps=1e-6, affine=True)


def nonlinearity(x: torch.Tensor) -> torch.Tensor:
    """Swish / SiLU."""
    return x * torch.sigmoid(x)


def vae_attention() -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The VAE's single-head attention on images: `f(q, k, v)` with `[B, C, H, W]` inputs (or
    `[B, C, T, H, W]`), returning the input's shape; it runs the backend the VAE's patcher chose."""
    from comfy_core.attention import attention

    def vae_attention_function(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        shape = q.shape
        b, c = shape[0], shape[1]
        q, k, v = (t.reshape(b, c, -1).transpose(1, 2) for t in (q, k, v))  # [B, N, C]
        return attention(q, k, v, 1).transpose(1, 2).reshape(shape)

    return vae_attention_function


# --- DDPM / DDIM schedule helpers (comfy/ldm/modules/diffusionmodules/util.py, from CompVis latent-diffusion) ---

def make_beta_schedule(schedule: str, n_timestep: int, linear_start: float = 1e-4, linear_end: float = 2e-2,
                       cosine_s: float = 8e-3) -> "Any":
    """ComfyUI's `make_beta_schedule` (its parameter names): the [T] float64 betas of the named
    schedule, computed by comfy_core.models.beta_schedules (what our models' sampling tables are
    built with); a tensor, except "squaredcos_cap_v2", a NumPy array as ComfyUI returns it.
    An unknown name is a ValueError."""
    from comfy_core.models.beta_schedules import make_beta_schedule as betas

    table = betas(schedule, n_timestep, linear_start=linear_start, linear_end=linear_end, cosine_s=cosine_s)
    return table.numpy() if schedule == "squaredcos_cap_v2" else table


def betas_for_alpha_bar(num_diffusion_timesteps: int, alpha_bar: Callable[[float], float],
                        max_beta: float = 0.999) -> "Any":
    """The betas `min(1 - alpha_bar(t_{i+1}) / alpha_bar(t_i), max_beta)` that discretise a continuous
    alpha_bar(t), t in [0, 1] (Nichol & Dhariwal 2021, eq. 17), as a NumPy float64 array (ComfyUI's
    return type; comfy_core.models.beta_schedules computes them)."""
    from comfy_core.models.beta_schedules import _alpha_bar_betas

    return _alpha_bar_betas(num_diffusion_timesteps, alpha_bar, max_beta).numpy()


def make_ddim_timesteps(ddim_discr_method: str, num_ddim_timesteps: int, num_ddpm_timesteps: int,
                        verbose: bool = True) -> "Any":
    """The DDPM steps a DDIM sampler visits, plus one (Song et al. 2020, DDIM): "uniform" takes every
    `num_ddpm // num_ddim`-th step, "quad" `linspace(0, sqrt(0.8 num_ddpm), num_ddim)^2` truncated;
    a NumPy int array."""
    import logging

    import numpy as np

    if ddim_discr_method == "uniform":
        stride = num_ddpm_timesteps // num_ddim_timesteps
        steps = np.asarray(list(range(0, num_ddpm_timesteps, stride)))
    elif ddim_discr_method == "quad":
        steps = (np.linspace(0, np.sqrt(num_ddpm_timesteps * 0.8), num_ddim_timesteps) ** 2).astype(int)
    else:
        raise NotImplementedError(f'There is no ddim discretization method called "{ddim_discr_method}"')
    out = steps + 1  # the alphas of the first step from noise to data come out right
    if verbose:
        logging.getLogger(__name__).info("Selected timesteps for ddim sampler: %s", out)
    return out


def make_ddim_sampling_parameters(alphacums: Any, ddim_timesteps: Any, eta: float, verbose: bool = True) -> tuple:
    """`(sigmas, alphas, alphas_prev)` of a DDIM schedule: the cumulative alphas at the chosen steps,
    those one step before (the first: `alphacums[0]`), and `eta sqrt((1 - a_prev) / (1 - a) (1 - a /
    a_prev))` (DDIM, arXiv 2010.02502, eq. 16); NumPy arrays."""
    import logging

    import numpy as np

    alphas = alphacums[ddim_timesteps]
    alphas_prev = np.asarray([alphacums[0]] + alphacums[ddim_timesteps[:-1]].tolist())
    sigmas = eta * np.sqrt((1 - alphas_prev) / (1 - alphas) * (1 - alphas / alphas_prev))
    if verbose:
        logging.getLogger(__name__).info("Selected alphas for ddim sampler: a_t: %s; a_(t-1): %s; sigma_t: %s",
                                         alphas, alphas_prev, sigmas)
    return sigmas, alphas, alphas_prev


def noise_like(shape: tuple, device: Any, repeat: bool = False) -> torch.Tensor:
    """Standard normal noise of `shape` on `device` (the global generator); with `repeat`, one sample
    `[1, *shape[1:]]` repeated over the batch."""
    if repeat:
        return torch.randn((1, *shape[1:]), device=device).repeat(shape[0], *((1,) * (len(shape) - 1)))
    return torch.randn(shape, device=device)
