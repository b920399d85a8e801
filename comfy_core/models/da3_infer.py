"""A loaded Depth Anything 3 model (ComfyUI's DA3_MODEL), its monocular inference and the depth
post-processing ComfyUI's `comfy/ldm/depth_anything_3/preprocess.py` and `comfy_extras/nodes_da3.py`
do (written here from their behaviour):

- `target_size`: `upper_bound_resize` scales the longest side to `resolution`,
  `lower_bound_resize` the shortest; each side `round(side * scale)`, then to the nearest multiple
  of 14 (a tie goes up), at least 1;
- `preprocess`: [B, H, W, 3] in 0..1 -> Lanczos resize (Pillow on uint8, ComfyUI's
  `common_upscale(..., "lanczos")`) when the size changes, clamp, ImageNet mean / std, [B, 3, h, w];
- `DA3Model.infer`: one image at a time through the network in its dtype; depth, confidence and
  sky resized back bilinearly (align_corners off) to the input size, float32 on the CPU;
- `sky_aware_clip`: sky pixels (probability >= 0.3) set to the 99th percentile of the others'
  depth (when more than 10 of each);
- `normalize_v2_style`: depth between its 1st and 99th percentiles over the non-sky pixels,
  inverted (near white), sky black; `normalize_min_max` per image, inverted;
  `normalize_confidence` per image to 0..1 (all ones when flat). Above 100 000 values the
  percentiles read 100 000 drawn with replacement, as ComfyUI does, from a generator seeded 0 here
  (ComfyUI's global RNG) so a render is repeatable.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from comfy_core.models.resident import ResidentModel
from comfy_core.models.da3 import IMAGE_MEAN, IMAGE_STD, PATCH, DA3WeightsError, DepthAnything3, network_from_state_dict

RESIZE_METHODS = ("upper_bound_resize", "lower_bound_resize")
SKY_THRESHOLD = 0.3
SAMPLE_LIMIT = 100_000


def _round_to_patch(x: int, patch: int = PATCH) -> int:
    down = (x // patch) * patch
    up = down + patch
    return up if abs(up - x) <= abs(x - down) else down


def target_size(height: int, width: int, resolution: int, method: str = "upper_bound_resize") -> tuple[int, int]:
    """(h, w), multiples of 14, the network runs an image of `height x width` at."""
    if method == "upper_bound_resize":
        scale = resolution / float(max(height, width))
    elif method == "lower_bound_resize":
        scale = resolution / float(min(height, width))
    else:
        raise ValueError(f"unknown resize method {method!r}; expected one of {RESIZE_METHODS}")
    return max(1, _round_to_patch(int(round(height * scale)))), max(1, _round_to_patch(int(round(width * scale))))


def preprocess(image: torch.Tensor, resolution: int, method: str = "upper_bound_resize") -> torch.Tensor:
    """[B, 3, h, w] normalised network input for `image` [B, H, W, 3] in 0..1."""
    from comfy_core.image.resize import upscale_samples

    _, height, width, _ = image.shape
    h, w = target_size(height, width, resolution, method)
    x = image.movedim(-1, 1).contiguous().float()
    if (h, w) != (height, width):
        x = upscale_samples(x, w, h, "lanczos", "disabled")
    x = x.clamp(0.0, 1.0)
    mean = torch.tensor(IMAGE_MEAN, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std


def _resize_back(x: torch.Tensor, height: int, width: int) -> torch.Tensor:  # [B, h, w] -> [B, H, W]
    return F.interpolate(x.float()[:, None], size=(height, width), mode="bilinear", align_corners=False)[:, 0].cpu()


class DA3Model(ResidentModel):
    """ComfyUI's DA3_MODEL: the network, the dtype it runs in, and where it runs (`load_device`;
    kept on `offload_device` between runs)."""

    def __init__(self, network: DepthAnything3, *, load_device: torch.device | str = "cpu",
                 offload_device: torch.device | str = "cpu") -> None:
        super().__init__(network, load_device=load_device, offload_device=offload_device)
        self.config = network.config
        self.dtype = next(network.parameters()).dtype

    @property
    def has_sky(self) -> bool:
        return self.config.sky

    @property
    def has_confidence(self) -> bool:
        return self.config.output_dim > 1

    @torch.no_grad()
    def infer(self, image: torch.Tensor, resolution: int = 504, method: str = "upper_bound_resize",
              on_image=None) -> dict[str, torch.Tensor]:
        """depth [B, H, W] (+ `confidence`, `sky`) for `image` [B, H, W, 3] in 0..1, at the
        input's size, float32 on the CPU; `on_image(done, total)` after each image."""
        total, height, width, _ = image.shape
        found: dict[str, list[torch.Tensor]] = {}
        with self.loaded():
            for i in range(total):
                x = preprocess(image[i:i + 1].to(self.load_device), resolution, method).to(self.dtype)
                out = self.model(x)
                for ours, theirs in (("depth", "depth"), ("confidence", "depth_conf"), ("sky", "sky")):
                    if theirs in out:
                        found.setdefault(ours, []).append(_resize_back(out[theirs], height, width))
                if on_image is not None:
                    on_image(i + 1, total)
        return {k: torch.cat(v, dim=0) for k, v in found.items()}


