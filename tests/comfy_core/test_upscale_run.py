"""comfy_core.upscale.run: ComfyUI's ImageUpscaleWithModel procedure (tile 512 / overlap 32, tile
halved on out-of-memory down to 128, clamped, progress per tile)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.upscale.loading import model_from_state_dict
from comfy_core.upscale.run import memory_required, tile_steps, upscale_image
from comfy_core.upscale.tiling import get_tiled_scale_steps
from tests.comfy_core.test_upscale_tiling import reference_tiled_scale
from tests.fixtures.upscale_models import compact_state_dict, esrgan_state_dict


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


class OutOfMemoryAbove:
    """A spandrel model that runs out of memory on tiles with a side above `limit`."""

    def __init__(self, model, limit: int) -> None:
        self.inner, self.limit, self.sides = model, limit, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def to(self, *args, **kwargs):
        self.inner.to(*args, **kwargs)
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.sides.append(max(x.shape[2:]))
        if max(x.shape[2:]) > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(x)


@pytest.fixture(scope="module")
def compact():
    return model_from_state_dict(compact_state_dict(scale=2, num_conv=1, seed=4))


def test_an_image_within_one_tile_is_the_model_called_directly(compact):
    image = _rand(2, 40, 56, 3)
    out = upscale_image(compact, image)
    assert out.shape == (2, 80, 112, 3) and out.dtype == torch.float32
    for b in range(2):
        assert torch.equal(out[b], compact(image[b:b + 1].movedim(-1, 1))[0].movedim(0, -1))


def test_a_large_image_is_blended_from_512_pixel_tiles(compact):
    image = _rand(1, 20, 1000, 3, seed=1)
    seen = []
    out = upscale_image(compact, image, progress=lambda done, total: seen.append((done, total)))
    planes = image.movedim(-1, 1)
    expected = reference_tiled_scale(planes, compact, (512, 512), 32, 2).clamp(0, 1).movedim(1, -1)
    assert torch.equal(out, expected)
    assert seen == [(1, 3), (2, 3), (3, 3)]  # 1000 px wide: tiles at 0, 480, 960


def test_out_of_memory_halves_the_tile_and_starts_again(compact):
    image = _rand(1, 300, 300, 3, seed=2)
    model = OutOfMemoryAbove(compact, limit=256)
    seen = []
    out = upscale_image(model, image, progress=lambda done, total: seen.append((done, total)))
    # 512 fails on the first (whole-image) call; 256 runs 2 x 2 tiles.
    assert model.sides[0] == 300 and all(side <= 256 for side in model.sides[1:])
    assert seen == [(i, 4) for i in range(1, 5)]
    expected = reference_tiled_scale(image.movedim(-1, 1), compact, (256, 256), 32, 2).clamp(0, 1).movedim(1, -1)
    assert torch.equal(out, expected)


def test_out_of_memory_below_128_pixel_tiles_is_raised(compact):
    model = OutOfMemoryAbove(compact, limit=64)
    with pytest.raises(torch.OutOfMemoryError):
        upscale_image(model, _rand(1, 200, 200, 3, seed=3))
    assert model.sides == [200, 200, 128]  # tiles 512 and 256 (one call each), then 128; no 64


def test_other_errors_are_not_retried(compact):
    class Broken(OutOfMemoryAbove):
        def __call__(self, x):
            self.sides.append(1)
            raise RuntimeError("shape mismatch")
    model = Broken(compact, limit=0)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        upscale_image(model, _rand(1, 8, 8, 3))
    assert model.sides == [1]


def test_the_result_is_clamped_and_can_be_changed_in_place():
    model = model_from_state_dict(esrgan_state_dict("old", scale=2, seed=9))
    with torch.no_grad():  # push the output past 0..1 on both sides
        model.model.state_dict()["model.7.bias"].copy_(torch.tensor([-3.0, 0.5, 3.0]))
    out = upscale_image(model, _rand(1, 16, 16, 3))
    assert out[..., 0].max() == 0.0 and out[..., 2].min() == 1.0
    assert not out.is_inference()
    out.mul_(0.5)  # downstream nodes may work in place, as on ComfyUI's output


def test_progress_totals_and_memory_estimate(compact):
    image = torch.zeros(2, 1000, 513, 3)
    assert tile_steps(image) == 2 * get_tiled_scale_steps(513, 1000, 512, 512, 32) == 2 * 3 * 2
    weights = sum(t.numel() * 4 for t in compact.model.state_dict().values())
    assert memory_required(compact, image) == int(weights + 512 * 512 * 3 * 4 * 2 * 384.0 + image.numel() * 4)


def test_the_model_goes_back_to_the_offload_device_also_after_an_error():
    model = model_from_state_dict(compact_state_dict(scale=2, num_conv=1))
    upscale_image(model, _rand(1, 8, 8, 3), device="cpu", offload_device="meta")
    assert model.device.type == "meta"
    model = model_from_state_dict(compact_state_dict(scale=2, num_conv=1))
    with pytest.raises(torch.OutOfMemoryError):
        upscale_image(OutOfMemoryAbove(model, limit=0), _rand(1, 8, 8, 3), offload_device="meta")
    assert model.device.type == "meta"
