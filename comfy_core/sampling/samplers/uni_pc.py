"""UniPC, the unified predictor-corrector multistep solver (`uni_pc`, `uni_pc_bh2`).

Zhao et al. 2023, "UniPC: A Unified Predictor-Corrector Framework for Fast Sampling of Diffusion
Models" (arXiv 2302.04867): UniP-p predictor plus UniC corrector in data-prediction (x0) form,
with B(h) = h ("bh1") or e^h - 1 ("bh2"), multistep, order min(3, steps - 1), lower orders for
the first and last steps. Behaviour follows ComfyUI's `comfy/extra_samplers/uni_pc.py` (itself from
wl-zhao/UniPC): the VE sigmas are used as VP "times" (alpha = 1/sqrt(1+sigma^2)), a final sigma of 0
becomes 0.001, and the result is divided by alpha at that last sigma.
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.sampling.samplers.common import Denoiser, StepCallback


def _log_alpha(sigma: torch.Tensor) -> torch.Tensor:
    """log(alpha) of the VP process whose noise-to-signal ratio is `sigma`."""
    return 0.5 * torch.log(1 / (sigma * sigma + 1))


def _std(sigma: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(1.0 - torch.exp(2.0 * _log_alpha(sigma)))


def _lambda(sigma: torch.Tensor) -> torch.Tensor:
    """Half-log-SNR log(alpha) - log(std) (= -log sigma up to rounding)."""
    log_alpha = _log_alpha(sigma)
    return log_alpha - 0.5 * torch.log(1.0 - torch.exp(2.0 * log_alpha))


class _UniPC:
    """State-free UniPC maths around a VP-scale x0 predictor."""

    def __init__(self, model: Denoiser, extra_args: dict, variant: str) -> None:
        if variant not in ("bh1", "bh2"):
            raise ValueError(f"UniPC: variant must be 'bh1' or 'bh2', got {variant!r}")
        self.model = model
        self.extra_args = extra_args
        self.variant = variant

    def data_prediction(self, x_vp: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """x0 from a VP-scale input: via the eps the denoiser implies, as ComfyUI computes it."""
        s_in = sigma * x_vp.new_ones([x_vp.shape[0]])
        x_ve = x_vp * ((sigma ** 2 + 1.0) ** 0.5)
        eps = (x_ve - self.model(x_ve, s_in, **self.extra_args)) / sigma
        return (x_vp - _std(sigma) * eps) / torch.exp(_log_alpha(sigma))

    def update(self, x: torch.Tensor, model_prev: list[torch.Tensor], t_prev: list[torch.Tensor],
               t: torch.Tensor, order: int, use_corrector: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One UniP (+ UniC when `use_corrector`) step from t_prev[-1] to t of the given order."""
        if order > len(model_prev):
            raise ValueError(f"UniPC: order {order} needs {order} previous outputs, have {len(model_prev)}")
        t_prev_0, model_prev_0 = t_prev[-1], model_prev[-1]
        lambda_prev_0, lambda_t = _lambda(t_prev_0), _lambda(t)
        sigma_prev_0, sigma_t = _std(t_prev_0), _std(t)
        alpha_t = torch.exp(_log_alpha(t))
        h = lambda_t - lambda_prev_0

        rks: list[Any] = []
        d1s: list[torch.Tensor] = []
        for i in range(1, order):
            rk = (_lambda(t_prev[-(i + 1)]) - lambda_prev_0) / h
            rks.append(rk)
            d1s.append((model_prev[-(i + 1)] - model_prev_0) / rk)
        rks.append(1.0)
        rks_t = torch.tensor(rks, device=x.device)

        hh = -h  # data prediction
        h_phi_1 = torch.expm1(hh)
        b_h = hh if self.variant == "bh1" else torch.expm1(hh)
        # The b recurrence cancels badly for small h in float32: run it in float64 on the CPU.
        hh64 = hh.detach().cpu().double()
        h_phi_k = torch.expm1(hh64) / hh64 - 1
        b_h64 = hh64 if self.variant == "bh1" else torch.expm1(hh64)
        rows, b = [], []
        factorial = 1
        for i in range(1, order + 1):
            rows.append(torch.pow(rks_t, i - 1))
            b.append(h_phi_k * factorial / b_h64)
            factorial *= i + 1
            h_phi_k = h_phi_k / hh64 - 1 / factorial
        r_mat = torch.stack(rows)  # [order, order]
        b_vec = torch.tensor(b, device=x.device, dtype=hh.dtype)  # [order]

        d1_stack = torch.stack(d1s, dim=1) if d1s else None  # [B, order-1, ...]
        x_t_ = (sigma_t / sigma_prev_0) * x - (alpha_t * h_phi_1) * model_prev_0
        if d1_stack is not None:
            rhos_p = torch.tensor([0.5], device=x.device) if order == 2 else torch.linalg.solve(r_mat[:-1, :-1], b_vec[:-1])
            pred_res = torch.tensordot(d1_stack, rhos_p.to(d1_stack.dtype), dims=([1], [0]))
        else:
            pred_res = 0
        x_t = x_t_ - (alpha_t * b_h) * pred_res

        model_t = None
        if use_corrector:
            rhos_c = torch.tensor([0.5], device=x.device) if order == 1 else torch.linalg.solve(r_mat, b_vec)
            model_t = self.data_prediction(x_t, t)
            rhos_c = rhos_c.to(x.dtype)
            corr_res = torch.tensordot(d1_stack, rhos_c[:-1], dims=([1], [0])) if d1_stack is not None else 0
            x_t = x_t_ - (alpha_t * b_h) * (corr_res + rhos_c[-1] * (model_t - model_prev_0))
        return x_t, model_t


