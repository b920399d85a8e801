"""The maths of ComfyUI's quantised weight formats (comfy_core/weights/quant_*.py), checked against
values worked out by hand from the formats' definitions (comfy-kitchen's layouts), not against the
code's own round trips alone."""
from __future__ import annotations

import json
import math

import pytest
import torch

from comfy_core.weights import quant_blocks, quant_fp4, quant_fp8, quant_int8
from comfy_core.weights.quant_registry import (FORMATS, METADATA_KEY, QuantFormatError, int8_group, parse_conf,
                                               quantized_layers)

H4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float64)


def _explicit_hadamard(group: int) -> torch.Tensor:
    h = H4
    while h.shape[0] < group:
        h = torch.kron(h, H4)
    return h / math.sqrt(group)


@pytest.mark.parametrize("group", [4, 16, 64, 256])
def test_convrot_rotation_is_the_regular_hadamard_product_per_group(group):
    h = _explicit_hadamard(group)
    assert torch.allclose(quant_int8.hadamard(group, torch.float64), h)
    assert torch.allclose(h @ h, torch.eye(group, dtype=torch.float64))  # symmetric and orthogonal: an involution
    x = torch.randn(3, 2 * group, generator=torch.Generator().manual_seed(group), dtype=torch.float64)
    expected = (x.reshape(3, 2, group) @ h).reshape(3, 2 * group)  # x @ H on each run of `group` inputs
    assert torch.allclose(quant_int8.rotate(x, group), expected)
    assert torch.allclose(quant_int8.rotate(quant_int8.rotate(x, group), group), x)


@pytest.mark.parametrize("group, width", [(8, 64), (0, 64), (64, 96)])
def test_convrot_group_must_be_a_power_of_four_dividing_the_width(group, width):
    with pytest.raises(quant_int8.ConvRotError):
        quant_int8.check_group(group, width)


