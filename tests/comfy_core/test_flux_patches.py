"""ComfyUI's patch points in the Flux transformer: `patches_replace["dit"]` block replacements
(with `original_block`), the block indices in `transformer_options`, ControlNet residuals,
`post_input` patches, Kontext's reference-latent ids per `ref_latents_method`, and attention
through the per-call override."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.flux.dit import FluxConfig, FluxTransformer as Flux
from tests.fixtures.flux_files import tiny_flux_state_dict


@pytest.fixture(scope="module")
def model() -> Flux:
    state = tiny_flux_state_dict(True, seed=5, depth=2, depth_single=2)
    with torch.device("meta"):
        flux = Flux.from_config(FluxConfig.detect_from_weights(state))
    flux.load_state_dict(state, strict=True, assign=True)
    return flux.eval()


def _inputs() -> dict:
    gen = torch.Generator().manual_seed(0)
    return dict(x=torch.randn(1, 16, 8, 6, generator=gen), timestep=torch.tensor([0.6]),
                context=torch.randn(1, 4, 32, generator=gen), y=torch.randn(1, 24, generator=gen),
                guidance=torch.tensor([3.0]))


def _run(model: Flux, options: dict | None = None, **extra) -> torch.Tensor:
    with torch.no_grad():
        return model(**_inputs(), transformer_options={} if options is None else options, **extra)


@pytest.mark.parametrize("kind, index", [("double_block", 1), ("single_block", 0)])
def test_replacement_calling_the_original_block_is_bit_exact(model, kind, index):
    seen = []

    def replace(args, extra):
        seen.append((sorted(args), args["transformer_options"]["block_type"], args["transformer_options"]["block_index"],
                     args["transformer_options"]["total_blocks"]))
        return extra["original_block"](args)

    plain = _run(model)
    patched = _run(model, {"patches_replace": {"dit": {(kind, index): replace}}})
    assert torch.equal(plain, patched)
    keys = ["attn_mask", "img", "pe", "transformer_options", "vec"] + (["txt"] if kind == "double_block" else [])
    assert seen == [(sorted(keys), kind.split("_")[0], index, 2)]


@pytest.mark.parametrize("kind", ["double_block", "single_block"])
def test_replacement_that_skips_a_block_changes_the_output(model, kind):
    def skip(args, extra):
        return {k: args[k] for k in ("img", "txt") if k in args}

    plain = _run(model)
    patched = _run(model, {"patches_replace": {"dit": {(kind, 0): skip}}})
    assert (plain - patched).abs().max() > 1e-3


def test_caller_options_are_not_written_into(model):
    options = {"patches_replace": {"dit": {}}}
    _run(model, options)
    assert options == {"patches_replace": {"dit": {}}}


def test_control_residuals_are_added_after_their_blocks(model):
    """control["input"][i] after double block i equals a replacement adding it there; likewise
    control["output"][i] on the image part after single block i."""
    gen = torch.Generator().manual_seed(3)
    add_in = torch.randn(1, 12, 64, generator=gen)
    add_out = torch.randn(1, 12, 64, generator=gen)

    def after_double(args, extra):
        out = extra["original_block"](args)
        return {"img": out["img"] + add_in, "txt": out["txt"]}

    def after_single(args, extra):
        img = extra["original_block"](args)["img"].clone()
        img[:, 4:] += add_out  # after the 4 text tokens
        return {"img": img}

    controlled = _run(model, control={"input": [None, add_in], "output": [add_out]})
    replaced = _run(model, {"patches_replace": {"dit": {("double_block", 1): after_double,
                                                        ("single_block", 0): after_single}}})
    assert (controlled - _run(model)).abs().max() > 1e-3
    assert (controlled - replaced).abs().max() < 1e-5


def _ids_seen(model: Flux, **extra) -> torch.Tensor:
    seen = {}

    def post_input(args):
        seen.update(args)
        return args

    _run(model, {"patches": {"post_input": [post_input]}}, **extra)
    assert torch.equal(seen["txt_ids"], torch.zeros(1, 4, 3))
    return seen["img_ids"][0]


def _grid(index: float, rows: range, cols: range) -> torch.Tensor:
    return torch.tensor([[index, r, c] for r in rows for c in cols], dtype=torch.float32)


def test_image_ids_are_index_row_col(model):
    assert torch.equal(_ids_seen(model), _grid(0, range(4), range(3)))


def test_reference_latent_ids_per_method(model):
    """ComfyUI's rules for two references (latents 4x8 and 6x2, image 8x6), in patches."""
    gen = torch.Generator().manual_seed(4)
    refs = [torch.randn(1, 16, 4, 8, generator=gen), torch.randn(1, 16, 6, 2, generator=gen)]
    image = _grid(0, range(4), range(3))
    expected = {
        # index 1; the second goes below the first (h offset 4 px = 2 patches), since 6+4 > 2+8 fails.
        "offset": [_grid(1, range(2), range(4)), _grid(1, range(2, 5), range(1))],
        "index": [_grid(1, range(2), range(4)), _grid(2, range(3), range(1))],
        # index 0, past the image on both axes, then past the first reference too.
        "uxo": [_grid(0, range(4, 6), range(3, 7)), _grid(0, range(6, 9), range(7, 8))],
    }
    for method, parts in expected.items():
        ids = _ids_seen(model, ref_latents=refs, ref_latents_method=method)
        assert torch.equal(ids, torch.cat([image] + parts)), method
    assert torch.equal(_ids_seen(model, ref_latents=refs), torch.cat([image] + expected["offset"]))
    with pytest.raises(ValueError, match="ref_latents_method"):
        _run(model, ref_latents=refs, ref_latents_method="sideways")


def test_attention_goes_through_the_per_call_override(model):
    calls = []

    def override(func, *args, **kwargs):
        calls.append(args[0].shape)
        return func(*args, **kwargs)

    plain = _run(model)
    overridden = _run(model, {"optimized_attention_override": override})
    assert torch.equal(plain, overridden)
    assert len(calls) == 4  # 2 double + 2 single blocks, [B, H, Nt+Ni, d] each
    assert all(shape == (1, 2, 16, 32) for shape in calls)


def test_attention_mask_reaches_the_attention(model):
    mask = torch.zeros(1, 1, 16, 16)
    mask[..., 0] = float("-inf")  # no token may attend to the first text token
    assert (_run(model, attention_mask=mask) - _run(model)).abs().max() > 1e-4