@torch.no_grad()
def sample_unipc(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                 callback: StepCallback = None, disable: Any = None, variant: str = "bh1") -> torch.Tensor:
    """UniPC multistep sampling over `sigmas` (k-diffusion calling convention; see module docstring)."""
    extra_args = {} if extra_args is None else extra_args
    timesteps = sigmas.clone()
    if timesteps[-1] == 0:
        timesteps[-1] = 0.001
    solver = _UniPC(model, extra_args, variant)
    x = x / torch.sqrt(1.0 + timesteps[0] ** 2.0)
    steps = len(timesteps) - 1
    order = min(3, len(timesteps) - 2)
    model_prev: list[torch.Tensor] = []
    t_prev: list[torch.Tensor] = []
    for step_index in range(steps):
        if step_index == 0:
            model_prev = [solver.data_prediction(x, timesteps[0])]
            t_prev = [timesteps[0]]
        elif step_index < order:
            t = timesteps[step_index]
            x, model_x = solver.update(x, model_prev, t_prev, t, step_index, use_corrector=True)
            model_prev.append(model_x if model_x is not None else solver.data_prediction(x, t))
            t_prev.append(t)
        else:
            last = step_index + 1 if step_index == steps - 1 else step_index
            for step in range(step_index, last + 1):
                t = timesteps[step]
                step_order = min(order, steps + 1 - step)  # lower order at the end
                use_corrector = step != steps  # no corrector on the final step
                x, model_x = solver.update(x, model_prev, t_prev, t, step_order, use_corrector)
                for i in range(order - 1):
                    t_prev[i] = t_prev[i + 1]
                    model_prev[i] = model_prev[i + 1]
                t_prev[-1] = t
                if step < steps:
                    model_prev[-1] = model_x if model_x is not None else solver.data_prediction(x, t)
        if callback is not None:
            callback({"x": x, "i": step_index, "sigma": timesteps[step_index],
                      "sigma_hat": timesteps[step_index], "denoised": model_prev[-1]})
    return x / torch.exp(_log_alpha(timesteps[-1]))


@torch.no_grad()
def sample_unipc_bh2(model: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, extra_args: dict | None = None,
                     callback: StepCallback = None, disable: Any = None) -> torch.Tensor:
    """UniPC with B(h) = e^h - 1 (Zhao et al. 2023, "bh2")."""
    return sample_unipc(model, x, sigmas, extra_args, callback, disable, variant="bh2")
