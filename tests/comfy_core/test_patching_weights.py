"""Weight patch arithmetic: every patch data form, offsets, functions, strengths, typed errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.patching import Offset, PatchDataError, PatchEntry, calculate_weight

W = torch.arange(12, dtype=torch.float32).reshape(3, 4)
D = torch.full((3, 4), 0.5)


@pytest.mark.parametrize("data", [D, (D,), ("diff", (D,))])
def test_diff_forms(data):
    out = calculate_weight(W, [PatchEntry(2.0, data)], "k")
    torch.testing.assert_close(out, W + 2.0 * D)
    assert torch.equal(W, torch.arange(12, dtype=torch.float32).reshape(3, 4))  # input untouched


def test_set_ignores_strength():
    out = calculate_weight(W, [PatchEntry(0.1, ("set", (D,)))], "k")
    torch.testing.assert_close(out, D)


def test_strength_model_scales_before_the_patch():
    out = calculate_weight(W, [PatchEntry(1.0, D, 0.5)], "k")
    torch.testing.assert_close(out, 0.5 * W + D)


def test_entries_apply_in_order():
    out = calculate_weight(W, [PatchEntry(1.0, D), PatchEntry(1.0, ("set", (D,))), PatchEntry(3.0, D)], "k")
    torch.testing.assert_close(out, D + 3.0 * D)


def test_offset_patches_only_a_slice():
    part = torch.ones(1, 4)
    out = calculate_weight(W, [PatchEntry(1.0, part, 1.0, Offset(0, 1, 1))], "k")
    expected = W.clone()
    expected[1] += 1.0
    torch.testing.assert_close(out, expected)


def test_function_applies_to_the_scaled_delta():
    out = calculate_weight(W, [PatchEntry(2.0, D, 1.0, None, torch.square)], "k")
    torch.testing.assert_close(out, W + (2.0 * D) ** 2)


def test_nested_list_is_a_patched_weight_added_as_diff():
    other = torch.ones(3, 4)
    nested = [(other,), PatchEntry(1.0, D)]
    out = calculate_weight(W, [PatchEntry(0.25, nested, 0.75)], "k")
    torch.testing.assert_close(out, 0.75 * W + 0.25 * (other + D))


def test_result_keeps_dtype_and_computes_in_fp32():
    w16 = W.to(torch.float16)
    out = calculate_weight(w16, [PatchEntry(1.0, D.to(torch.float16))], "k")
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, (W + D).to(torch.float16))


@pytest.mark.parametrize("data,match", [
    (torch.ones(4, 3), "does not fit"),
    ("nonsense", "unsupported patch data"),
    (("mul", (D,)), "unknown patch kind"),
    (("diff", D), "1-tuple"),
    ([D], "nested patch list"),
])
def test_bad_patch_data_is_a_typed_error_naming_the_key(data, match):
    with pytest.raises(PatchDataError, match=match) as info:
        calculate_weight(W, [PatchEntry(1.0, data)], "unet.some.weight")
    assert "unet.some.weight" in str(info.value)


def test_comfyui_legacy_lora_tuples():
    g = torch.Generator().manual_seed(0)
    up, down = torch.randn(3, 2, generator=g), torch.randn(2, 4, generator=g)
    out = calculate_weight(W, [PatchEntry(0.5, ("lora", (up, down, torch.tensor(1.0), None, None, None)))], "k")
    torch.testing.assert_close(out, W + 0.5 * (1.0 / 2) * (up @ down))
    a1, b1, a2, b2 = (torch.randn(*s, generator=g) for s in ((3, 2), (2, 4), (3, 2), (2, 4)))
    out = calculate_weight(W, [PatchEntry(1.0, ("loha", (a1, b1, 2.0, a2, b2, None, None, None)))], "k")
    torch.testing.assert_close(out, W + (a1 @ b1) * (a2 @ b2))
    with pytest.raises(PatchDataError, match="DoRA"):
        calculate_weight(W, [PatchEntry(1.0, ("loha", (a1, b1, 2.0, a2, b2, None, None, torch.ones(1))))], "k")


def test_a_zero_strength_diff_is_not_read_so_none_scales_by_strength_model():
    """ComfyUI's attention-multiply form: add_patches({key: (None,)}, 0.0, m) scales the weight by m."""
    out = calculate_weight(W, [PatchEntry(0.0, (None,), 1.5)], "k")
    torch.testing.assert_close(out, W * 1.5)
    with pytest.raises(PatchDataError):
        calculate_weight(W, [PatchEntry(1.0, (None,))], "k")
