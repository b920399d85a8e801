"""ScaleROPE (nodes/rope_nodes.py) and the option it sets, `transformer_options["rope_options"]`,
read by the Wan DiT's position ids (comfy_core/attention/rope.py `rope_axis_positions`): on a tiny
Wan network, scale 1 / shift 0 gives the unpatched output exactly, and a scaled / shifted RoPE gives
the output of the network run on position ids built here by hand (`shift + i * scale` per axis).
Its `/object_info` entry is checked against the record by tests/nodes/test_object_info_2026.py."""
from __future__ import annotations

import pytest
import torch

from comfy_core.attention.rope import ROPE_OPTIONS, rope_axis_positions
from comfy_core.families.wan.dit import WanConfig, WanModel
from nodes.errors import NodeInputError
from nodes.rope_nodes import scale_rope
from tests.fixtures.wan_files import tiny_wan_state_dict

IDENTITY = dict(scale_x=1.0, shift_x=0.0, scale_y=1.0, shift_y=0.0, scale_t=1.0, shift_t=0.0)


@pytest.fixture(scope="module")
def wan() -> WanModel:
    state = tiny_wan_state_dict("t2v", seed=3)
    model = WanModel.from_config(WanConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _inputs(wan: WanModel, frames: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(1, wan.config.in_dim, frames, 4, 6, generator=generator)  # grid 3 x 2 x 3 (patch 1x2x2)
    context = torch.randn(1, 8, wan.config.text_dim, generator=generator)
    return x, torch.tensor([600.0]), context


def _by_hand(wan: WanModel, x, t, context, grid: tuple[int, int, int], rope: dict) -> torch.Tensor:
    """The network run on ids `(shift_t + f scale_t, shift_y + r scale_y, shift_x + c scale_x)`."""
    frames, rows, cols = grid
    ids = torch.zeros(frames, rows, cols, 3)
    for f in range(frames):
        for r in range(rows):
            for c in range(cols):
                ids[f, r, c] = torch.tensor([rope["shift_t"] + f * rope["scale_t"], rope["shift_y"] + r * rope["scale_y"],
                                             rope["shift_x"] + c * rope["scale_x"]])
    freqs = wan.rope_embedder(ids.reshape(1, -1, 3)).movedim(1, 2)
    return wan.forward_orig(x, t, context, freqs=freqs, transformer_options={})


def test_identity_options_give_the_unpatched_output_exactly(wan):
    x, t, context = _inputs(wan)
    with torch.no_grad():
        plain = wan(x, t, context)
        same = wan(x, t, context, transformer_options={ROPE_OPTIONS: dict(IDENTITY)})
    assert torch.equal(plain, same)


@pytest.mark.parametrize("rope", [
    dict(IDENTITY, scale_t=7.0),  # ChronoEdit's template
    dict(scale_x=0.5, shift_x=3.0, scale_y=2.0, shift_y=-1.5, scale_t=1.5, shift_t=4.0),
])
def test_scaled_rope_equals_positions_scaled_by_hand(wan, rope):
    x, t, context = _inputs(wan)
    with torch.no_grad():
        got = wan(x, t, context, transformer_options={ROPE_OPTIONS: rope})
        want = _by_hand(wan, x, t, context, (3, 2, 3), rope)
        plain = wan(x, t, context)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-3)


def test_axis_positions_follow_comfyui_rule():
    """`(n - 1) * scale + 1` positions spread over `steps` tokens, moved by shift (a grid drawn on fewer
    tokens than its span, as Wan S2V's motion frames, keeps the scaled span)."""
    options = {"scale_y": 3.0, "shift_y": 2.0}
    assert rope_axis_positions(4, "y", options).tolist() == [2.0, 5.0, 8.0, 11.0]
    assert rope_axis_positions(5, "y", options, steps=3).tolist() == [2.0, 8.0, 14.0]
    assert rope_axis_positions(3, "t", options, start=-1).tolist() == [-1.0, 0.0, 1.0]  # other axes untouched
    assert rope_axis_positions(3, "x", None, start=2).tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="axis"):
        rope_axis_positions(3, "z", options)


class _Patcher:
    """The two things ScaleROPE uses of a MODEL: `clone()` and `model_options`."""

    def __init__(self, model_options: dict) -> None:
        self.model, self.model_options = object(), model_options

    def clone(self) -> "_Patcher":
        return _Patcher({**self.model_options})


