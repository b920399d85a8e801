"""Noise exactly as ComfyUI draws it, so the same seed gives the same image.

- Initial noise (`prepare_noise`): a CPU generator seeded with `seed`, one float32 `randn` in the
  latent's shape for the whole batch (ComfyUI `comfy/sample.py: prepare_noise`); with
  `batch_index`, one `[1, C, H, W]` draw per index up to the largest, keeping the requested ones.
  A nested latent (comfy_core/latent/nested.py) draws its parts in order from the one generator
  (ComfyUI's `prepare_noise` on a NestedTensor), `batch_index` applied to each part.
  We use a private `torch.Generator` rather than `torch.manual_seed`: its stream is identical
  and no process-wide RNG state changes.
- Per-step noise of ancestral samplers (`default_noise_sampler`): a generator on `x`'s device
  seeded with the sampling seed itself, one `randn(x.shape)` in `x`'s dtype per call (ComfyUI
  0.3.64 `comfy/k_diffusion/sampling.py: default_noise_sampler`). On the CPU its first draw is
  therefore the initial noise again, exactly as in ComfyUI; later ComfyUI releases seed it with
  seed + 1 on the CPU, 0.3.64 (the version we match) does not.
- SDE samplers (`BrownianTreeNoiseSampler`): a `torchsde.BrownianTree` over [sigma_min, sigma_max]
  seeded with the sampling seed, increments normalised by `sqrt(|t1 - t0|)` (Kidger et al. 2021,
  "Efficient and Accurate Gradients for Neural SDEs", for the tree; k-diffusion for its use).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from comfy_core.latent.nested import NestedTensor, is_nested

NoiseSampler = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
SEED_MASK = 0xFFFFFFFFFFFFFFFF  # torch generators take 64-bit seeds


def prepare_noise(latent: Any, seed: int, batch_inds: Sequence[int] | None = None) -> Any:
    """Seeded CPU Gaussian noise in `latent`'s shape [B, C, H, W] (ComfyUI's `prepare_noise`); a
    NestedTensor of noises, drawn part after part from the same generator, for a nested latent."""
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    if is_nested(latent):
        return NestedTensor([_draw(part, generator, batch_inds) for part in latent.unbind()])
    return _draw(latent, generator, batch_inds)


def _draw(latent: torch.Tensor, generator: torch.Generator, batch_inds: Sequence[int] | None) -> torch.Tensor:
    shape = list(latent.shape)
    if batch_inds is None:
        noise = torch.randn(shape, dtype=torch.float32, generator=generator, device="cpu")
        return noise.to(dtype=latent.dtype)
    inds = np.asarray(list(batch_inds), dtype=np.int64)
    if inds.size == 0 or (inds < 0).any():
        raise ValueError(f"prepare_noise: batch_index must be non-negative integers, got {list(batch_inds)}")
    unique, inverse = np.unique(inds, return_inverse=True)
    drawn: list[torch.Tensor] = []
    for i in range(int(unique[-1]) + 1):
        # Every index below the largest is drawn (to advance the stream), only requested ones kept.
        one = torch.randn([1] + shape[1:], dtype=torch.float32, generator=generator, device="cpu")
        if i in unique:
            drawn.append(one)
    return torch.cat([drawn[i] for i in inverse.reshape(-1)], dim=0).to(dtype=latent.dtype)


def default_noise_sampler(x: torch.Tensor, seed: int | None = None) -> NoiseSampler:
    """Per-step Gaussian noise like `x` from a generator on `x`'s device seeded with `seed` as given
    (on every device, as ComfyUI 0.3.64), or from the global RNG when `seed` is None."""
    generator: torch.Generator | None = None
    if seed is not None:
        generator = torch.Generator(device=x.device).manual_seed(int(seed))

    def sample(sigma: torch.Tensor, sigma_next: torch.Tensor) -> torch.Tensor:
        return torch.randn(x.size(), dtype=x.dtype, layout=x.layout, device=x.device, generator=generator)

    return sample


class BatchedBrownianTree:
    """One or more `torchsde.BrownianTree`s over [t0, t1] (one per seed when given a seed list).

    Queries may come in either time order; the sign of the increment follows the query.
    """

    def __init__(self, x: torch.Tensor, t0: torch.Tensor, t1: torch.Tensor,
                 seed: int | Sequence[int] | None = None, *, cpu: bool = True) -> None:
        import torchsde  # imported lazily: only SDE samplers need it

        self.cpu_tree = cpu
        t0, t1, self.sign = self._sort(t0, t1)
        w0 = torch.zeros_like(x)
        self.batched = False
        if seed is None:
            seeds: Sequence[int] = (int(torch.randint(0, 2 ** 63 - 1, ()).item()),)
        elif isinstance(seed, (tuple, list)):
            if len(seed) != x.shape[0]:
                raise ValueError(f"BatchedBrownianTree: {len(seed)} seeds for a batch of {x.shape[0]}")
            self.batched = True
            w0 = w0[0]
            seeds = seed
        else:
            seeds = (int(seed),)
        if cpu:
            t0, w0, t1 = t0.detach().cpu(), w0.detach().cpu(), t1.detach().cpu()
        self.trees = tuple(torchsde.BrownianTree(t0, w0, t1, entropy=s) for s in seeds)

    @staticmethod
    def _sort(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        return (a, b, 1) if a < b else (b, a, -1)

    def __call__(self, t0: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
        t0, t1, sign = self._sort(t0, t1)
        device, dtype = t0.device, t0.dtype
        if self.cpu_tree:
            t0, t1 = t0.detach().cpu().float(), t1.detach().cpu().float()
        w = torch.stack([tree(t0, t1) for tree in self.trees]).to(device=device, dtype=dtype)
        w = w * (self.sign * sign)
        return w if self.batched else w[0]


class BrownianTreeNoiseSampler:
    """Noise for SDE samplers: Brownian increments between two sigmas, normalised to unit variance.

    `x` gives shape/device/dtype; `sigma_min`/`sigma_max` bound the queries (sigma_min > 0);
    `transform` maps sigma to the tree's time (identity for SD's sigma parametrisation).
    """

    def __init__(self, x: torch.Tensor, sigma_min: float | torch.Tensor, sigma_max: float | torch.Tensor,
                 seed: int | Sequence[int] | None = None,
                 transform: Callable[[torch.Tensor], torch.Tensor] = lambda s: s, *, cpu: bool = True) -> None:
        self.transform = transform
        t0 = transform(torch.as_tensor(sigma_min))
        t1 = transform(torch.as_tensor(sigma_max))
        self.tree = BatchedBrownianTree(x, t0, t1, seed, cpu=cpu)

    def __call__(self, sigma: torch.Tensor, sigma_next: torch.Tensor) -> torch.Tensor:
        t0 = self.transform(torch.as_tensor(sigma))
        t1 = self.transform(torch.as_tensor(sigma_next))
        return self.tree(t0, t1) / (t1 - t0).abs().sqrt()
