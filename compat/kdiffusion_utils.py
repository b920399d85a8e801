"""ComfyUI's `comfy.k_diffusion.utils`: k-diffusion's training and data helpers (Katherine
Crowson's k-diffusion, k_diffusion/utils.py, which ComfyUI keeps), written here from their
definitions.

- noise-level samplers for training (Karras et al. 2022, "Elucidating the Design Space of
  Diffusion-Based Generative Models", arXiv 2206.00364): log-normal, truncated log-logistic,
  log-uniform, the v-diffusion cosine distribution, and a split log-normal;
- EMA helpers (`ema_update`, `EMAWarmup`, the warm-up schedule of @crowsonkb's EMA);
- learning-rate schedules (`InverseLR`, `ExponentialLR`), model-mode context managers,
  TF32 switches, a CSV logger, a file download with a SHA-256 check;
- `FolderOfImages`: every image under a folder as a dataset (VideoHelperSuite reads it).

`append_dims` is the sampler's own helper (comfy_core), under k-diffusion's parameter names.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn, optim
from torch.utils import data


class DownloadDigestError(ValueError):
    """A downloaded or existing file whose SHA-256 is not the one asked for."""


def append_dims(x: torch.Tensor, target_dims: int) -> torch.Tensor:
    """`x` with singleton dimensions appended up to `target_dims` dimensions."""
    from comfy_core.sampling.samplers.common import append_dims as ours

    return ours(x, target_dims)


def n_params(module: nn.Module) -> int:
    """The number of parameters of a module."""
    return sum(p.numel() for p in module.parameters())


def download_file(path: str | Path, url: str, digest: str | None = None) -> Path:
    """`path`, downloaded from `url` first when it does not exist; with `digest`, its SHA-256
    must match (else DownloadDigestError)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with urllib.request.urlopen(url) as response, open(path, "wb") as out:  # noqa: S310 - ComfyUI's helper
            shutil.copyfileobj(response, out)
    if digest is not None:
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        if found != digest:
            raise DownloadDigestError(f"hash of {path} (url: {url}) is {found}, expected {digest}")
    return path


@contextlib.contextmanager
def train_mode(model: nn.Module, mode: bool = True) -> Iterator[None]:
    """Inside: every submodule in training mode `mode`; after: each one's mode as before."""
    modes = [module.training for module in model.modules()]
    try:
        yield model.train(mode)
    finally:
        for module, was in zip(model.modules(), modes):
            module.training = was


def eval_mode(model: nn.Module) -> contextlib.AbstractContextManager:
    """`train_mode(model, False)`."""
    return train_mode(model, False)


@torch.no_grad()
def ema_update(model: nn.Module, averaged_model: nn.Module, decay: float) -> None:
    """In place: `averaged = decay * averaged + (1 - decay) * current` for every parameter, and
    the buffers copied; both models must have the same parameter and buffer names."""
    params = dict(model.named_parameters())
    averaged_params = dict(averaged_model.named_parameters())
    if params.keys() != averaged_params.keys():
        raise ValueError("ema_update: the models' parameter names differ")
    for name, param in params.items():
        averaged_params[name].mul_(decay).add_(param, alpha=1 - decay)
    buffers = dict(model.named_buffers())
    averaged_buffers = dict(averaged_model.named_buffers())
    if buffers.keys() != averaged_buffers.keys():
        raise ValueError("ema_update: the models' buffer names differ")
    for name, buffer in buffers.items():
        averaged_buffers[name].copy_(buffer)


class EMAWarmup:
    """The EMA decay over training: `1 - (1 + epoch / inv_gamma) ** -power`, clamped to
    [min_value, max_value], 0 before `start_at`. `step()` advances one epoch."""

    def __init__(self, inv_gamma: float = 1.0, power: float = 1.0, min_value: float = 0.0, max_value: float = 1.0,
                 start_at: int = 0, last_epoch: int = 0) -> None:
        self.inv_gamma = inv_gamma
        self.power = power
        self.min_value = min_value
        self.max_value = max_value
        self.start_at = start_at
        self.last_epoch = last_epoch

    def state_dict(self) -> dict:
        return dict(self.__dict__)

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def get_value(self) -> float:
        epoch = max(0, self.last_epoch - self.start_at)
        value = 1 - (1 + epoch / self.inv_gamma) ** -self.power
        return 0.0 if epoch < 0 else min(self.max_value, max(self.min_value, value))

    def step(self) -> None:
        self.last_epoch += 1