def test_the_node_sets_rope_options_on_a_clone_and_keeps_other_options():
    other = {"ar_config": {"x": 1}, ROPE_OPTIONS: {"pack_key": 2, "scale_x": 9.0}}
    model = _Patcher({"transformer_options": other})
    (patched,) = scale_rope(model, 1.0, 0.5, 2.0, 0.0, 7, -3.0)
    assert patched is not model and model.model_options["transformer_options"] is other
    assert other[ROPE_OPTIONS] == {"pack_key": 2, "scale_x": 9.0}  # the input's options are not changed
    options = patched.model_options["transformer_options"]
    assert options["ar_config"] == {"x": 1}
    assert options[ROPE_OPTIONS] == {"pack_key": 2, "scale_x": 1.0, "shift_x": 0.5, "scale_y": 2.0, "shift_y": 0.0,
                                     "scale_t": 7, "shift_t": -3.0}
    with pytest.raises(NodeInputError, match="shift_t"):
        scale_rope(model, 1.0, 0.0, 1.0, 0.0, 1.0, float("nan"))


def test_scale_rope_reaches_the_wan_network_through_ksampler(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.sampling import ksampler
    from tests.fixtures.wan_files import write_tiny_wan

    model = load_diffusion_model(write_tiny_wan(tmp_path / "t2v.safetensors", "t2v"))
    generator = torch.Generator().manual_seed(4)
    positive = [[torch.randn(1, 8, model.model.diffusion_model.config.text_dim, generator=generator), {}]]
    negative = [[torch.zeros_like(positive[0][0]), {}]]
    latent = {"samples": torch.zeros(1, 16, 2, 4, 6)}

    def sample(m):
        return ksampler(m, 3, 2, 4.0, "euler", "simple", positive, negative, latent)[0]["samples"]

    plain = sample(model)
    assert torch.equal(sample(scale_rope(model, **IDENTITY)[0]), plain)
    stretched = sample(scale_rope(model, **dict(IDENTITY, scale_t=7.0))[0])
    assert not torch.allclose(stretched, plain, atol=1e-4)
    assert ROPE_OPTIONS not in model.model_options.get("transformer_options", {})


# -- Flux.1 and Flux.2 (ComfyUI's Flux `process_img`: rows, columns and the index of the image) -------------

def _flux():
    from comfy_core.families.flux.dit import FluxConfig, FluxTransformer
    from tests.fixtures.flux_files import tiny_flux_state_dict

    state = tiny_flux_state_dict(True, seed=5, depth=1, depth_single=1)
    network = FluxTransformer.from_config(FluxConfig.detect_from_weights(state))
    network.load_state_dict(state, strict=True)
    gen = torch.Generator().manual_seed(0)
    inputs = dict(x=torch.randn(1, 16, 8, 6, generator=gen), timestep=torch.tensor([0.6]),
                  context=torch.randn(1, 4, 32, generator=gen), y=torch.randn(1, 24, generator=gen),
                  guidance=torch.tensor([3.0]))
    return network.eval(), inputs, (4, 3)


def _flux2():
    from comfy_core.families.flux2.dit import Flux2Config, Flux2Transformer
    from tests.fixtures.flux2_files import CONTEXT, tiny_flux2_state_dict

    state = tiny_flux2_state_dict(seed=1, guidance=True)
    network = Flux2Transformer.from_config(Flux2Config.detect_from_weights(state))
    network.load_state_dict(state, strict=True)
    gen = torch.Generator().manual_seed(0)
    inputs = dict(x=torch.randn(1, network.config.in_channels, 3, 5, generator=gen), timestep=torch.tensor([0.6]),
                  context=torch.randn(1, 4, CONTEXT, generator=gen), guidance=torch.tensor([3.0]))
    return network.eval(), inputs, (3, 5)


def _ids_and_output(network, inputs, rope: dict | None):
    seen = {}

    def post_input(args):
        seen.update(args)
        return args

    options = {"patches": {"post_input": [post_input]}}
    if rope is not None:
        options[ROPE_OPTIONS] = rope
    with torch.no_grad():
        out = network(**inputs, transformer_options=options)
    return seen["img_ids"][0], out


@pytest.mark.parametrize("build", [_flux, _flux2], ids=["flux", "flux2"])
def test_flux_image_ids_follow_scale_rope(build):
    network, inputs, (rows, cols) = build()
    plain_ids, plain = _ids_and_output(network, inputs, None)
    same_ids, same = _ids_and_output(network, inputs, dict(IDENTITY))
    assert torch.equal(same_ids, plain_ids) and torch.equal(same, plain)
    rope = dict(scale_x=0.5, shift_x=3.0, scale_y=2.0, shift_y=-1.5, scale_t=9.0, shift_t=4.0)
    ids, out = _ids_and_output(network, inputs, rope)
    # index shift_t (scale_t has nothing to stretch: one index), row shift_y + r scale_y, column shift_x + c scale_x
    want = torch.tensor([[4.0, -1.5 + r * 2.0, 3.0 + c * 0.5] for r in range(rows) for c in range(cols)])
    torch.testing.assert_close(ids[:, :3].float(), want, atol=1e-5, rtol=0)
    assert not torch.allclose(out, plain, atol=1e-4)
