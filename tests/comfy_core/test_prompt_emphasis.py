"""Emphasis modes checked against a direct computation (reference section 3.6)."""
import pytest
import torch

from comfy_core.prompt.emphasis import apply_emphasis, parses_brackets


def sample():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 77, 16, generator=g) + 0.3
    m = torch.ones(2, 77)
    m[0, 3:6] = 1.5
    m[1, 10] = 0.5
    return z, m


def test_original_restores_the_mean_over_the_whole_batch():
    z, m = sample()
    out = apply_emphasis(z, m, "Original")
    # direct computation, element by element
    expected = torch.empty_like(z)
    for b in range(2):
        for t in range(77):
            expected[b, t] = z[b, t] * m[b, t]
    expected *= z.sum() / z.numel() / (expected.sum() / expected.numel())
    assert torch.allclose(out, expected, atol=1e-6)
    assert out.mean().item() == pytest.approx(z.mean().item(), abs=1e-6)


def test_original_rescales_an_unweighted_row_of_the_same_batch():
    z, m = sample()
    m[1] = 1.0
    out = apply_emphasis(z, m, "Original")
    assert not torch.allclose(out[1], z[1])  # the mean is shared with row 0


def test_no_norm_is_plain_product():
    z, m = sample()
    assert torch.equal(apply_emphasis(z, m, "No norm"), z * m[..., None])


@pytest.mark.parametrize("mode", ["Ignore", "None"])
def test_ignore_and_none_leave_z(mode):
    z, m = sample()
    assert torch.equal(apply_emphasis(z, m, mode), z)


def test_only_none_skips_bracket_parsing():
    assert parses_brackets("Original") and parses_brackets("No norm") and parses_brackets("Ignore")
    assert not parses_brackets("None")


def test_unknown_mode_and_shape_mismatch_raise():
    z, m = sample()
    with pytest.raises(ValueError, match="emphasis mode"):
        apply_emphasis(z, m, "original")
    with pytest.raises(ValueError, match="do not match"):
        apply_emphasis(z, m[:, :10], "Original")


def test_original_counts_a_repeated_row_as_often_as_it_occurs():
    """A row standing for 3 rows of webui's batch weighs 3 times in both means."""
    z, m = sample()
    out = apply_emphasis(z, m, "Original", repeats=torch.tensor([3.0, 1.0]))
    full_z = torch.cat([z[0:1], z[0:1], z[0:1], z[1:2]])  # the batch webui encodes
    full_m = torch.cat([m[0:1], m[0:1], m[0:1], m[1:2]])
    full = apply_emphasis(full_z, full_m, "Original")
    assert torch.allclose(out[0], full[0], atol=1e-6) and torch.allclose(out[1], full[3], atol=1e-6)
    assert not torch.allclose(out, apply_emphasis(z, m, "Original"), atol=1e-4)


def test_repeats_change_nothing_without_normalisation():
    z, m = sample()
    assert torch.equal(apply_emphasis(z, m, "No norm", repeats=torch.tensor([3.0, 1.0])), z * m[..., None])