def load_da3(path: str | Path, *, dtype: torch.dtype = torch.float32, load_device: torch.device | str = "cpu",
             offload_device: torch.device | str = "cpu") -> DA3Model:
    """The DA3 model in the file `path`, its weights in `dtype`."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    path = Path(path)
    try:
        state, _metadata = load_tensor_file(path)
    except CheckpointError as exc:
        raise DA3WeightsError(f"{path.name}: not a readable weights file ({exc})") from exc
    network = network_from_state_dict(state, path.name, dtype=dtype)
    return DA3Model(network, load_device=load_device, offload_device=offload_device)


# -- post-processing (DA3Render, DA3GeometryToMesh) ------------------------------------------------

def _sample(values: torch.Tensor) -> torch.Tensor:
    if values.numel() <= SAMPLE_LIMIT:
        return values
    generator = torch.Generator(device="cpu").manual_seed(0)
    idx = torch.randint(0, values.numel(), (SAMPLE_LIMIT,), generator=generator).to(values.device)
    return values[idx]


def non_sky(sky: torch.Tensor, threshold: float = SKY_THRESHOLD) -> torch.Tensor:
    return sky < threshold


def sky_aware_clip(depth: torch.Tensor, sky: torch.Tensor, quantile: float = 0.99) -> torch.Tensor:
    """[H, W]: sky pixels' depth set to the `quantile` of the other pixels' (module docstring)."""
    keep = non_sky(sky)
    if int(keep.sum()) <= 10 or int((~keep).sum()) <= 10:
        return depth.clone()
    cap = torch.quantile(_sample(depth[keep].float()), quantile)
    out = depth.clone()
    out[~keep] = cap.to(out.dtype)
    return out


def normalize_v2_style(depth: torch.Tensor, sky: torch.Tensor | None = None, low: float = 0.01,
                       high: float = 0.99) -> torch.Tensor:
    """[H, W] in 0..1, near white, sky black (module docstring)."""
    valid = depth.flatten()
    if sky is not None:
        keep = non_sky(sky)
        if bool(keep.any()):
            valid = depth[keep]
    sample = _sample(valid.float())
    lo, hi = torch.quantile(sample, low), torch.quantile(sample, high)
    norm = 1.0 - ((depth - lo) / (hi - lo).clamp(min=1e-6)).clamp(0.0, 1.0)
    if sky is not None:
        norm = torch.where(non_sky(sky), norm, torch.zeros_like(norm))
    return norm


def normalize_min_max(depth: torch.Tensor) -> torch.Tensor:
    """[..., H, W] per image between its min and max, inverted (near white)."""
    lo = depth.amin(dim=(-2, -1), keepdim=True)
    hi = depth.amax(dim=(-2, -1), keepdim=True)
    return 1.0 - ((depth - lo) / (hi - lo).clamp(min=1e-6)).clamp(0.0, 1.0)


def normalize_confidence(conf: torch.Tensor) -> torch.Tensor:
    """[B, H, W] per image to 0..1; a flat map is all ones."""
    out = []
    for c in conf:
        lo, hi = c.min(), c.max()
        out.append((c - lo) / (hi - lo) if bool(hi > lo) else torch.ones_like(c))
    return torch.stack(out, dim=0)
