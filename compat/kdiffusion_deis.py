"""ComfyUI's `comfy.k_diffusion.deis` (behaviour of today's ComfyUI `comfy/k_diffusion/deis.py`, the
DEIS coefficient helpers after zju-pi/diff-sampler's `solver_utils.py`), over our DEIS sampler's
coefficients (comfy_core/sampling/samplers/deis.py). Packs with their own multistep samplers call
`get_deis_coeff_list(sigmas, max_order, deis_mode=...)` (comfyui_overly_complicated_sampling's
"deis" step method) and combine the current and previous derivatives with the returned weights.

- `edm2t(edm_steps, epsilon_s=1e-3, sigma_min=0.002, sigma_max=80)`: the VP-SDE time of each sigma
  (a VP-SDE fitted to EDM's sigma range), and that SDE's `(beta_0, beta_1)` as 0-d tensors;
- `t2alpha_fn(beta_0, beta_1, t)`: alpha_t = exp(-t^2 (beta_1 - beta_0) / 2 - t beta_0);
- `cal_intergrand(beta_0, beta_1, taus)`: d(sigma)/dt of that SDE, -1/2 d(log alpha)/dt /
  sqrt(alpha (1 - alpha)) (ComfyUI differentiates with autograd; here it is written out);
- `cal_poly(prev_t, j, taus)`: the j-th Lagrange basis polynomial over the nodes `prev_t` at `taus`;
- `get_deis_coeff_list(t_steps, max_order, N=10000, deis_mode="tab")`: per step i, `[]` for a
  first-order step, else one weight per derivative, current first. "tab": order min(i + 1,
  max_order), the Lagrange basis over the last `order` VP times integrated against d(sigma)/dt
  over [t_i, t_i+1] by a Riemann sum of N points (our sampler's `deis_coefficients`). "rhoab":
  order min(i, max_order), `order + 1` weights, the Lagrange basis over the last `order + 1`
  sigmas integrated exactly over [sigma_i, sigma_i+1] (in sigma itself, no change of time).
  ComfyUI writes "rhoab" out for orders 1-3 only (a 4th order step there repeats the previous
  step's weights); here every order is integrated the same way.
"""
from __future__ import annotations

from typing import Any

import numpy as np  # noqa: F401 -- ComfyUI's module imports it (packs may read `deis.np`)
import torch

from comfy_core.sampling.samplers.deis import deis_coefficients, edm_to_vp_time


def edm2t(edm_steps: torch.Tensor, epsilon_s: float = 1e-3, sigma_min: float = 0.002,
          sigma_max: float = 80) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(t_steps, beta_0, beta_1)`: the VP time of each sigma and the fitted SDE's betas."""
    t_steps, beta_0, beta_1 = edm_to_vp_time(torch.as_tensor(edm_steps), epsilon_s, sigma_min, sigma_max)
    return t_steps, torch.tensor(beta_0, dtype=torch.float32), torch.tensor(beta_1, dtype=torch.float32)


def t2alpha_fn(beta_0: Any, beta_1: Any, t: torch.Tensor) -> torch.Tensor:
    """alpha_t of the VP-SDE with linear beta from `beta_0` to `beta_1`."""
    return torch.exp(-0.5 * t ** 2 * (beta_1 - beta_0) - t * beta_0)


def cal_intergrand(beta_0: Any, beta_1: Any, taus: torch.Tensor) -> torch.Tensor:
    """d(sigma)/dt at `taus` (ComfyUI's spelling of the name): sigma = sqrt((1 - alpha) / alpha)."""
    taus = taus.detach()
    alpha = t2alpha_fn(beta_0, beta_1, taus)
    dlog_alpha = -taus * (beta_1 - beta_0) - beta_0
    return -0.5 * dlog_alpha / torch.sqrt(alpha * (1 - alpha))


def cal_poly(prev_t: torch.Tensor, j: int, taus: Any) -> Any:
    """The Lagrange basis polynomial of node j over the nodes `prev_t`, at `taus`."""
    poly: Any = 1
    for k in range(prev_t.shape[0]):
        if k != j:
            poly = poly * (taus - prev_t[k]) / (prev_t[j] - prev_t[k])
    return poly


def _basis_integrals(nodes: list[float], start: float, end: float) -> list[float]:
    """Exact integrals over [start, end] of each Lagrange basis polynomial over `nodes`."""
    out = []
    for j, node in enumerate(nodes):
        others = [p for k, p in enumerate(nodes) if k != j]
        scale = float(np.prod([node - p for p in others]))
        antiderivative = np.polyint(np.poly(others) if others else np.array([1.0]))
        out.append(float(np.polyval(antiderivative, end) - np.polyval(antiderivative, start)) / scale)
    return out


def get_deis_coeff_list(t_steps: torch.Tensor, max_order: int, N: int = 10000,
                        deis_mode: str = "tab") -> list[list[torch.Tensor]]:
    """Per step, the DEIS weights of the current and previous derivatives (module docstring)."""
    if deis_mode == "tab":
        return deis_coefficients(torch.as_tensor(t_steps), max_order, N)
    if deis_mode != "rhoab":
        raise ValueError(f"get_deis_coeff_list: deis_mode must be 'tab' or 'rhoab', got {deis_mode!r}")
    steps = torch.as_tensor(t_steps)
    values = [float(v) for v in steps.detach().cpu().double()]
    dtype = steps.dtype if steps.is_floating_point() else torch.float32
    out: list[list[torch.Tensor]] = []
    for i in range(len(values) - 1):
        order = min(i, max_order)
        if order == 0:
            out.append([])
            continue
        nodes = [values[i - k] for k in range(order + 1)]
        out.append([torch.tensor(c, dtype=dtype) for c in _basis_integrals(nodes, values[i], values[i + 1])])
    return out


__all__ = ["cal_intergrand", "cal_poly", "edm2t", "get_deis_coeff_list", "np", "t2alpha_fn", "torch"]
