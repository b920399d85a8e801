"""LoRA on an fp8-stored DiT (UNETLoader's weight_dtype fp8_e4m3fn): the patched weight is
computed in float32 and stored back in fp8 by seeded stochastic rounding (ComfyUI 0.3.64's
`comfy.float.stochastic_rounding`, seed = CRC-32 of the parameter name), and the fp8 originals
come back bit for bit after the patch context."""
from __future__ import annotations

import zlib

import pytest
import torch

from comfy_core.lora import load_lora_for_models, stochastic_rounding, string_to_seed
from comfy_core.models.storage_cast import cast_weights_at_run_time
from tests.fixtures.dit_loras import FLUX_DIFFUSERS, flux_inputs, lora_in_spelling, random_factors, run, tiny_flux_model

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def neighbours(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp8 values just below and just above each value of `x` (float32), by search on the
    grid of all finite values of `dtype`."""
    grid = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    grid = torch.unique(grid[torch.isfinite(grid)])  # sorted
    index = torch.searchsorted(grid, x.flatten(), right=True).clamp(1, len(grid) - 1)
    low, high = grid[index - 1], grid[index]
    exact = grid[(index - 1)] == x.flatten()
    return low.reshape(x.shape), torch.where(exact, low, high).reshape(x.shape)


def assert_near_neighbours(out: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> None:
    """Each value of `out` is one of the two fp8 neighbours of `x`'s value, except a few that are
    one gap further: ComfyUI adds the draw to the scaled mantissa in float16, where a draw close to
    1 can round the sum up to the next integer (its arithmetic, which ours reproduces)."""
    low, high = neighbours(x, dtype)
    values = out.float()
    inside = (values == low) | (values == high)
    assert inside.float().mean() > 0.99
    gap = (high - low).clamp(min=2.0 ** -9)
    assert bool(((values - x).abs() <= 2 * gap).all())


@pytest.mark.parametrize("dtype", FP8, ids=["e4m3fn", "e5m2"])
def test_stochastic_rounding_goes_to_a_neighbour_unbiased_and_seeded(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=gen) * torch.logspace(-6, 1, 128)  # normals and subnormals
    out = stochastic_rounding(x, dtype, seed=7)
    assert out.dtype == dtype
    assert_near_neighbours(out, x, dtype)
    assert torch.equal(out.view(torch.uint8), stochastic_rounding(x, dtype, seed=7).view(torch.uint8))
    assert not torch.equal(out.view(torch.uint8), stochastic_rounding(x, dtype, seed=8).view(torch.uint8))
    # Unbiased: a constant halfway-ish between two fp8 values averages to itself.
    c = torch.full((200_000,), 1.0 + 0.3 * 2.0 ** -3)  # 30% of a gap (e4m3: 1/8, e5m2: 1/4) above 1
    mean = stochastic_rounding(c, dtype, seed=1).float().mean()
    assert abs(mean.item() - c[0].item()) < 2e-3
    assert torch.equal(stochastic_rounding(x, torch.float16), x.half())  # other dtypes: a plain cast


# The fp8 bytes ComfyUI 0.3.64's `comfy.float.stochastic_rounding` gives on the CPU for `_golden_input()`
# with the seed of "diffusion_model.img_in.weight" (recorded by running its comfy/float.py).
COMFYUI_BYTES = {
    torch.float8_e4m3fn: [199, 196, 192, 188, 184, 0, 0, 126, 158, 146, 132, 128, 0, 5, 18, 30, 39, 45, 51, 57, 60, 64,
                          68, 71],
    torch.float8_e5m2: [196, 194, 192, 190, 188, 0, 7, 97, 175, 169, 160, 141, 13, 33, 41, 47, 52, 55, 58, 61, 62, 64,
                        66, 67],
}


def _golden_input() -> torch.Tensor:
    x = torch.linspace(-3, 3, 24) ** 3 / 7
    x[5], x[6], x[7] = 0.0, 1e-4, 600.0  # zero, below the subnormals, above the range
    return x


@pytest.mark.parametrize("dtype", FP8, ids=["e4m3fn", "e5m2"])
def test_rounding_equals_comfyui_bit_for_bit(dtype):
    seed = string_to_seed("diffusion_model.img_in.weight")
    assert stochastic_rounding(_golden_input(), dtype, seed).view(torch.uint8).tolist() == COMFYUI_BYTES[dtype]


def test_seed_is_the_crc32_of_the_name():
    key = "diffusion_model.double_blocks.0.img_attn.qkv.weight"
    assert string_to_seed(key) == zlib.crc32(key.encode())
    # ComfyUI XORs code points into the CRC as they are; above 255 no byte encoding equals that.
    assert string_to_seed("ā") != zlib.crc32("ā".encode("utf-8"))
    assert string_to_seed("ā") == 0xFFFFFFFF ^ _crc_code_points("ā")


def _crc_code_points(text: str) -> int:
    crc = 0xFFFFFFFF
    for char in text:
        crc ^= ord(char)
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
    return crc


def fp8_flux(dtype: torch.dtype):
    """The tiny Flux with every weight stored in `dtype`, computing in float32 (as UNETLoader's
    fp8 weight_dtype loads it: comfy_core/split/diffusion_model.py)."""
    model = tiny_flux_model(seed=5)
    network = model.model.diffusion_model
    for module in network.modules():
        for name, param in list(module._parameters.items()):
            if param is not None:
                module._parameters[name] = torch.nn.Parameter(param.detach().to(dtype), requires_grad=False)
    cast_weights_at_run_time(network)
    model.model.manual_cast_dtype = torch.float32
    return model


def test_fp8_lora_weights_are_fp8_stochastically_rounded_and_restored_exactly():
    dtype = torch.float8_e4m3fn
    model = fp8_flux(dtype)
    originals = dict(model.model.state_dict(keep_vars=True))
    stored = {k: v.view(torch.uint8).clone() for k, v in originals.items()}
    factors = random_factors(model, list(FLUX_DIFFUSERS), seed=3, rank=4, scale=0.3)
    patched, _, report = load_lora_for_models(model, None, lora_in_spelling(factors, "diffusers", FLUX_DIFFUSERS, 4.0),
                                              1.0, 0.0)
    assert report.skipped == []
    with patched.applied() as module:
        after = {k: v.detach().clone() for k, v in module.state_dict().items()}
    for bfl, (up, down) in factors.items():
        key = f"diffusion_model.{bfl}.weight"
        exact = originals[key].detach().float() + up @ down  # the float32 result (alpha 4 / rank 4)
        assert after[key].dtype == dtype
        # stored as ComfyUI stores it: stochastic rounding seeded by the name ...
        assert torch.equal(after[key].view(torch.uint8),
                           stochastic_rounding(exact, dtype, string_to_seed(key)).view(torch.uint8)), key
        # ... so each value is (all but rarely) one of the two fp8 neighbours of the float32 result
        assert_near_neighbours(after[key], exact, dtype)
    assert not torch.equal(after["diffusion_model.img_in.weight"].float(),
                           (originals["diffusion_model.img_in.weight"].detach().float()
                            + factors["img_in"][0] @ factors["img_in"][1]).to(dtype).float())  # not plain rounding
    out = run(patched, flux_inputs())
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())
    now = model.model.state_dict(keep_vars=True)
    assert all(now[k] is originals[k] for k in originals)
    assert all(torch.equal(now[k].view(torch.uint8), stored[k]) for k in stored)