def test_int8_dequantizes_tensorwise_and_per_row_and_convrot_rotates_back():
    q = torch.tensor([[127, -128], [2, -3]], dtype=torch.int8)
    assert torch.equal(quant_int8.dequantize_int8(q, torch.tensor(0.5)), torch.tensor([[63.5, -64.0], [1.0, -1.5]]))
    rows = torch.tensor([[0.5], [2.0]])
    for stored in (rows, rows.reshape(2)):  # ComfyUI's [out, 1] and converters' [out]
        assert torch.equal(quant_int8.dequantize_int8(q, stored), torch.tensor([[63.5, -64.0], [4.0, -6.0]]))
    q16 = torch.randint(-128, 128, (3, 16), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    scale = torch.tensor([[0.1], [0.2], [0.3]])
    expected = (q16.double() * scale.double()) @ _explicit_hadamard(16)  # W = W_rot @ H
    assert torch.allclose(quant_int8.dequantize_int8(q16, scale, 16).double(), expected, atol=1e-6)


def test_int8_quantization_is_within_half_a_step_and_convrot_spreads_an_outlier():
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    w[0, 5] = 40.0  # an outlier: a plain row scale spends its range on it
    plain_q, plain_s = quant_int8.quantize_int8(w, per_row=True)
    assert (quant_int8.dequantize_int8(plain_q, plain_s) - w).abs().le(plain_s / 2 + 1e-6).all()
    rot_q, rot_s = quant_int8.quantize_int8(w, per_row=True, group=64)
    plain_err = (quant_int8.dequantize_int8(plain_q, plain_s) - w)[0].norm()
    rot_err = (quant_int8.dequantize_int8(rot_q, rot_s, 64) - w)[0].norm()
    assert rot_err < plain_err  # the point of the rotation


def test_int8_matrix_product_matches_the_dequantized_linear_within_activation_rounding():
    gen = torch.Generator().manual_seed(2)
    w, x, bias = torch.randn(24, 64, generator=gen), torch.randn(2, 5, 64, generator=gen), torch.randn(24, generator=gen)
    q, s = quant_int8.quantize_int8(w, per_row=True, group=16)
    exact = torch.nn.functional.linear(x, quant_int8.dequantize_int8(q, s, 16), bias)
    w8a8 = quant_int8.int8_linear(x, q, s, bias, 16)
    assert w8a8.shape == exact.shape and 0 < (w8a8 - exact).abs().max() < 0.02 * exact.abs().max()


def test_swizzled_block_scales_follow_cublas_tile_layout():
    # Row r, column c of a [rows, cols] scale matrix sits at (r % 32) * 16 + (r // 32 % 4) * 4 + c in its
    # 128 x 4 tile (cuBLAS's 1D block scaling factors layout); tiles follow in row-major order.
    rows, cols = 130, 5
    scales = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    stored = quant_blocks.swizzle(scales)
    assert stored.shape == (256, 8)
    flat = stored.reshape(-1)
    for r, c in [(0, 0), (1, 0), (33, 2), (127, 3), (128, 4), (129, 0)]:
        rb, cb, n_cb = r // 128, c // 4, 2
        index = (rb * n_cb + cb) * 512 + (r % 32) * 16 + (r // 32 % 4) * 4 + c % 4
        assert flat[index] == scales[r, c]
    assert torch.equal(quant_blocks.unswizzle(stored, rows, cols), scales)
    assert torch.equal(quant_blocks.unswizzle(stored.reshape(-1), rows, cols), scales)  # stored flat
    with pytest.raises(ValueError):
        quant_blocks.unswizzle(stored[:100], rows, cols)


def test_nvfp4_codes_nibbles_and_scales_decode_by_hand():
    # Row r of a 16 x 16 weight: byte 0x1F = codes (1, 15) = (0.5, -6) times block scale (r + 1) times 0.25.
    packed = torch.full((16, 8), 0x1F, dtype=torch.uint8)
    block = torch.zeros(128 * 4, dtype=torch.float32)
    for r in range(16):
        block[r * 16] = r + 1.0  # one block per row: column 0 of the tile
    w = quant_fp4.dequantize_nvfp4(packed, block.to(torch.float8_e4m3fn).reshape(128, 4), torch.tensor(0.25), (16, 16))
    expected_row = torch.tensor([0.5, -6.0] * 8)
    for r in range(16):
        assert torch.equal(w[r], expected_row * (r + 1) * 0.25)
    # Padding: a 10 x 20 weight is stored 16 x 32 (x2 packed) and sliced back.
    packed = torch.zeros(16, 16, dtype=torch.uint8)
    assert quant_fp4.dequantize_nvfp4(packed, torch.zeros(128, 4, dtype=torch.float8_e4m3fn), torch.tensor(1.0),
                                      (10, 20)).shape == (10, 20)


def test_e2m1_rounding_is_to_nearest_with_ties_to_the_even_code():
    values = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.3, 5.1, -6.0, -0.6])
    codes = quant_fp4.round_e2m1(values)
    assert codes.tolist() == [0, 2, 2, 4, 4, 6, 6, 1, 7, 15, 9]


def test_nvfp4_quantization_recipe_and_error():
    w = torch.randn(20, 48, generator=torch.Generator().manual_seed(3))
    packed, blocks, tensor_scale = quant_fp4.quantize_nvfp4(w)
    assert packed.dtype == torch.uint8 and packed.shape == (32, 24) and blocks.dtype == torch.float8_e4m3fn
    assert torch.isclose(tensor_scale, w.abs().max() / (448 * 6))
    back = quant_fp4.dequantize_nvfp4(packed, blocks, tensor_scale, (20, 48))
    block_max = w.reshape(20, 3, 16).abs().amax(-1, keepdim=True)
    # E2M1 spacing is at most 2 (between 4 and 6) on a 0..6 grid, times the block scale (block max / 6),
    # plus the block scale's own fp8 rounding.
    assert ((back - w).reshape(20, 3, 16).abs() <= block_max / 6 * 1.0 * 1.07 + 1e-6).all()