def _scheduler_init(scheduler: Any, optimizer: optim.Optimizer, last_epoch: int, verbose: bool) -> None:
    # torch deprecated (then removed) `verbose`; pass it only where it is still a parameter
    import inspect

    base = optim.lr_scheduler.LRScheduler
    if "verbose" in inspect.signature(base.__init__).parameters:
        base.__init__(scheduler, optimizer, last_epoch, verbose)
    else:
        base.__init__(scheduler, optimizer, last_epoch)


class InverseLR(optim.lr_scheduler.LRScheduler):
    """Inverse-decay learning rate `base * (1 + epoch / inv_gamma) ** -power`, at least `min_lr`,
    times an exponential warm-up `1 - warmup ** (epoch + 1)`."""

    def __init__(self, optimizer: optim.Optimizer, inv_gamma: float = 1.0, power: float = 1.0, warmup: float = 0.0,
                 min_lr: float = 0.0, last_epoch: int = -1, verbose: bool = False) -> None:
        if not 0.0 <= warmup < 1:
            raise ValueError(f"InverseLR: warmup must be in [0, 1), got {warmup}")
        self.inv_gamma, self.power, self.warmup, self.min_lr = inv_gamma, power, warmup, min_lr
        _scheduler_init(self, optimizer, last_epoch, verbose)

    def get_lr(self) -> list[float]:
        warmup = 1 - self.warmup ** (self.last_epoch + 1)
        factor = (1 + self.last_epoch / self.inv_gamma) ** -self.power
        return [warmup * max(self.min_lr, base_lr * factor) for base_lr in self.base_lrs]


class ExponentialLR(optim.lr_scheduler.LRScheduler):
    """Exponential decay by `decay` every `num_steps` steps (continuously), at least `min_lr`,
    times an exponential warm-up `1 - warmup ** (epoch + 1)`."""

    def __init__(self, optimizer: optim.Optimizer, num_steps: int, decay: float = 0.5, warmup: float = 0.0,
                 min_lr: float = 0.0, last_epoch: int = -1, verbose: bool = False) -> None:
        if not 0.0 <= warmup < 1:
            raise ValueError(f"ExponentialLR: warmup must be in [0, 1), got {warmup}")
        self.num_steps, self.decay, self.warmup, self.min_lr = num_steps, decay, warmup, min_lr
        _scheduler_init(self, optimizer, last_epoch, verbose)

    def get_lr(self) -> list[float]:
        warmup = 1 - self.warmup ** (self.last_epoch + 1)
        factor = (self.decay ** (1 / self.num_steps)) ** self.last_epoch
        return [warmup * max(self.min_lr, base_lr * factor) for base_lr in self.base_lrs]


# -- noise levels for training (sigma distributions) ---------------------------------------------

