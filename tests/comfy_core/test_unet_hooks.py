"""The UNet calls ComfyUI's hook points where `openaimodel.UNetModel` calls them: the option
values it sets (`original_shape`, `transformer_index`, `block`, `block_index`), `emb_patch`,
`forward_timestep_embed_patch`, and ControlNet residuals (`apply_control`)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.models.unet import UNetConfig, UNetModel, apply_control
from comfy_core.models.unet_blocks import Downsample
from tests.fixtures.checkpoints import tiny_state_dict

PREFIX = "model.diffusion_model."


@pytest.fixture(scope="module")
def unet() -> UNetModel:
    """The tiny SD1 UNet, built once: the tests only call it (hooks come in transformer_options)."""
    state = tiny_state_dict("sd1", seed=5)
    config = dataclasses.replace(UNetConfig.detect_from_weights(state, PREFIX), num_heads=8, num_head_channels=-1)
    with torch.device("meta"):
        model = UNetModel(config)
    model.load_state_dict({k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)},
                          strict=True, assign=True)
    return model.eval()


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(1, 4, 8, 8, generator=gen), torch.tensor([500.0]), torch.randn(1, 3, 64, generator=gen)


def test_options_name_each_transformer_as_comfyui_does(unet: UNetModel) -> None:
    x, t, ctx = _inputs()
    seen: list[tuple] = []

    def record(n, context, value, extra):  # noqa: ANN001, ANN202
        seen.append((extra["block"], extra["block_index"], extra["transformer_index"],
                     tuple(extra["original_shape"]), tuple(extra["activations_shape"])[1:]))
        return n, context, value

    with torch.no_grad():
        unet(x, t, ctx, transformer_options={"patches": {"attn1_patch": [record]}})
    # The running transformer count goes up by one per SpatialTransformer across the whole UNet;
    # original_shape is the UNet input's shape everywhere.
    assert [s[2] for s in seen] == list(range(len(seen)))
    assert all(s[3] == (1, 4, 8, 8) for s in seen)
    assert all(s[1] == 0 for s in seen)  # the tiny UNet has depth-1 transformers
    assert seen[0][0] == ("input", 1)
    assert ("middle", 0) in [s[0] for s in seen]


def test_emb_patch_sees_the_time_embedding_and_can_change_it(unet: UNetModel) -> None:
    x, t, ctx = _inputs()
    widths: list[int] = []

    def emb_patch(emb, model_channels, options):  # noqa: ANN001, ANN202
        widths.append(model_channels)
        return emb * 0

    with torch.no_grad():
        plain = unet(x, t, ctx)
        patched = unet(x, t, ctx, transformer_options={"patches": {"emb_patch": [emb_patch]}})
        zero_t = unet(x, t, ctx, transformer_options={"patches": {"emb_patch": [lambda e, c, o: e]}})
    assert widths == [unet.config.model_channels]
    torch.testing.assert_close(zero_t, plain)
    assert not torch.allclose(patched, plain, atol=1e-4)


def test_forward_timestep_embed_patch_replaces_matching_layers(unet: UNetModel) -> None:
    x, t, ctx = _inputs()
    calls: list[tuple] = []

    def handler(layer, h, emb, context, options, output_shape, time_context, frames, indicator):  # noqa: ANN001, ANN202
        calls.append(tuple(h.shape))
        return layer(h)

    with torch.no_grad():
        plain = unet(x, t, ctx)
        patched = unet(x, t, ctx, transformer_options={
            "patches": {"forward_timestep_embed_patch": [(Downsample, handler)]}})
    downsamples = sum(isinstance(m, Downsample) for m in unet.modules())
    assert len(calls) == downsamples
    torch.testing.assert_close(patched, plain)


def test_control_residuals_are_added_from_the_end_of_each_list(unet: UNetModel) -> None:
    x, t, ctx = _inputs()
    with torch.no_grad():
        plain = unet(x, t, ctx)
        # One residual per skip connection; only the middle one non-zero.
        shapes: list[tuple] = []
        unet(x, t, ctx, transformer_options={"patches": {
            "output_block_patch": [lambda h, s, o: (shapes.append(tuple(s.shape)), (h, s))[1]]}})
        outputs = [torch.zeros(s) for s in reversed(shapes)]
        middle = [torch.full(shapes[0][:1] + (unet.config.model_channels * unet.config.channel_mult[-1],)
                             + shapes[0][2:], 0.5)]
        zero_control = unet(x, t, ctx, control={"output": [o.clone() for o in outputs], "middle": [torch.zeros_like(middle[0])]})
        with_middle = unet(x, t, ctx, control={"output": [o.clone() for o in outputs], "middle": middle})
    torch.testing.assert_close(zero_control, plain)
    assert not torch.allclose(with_middle, plain, atol=1e-4)


def test_apply_control_pops_skips_none_and_survives_a_wrong_shape(caplog) -> None:  # noqa: ANN001
    h = torch.zeros(1, 2, 2, 2)
    control = {"output": [torch.ones(1, 2, 2, 2), None, torch.ones(1, 3, 2, 2)]}
    out = apply_control(h.clone(), control, "output")  # wrong shape: logged, unchanged
    assert torch.equal(out, h) and "could not be added" in caplog.text
    assert torch.equal(apply_control(h.clone(), control, "output"), h)  # None: unchanged
    assert torch.equal(apply_control(h.clone(), control, "output"), torch.ones(1, 2, 2, 2))
    assert control["output"] == []
    assert torch.equal(apply_control(h.clone(), control, "output"), h)
    assert torch.equal(apply_control(h.clone(), None, "input"), h)


def test_a_replaced_forward_reaches_the_network_through_comfyuis_private_forward(unet: UNetModel) -> None:
    """ComfyUI's `UNetModel._forward(x, timesteps, context, y, control, transformer_options)`: what
    a pack's `forward` replacement calls (ComfyUI-NAG's `NAGUNetModel`), positionally, in
    ComfyUI's order; the same result as the network's own `forward`, also while an instance's
    `forward` is replaced (no recursion)."""
    x, t, ctx = _inputs()
    seen: list[str] = []
    options = {"patches": {"output_block_patch": [lambda h, hsp, extra: (seen.append("patched") or h, hsp)]}}
    with torch.no_grad():
        plain = unet(x, t, ctx, transformer_options=options)
        count = len(seen)
        unet.forward = lambda *args, **kwargs: unet._forward(*args, **kwargs)  # a pack's per-instance swap
        try:
            swapped = unet(x, t, ctx, None, None, options)
        finally:
            del unet.forward
    assert torch.equal(swapped, plain) and len(seen) == 2 * count > 0  # the options reached the blocks