def test_mxfp8_e8m0_scales_and_blocks_decode_by_hand():
    codes = torch.tensor([127, 128, 120, 0], dtype=torch.uint8)
    assert quant_fp8.e8m0_values(codes).tolist() == [1.0, 2.0, 2.0 ** -7, 2.0 ** -127]
    assert torch.equal(quant_fp8.e8m0_values(codes.view(torch.float8_e8m0fnu)), quant_fp8.e8m0_values(codes))
    q = torch.full((32, 64), 1.5).to(torch.float8_e4m3fn)
    scale_codes = torch.zeros(32, 2, dtype=torch.uint8)
    scale_codes[:, 0], scale_codes[:, 1] = 127 + 1, 127 - 2  # block 0 times 2, block 1 times 1/4
    w = quant_fp8.dequantize_mxfp8(q, quant_blocks.swizzle(scale_codes), (32, 64))
    assert torch.equal(w[:, :32], torch.full((32, 32), 3.0)) and torch.equal(w[:, 32:], torch.full((32, 32), 0.375))


def test_mxfp8_block_scale_is_the_smallest_power_of_two_that_fits():
    w = torch.zeros(32, 32)
    w[0, 0], w[1, 0] = 1536.0, 1.0  # 1536 needs 4 (1536 / 2 > 448); 1 needs 2**-8 (448 * 2**-9 < 1)
    q, scales = quant_fp8.quantize_mxfp8(w)
    codes = quant_blocks.unswizzle(scales.view(torch.uint8), 32, 1)
    assert codes[0, 0] == 127 + 2 and codes[1, 0] == 127 - 8 and codes[2, 0] == 0  # an all-zero block: code 0
    assert torch.equal(quant_fp8.dequantize_mxfp8(q, scales, (32, 32)), w)


def test_per_tensor_fp8_is_comfyuis_recalculated_scale():
    w = torch.randn(6, 10, generator=torch.Generator().manual_seed(4))
    for dtype, top in ((torch.float8_e4m3fn, 448.0), (torch.float8_e5m2, 57344.0)):
        q, scale = quant_fp8.quantize_fp8(w, dtype)
        assert q.dtype == dtype and torch.isclose(scale, w.abs().max() / top)
        assert torch.equal(quant_fp8.dequantize_fp8(q, scale), q.float() * scale)
    with pytest.raises(ValueError):
        quant_fp8.dequantize_fp8(q, torch.ones(6))


def _conf_bytes(conf) -> torch.Tensor:
    return torch.tensor(list(json.dumps(conf).encode()), dtype=torch.uint8)


class _Info:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def test_layer_descriptions_from_tensors_and_from_metadata():
    tensors = {"a.weight": torch.zeros(4, 4, dtype=torch.int8), "a.weight_scale": torch.ones(()),
               "a.comfy_quant": _conf_bytes({"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 4}),
               "b.weight": torch.zeros(4, 4, dtype=torch.float8_e4m3fn), "b.weight_scale": torch.ones(())}
    names = {"a.weight": _Info("I8"), "a.weight_scale": _Info("F32"), "a.comfy_quant": _Info("U8"),
             "b.weight": _Info("F8_E4M3"), "b.weight_scale": _Info("F32")}
    metadata = {METADATA_KEY: json.dumps({"layers": {"stored.b": {"format": "float8_e4m3fn"}}})}
    layers = quantized_layers(names, metadata, tensors.__getitem__, lambda s: s.replace("stored.", ""))
    assert sorted(layers) == ["a", "b"] and int8_group(layers["a"].conf) == 4
    assert layers["b"].format is FORMATS["float8_e4m3fn"]
    # ComfyUI also reads the ConvRot options under "params".
    assert int8_group({"format": "int8_tensorwise", "params": {"convrot": True}}) == 256
    names["b.weight"] = _Info("I8")
    with pytest.raises(QuantFormatError, match="stored as I8"):
        quantized_layers(names, metadata, tensors.__getitem__, lambda s: s.replace("stored.", ""))


@pytest.mark.parametrize("raw, message", [
    ({"format": "int4_magic"}, "unknown quantisation format"),
    ({"format": "convrot_w4a4"}, "not supported here"),
    ({"nothing": 1}, "unknown quantisation format"),
    ({"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 32}, "power of 4"),
    ("[1, 2]", "JSON object"),
    (torch.tensor([0xFF, 0xFE], dtype=torch.uint8), "not a JSON"),
])
def test_bad_layer_descriptions_are_typed_errors(raw, message):
    with pytest.raises((QuantFormatError, quant_int8.ConvRotError), match=message):
        parse_conf(raw, "layer.comfy_quant")