def rand_log_normal(shape: Any, loc: float = 0.0, scale: float = 1.0, device: Any = "cpu",
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples of `exp(N(loc, scale^2))`."""
    return (torch.randn(shape, device=device, dtype=dtype) * scale + loc).exp()


def _logistic_cdf(x: float, loc: float, scale: float) -> float:
    return 1.0 / (1.0 + math.exp(-(x - loc) / scale)) if math.isfinite(x) else (1.0 if x > 0 else 0.0)


def rand_log_logistic(shape: Any, loc: float = 0.0, scale: float = 1.0, min_value: float = 0.0,
                      max_value: float = float("inf"), device: Any = "cpu",
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples of a log-logistic distribution truncated to [min_value, max_value] (inverse CDF)."""
    low = _logistic_cdf(math.log(min_value) if min_value > 0 else -math.inf, loc, scale)
    high = _logistic_cdf(math.log(max_value) if math.isfinite(max_value) else math.inf, loc, scale)
    u = torch.rand(shape, device=device, dtype=torch.float64) * (high - low) + low
    return (u.logit() * scale + loc).exp().to(dtype)


def rand_log_uniform(shape: Any, min_value: float, max_value: float, device: Any = "cpu",
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples uniform in log space between `min_value` and `max_value`."""
    low, high = math.log(min_value), math.log(max_value)
    return (torch.rand(shape, device=device, dtype=dtype) * (high - low) + low).exp()


def rand_v_diffusion(shape: Any, sigma_data: float = 1.0, min_value: float = 0.0, max_value: float = float("inf"),
                     device: Any = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples of the noise levels of v-diffusion's cosine schedule, `sigma_data * tan(u * pi/2)`,
    with u uniform between the CDF values of `min_value` and `max_value`."""
    low = math.atan(min_value / sigma_data) * 2 / math.pi
    high = math.atan(max_value / sigma_data) * 2 / math.pi
    u = torch.rand(shape, device=device, dtype=dtype) * (high - low) + low
    return torch.tan(u * math.pi / 2) * sigma_data


def rand_split_log_normal(shape: Any, loc: float, scale_1: float, scale_2: float, device: Any = "cpu",
                          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples of a split log-normal: below `loc` (in log space) with scale `scale_1`, above it
    with `scale_2`, each side weighted by its scale."""
    n = torch.randn(shape, device=device, dtype=dtype).abs()
    u = torch.rand(shape, device=device, dtype=dtype)
    left = n * -scale_1 + loc
    right = n * scale_2 + loc
    ratio = scale_1 / (scale_1 + scale_2)
    return torch.where(u < ratio, left, right).exp()


@contextlib.contextmanager
def tf32_mode(cudnn: bool | None = None, matmul: bool | None = None) -> Iterator[None]:
    """Inside: TF32 for cuDNN and/or matmul switched as asked (None leaves it); restored after."""
    cudnn_before = torch.backends.cudnn.allow_tf32
    matmul_before = torch.backends.cuda.matmul.allow_tf32
    try:
        if cudnn is not None:
            torch.backends.cudnn.allow_tf32 = cudnn
        if matmul is not None:
            torch.backends.cuda.matmul.allow_tf32 = matmul
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = cudnn_before
        torch.backends.cuda.matmul.allow_tf32 = matmul_before


class CSVLogger:
    """Appends rows to a CSV file; writes the header `columns` when the file is new."""

    def __init__(self, filename: str | Path, columns: list[str]) -> None:
        self.filename = Path(filename)
        self.columns = columns
        if self.filename.exists():
            self.file = open(self.filename, "a", encoding="utf-8")  # noqa: SIM115 - kept open, as there
        else:
            self.file = open(self.filename, "w", encoding="utf-8")  # noqa: SIM115
            self.write(*self.columns)

    def write(self, *args: Any) -> None:
        print(*args, sep=",", file=self.file, flush=True)


def hf_datasets_augs_helper(examples: dict, transform: Callable, image_key: str, mode: str = "RGB") -> dict:
    """A Hugging Face `datasets` transform: every image of the batch converted to `mode` and
    passed through `transform`, each result's first item kept."""
    images = [transform(image.convert(mode)) for image in examples[image_key]]
    return {image_key: [image[0] for image in images]}


class FolderOfImages(data.Dataset):
    """Every image file under `root` (recursively, sorted), as a dataset of 1-tuples
    `(transform(image),)`, each image an RGB PIL image; `transform` defaults to the identity."""

    IMG_EXTENSIONS = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

    def __init__(self, root: str | Path, transform: Callable | None = None) -> None:
        super().__init__()
        self.root = Path(root)
        self.transform = nn.Identity() if transform is None else transform
        self.paths = sorted(path for path in self.root.rglob("*") if path.suffix.lower() in self.IMG_EXTENSIONS)

    def __repr__(self) -> str:
        return f'FolderOfImages(root="{self.root}", len: {len(self)})'

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, key: int) -> tuple:
        from PIL import Image

        with open(self.paths[key], "rb") as f:
            image = Image.open(f).convert("RGB")
        return (self.transform(image),)


