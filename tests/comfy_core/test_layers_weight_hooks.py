"""The layers our models are built from answer ComfyUI's per-layer weight contract
(comfy_core/models/layers.py, after comfy/ops.py's `CastWeightBiasOp`): `comfy_cast_weights`,
`weight_function` / `bias_function` and `forward_comfy_cast_weights`. Without hooks a layer
computes exactly what torch's does; with them the hooks see a copy of the weight in the input's
dtype, and the stored tensors never change."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models import layers
from comfy_core.models.storage_cast import CastLinear, cast_weights_at_run_time
from comfy_core.models.unet_blocks import Downsample, TorchOperations

GEN = torch.Generator().manual_seed(0)

CASES = {
    "Linear": (lambda: (nn.Linear(6, 5), layers.Linear(6, 5)), (2, 6)),
    "Conv1d": (lambda: (nn.Conv1d(3, 4, 3, padding=1), layers.Conv1d(3, 4, 3, padding=1)), (2, 3, 7)),
    "Conv2d": (lambda: (nn.Conv2d(3, 4, 3, padding=1), layers.Conv2d(3, 4, 3, padding=1)), (2, 3, 6, 6)),
    "Conv3d": (lambda: (nn.Conv3d(2, 3, 3, padding=1), layers.Conv3d(2, 3, 3, padding=1)), (1, 2, 4, 5, 5)),
    "ConvTranspose1d": (lambda: (nn.ConvTranspose1d(3, 2, 4, stride=2), layers.ConvTranspose1d(3, 2, 4, stride=2)),
                        (2, 3, 5)),
    "ConvTranspose2d": (lambda: (nn.ConvTranspose2d(3, 2, 4, stride=2, padding=1),
                                 layers.ConvTranspose2d(3, 2, 4, stride=2, padding=1)), (2, 3, 5, 5)),
    "GroupNorm": (lambda: (nn.GroupNorm(2, 4), layers.GroupNorm(2, 4)), (2, 4, 3, 3)),
    "LayerNorm": (lambda: (nn.LayerNorm(6), layers.LayerNorm(6)), (2, 3, 6)),
}


def _pair(name: str):
    make, shape = CASES[name]
    plain, hooked = make()
    with torch.no_grad():
        for p in plain.parameters():
            p.copy_(torch.randn(p.shape, generator=GEN))
    hooked.load_state_dict(plain.state_dict())
    return plain, hooked, torch.randn(shape, generator=GEN)


def test_models_are_built_from_the_hooked_layers_with_comfyuis_attributes():
    for name in ("Linear", "Conv1d", "Conv2d", "Conv3d", "GroupNorm", "LayerNorm", "ConvTranspose1d",
                 "ConvTranspose2d", "Embedding"):
        cls = getattr(TorchOperations, name)
        assert issubclass(cls, layers.WeightHooks) and issubclass(cls, getattr(nn, name))
    # a UNet block's layer, as jankhidiffusion's RAUNet reads it off the model
    op = Downsample(4, True, dims=2, out_channels=4).op
    assert (op.comfy_cast_weights, op.weight_function, op.bias_function) == (False, [], [])
    assert callable(op.forward_comfy_cast_weights)
    # each layer has its own lists: appending to one never reaches another
    a, b = layers.Linear(2, 2), layers.Linear(2, 2)
    a.weight_function.append(lambda w: w)
    assert b.weight_function == [] and layers.Linear.weight_function == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_without_hooks_a_layer_is_torchs_and_hooks_see_a_copy_of_its_weight(name):
    plain, hooked, x = _pair(name)
    assert torch.equal(hooked(x), plain(x))
    stored = {k: v.clone() for k, v in hooked.state_dict().items()}

    hooked.weight_function = [lambda w: w * 2, lambda w: w - 0.5]
    hooked.bias_function = [lambda b: b + 1]
    with torch.no_grad():
        for k in ("weight", "bias"):
            getattr(plain, k).copy_(stored[k] * 2 - 0.5 if k == "weight" else stored[k] + 1)
    torch.testing.assert_close(hooked(x), plain(x))
    assert all(torch.equal(v, stored[k]) for k, v in hooked.state_dict().items())  # hooks got copies


def test_comfy_cast_weights_computes_in_the_inputs_dtype():
    plain, hooked, x = _pair("Linear")
    hooked.half()
    hooked.comfy_cast_weights = True
    out = hooked(x)
    assert out.dtype == torch.float32 and hooked.weight.dtype == torch.float16
    torch.testing.assert_close(out, F.linear(x, hooked.weight.float(), hooked.bias.float()))


def test_embedding_hooks_and_transposed_output_size():
    table = layers.Embedding(10, 4)
    ids = torch.tensor([[1, 3, 3]])
    plain = F.embedding(ids, table.weight)
    table.weight_function.append(lambda w: -w)
    assert torch.equal(table(ids), -plain)
    up_plain, up, x = _pair("ConvTranspose2d")
    up.weight_function.append(lambda w: w)
    assert torch.equal(up(x, output_size=[11, 11]), up_plain(x, output_size=[11, 11]))


def test_run_time_casting_layers_take_the_hooks_too():
    stored_fp16 = nn.Sequential(nn.Linear(6, 5), layers.Linear(5, 4)).half()
    assert cast_weights_at_run_time(stored_fp16) == 2
    first, second = stored_fp16
    assert isinstance(first, CastLinear) and isinstance(second, CastLinear) and first.comfy_cast_weights
    assert first.weight_function is not second.weight_function  # a plain torch layer got its own lists
    x = torch.randn(2, 6, generator=GEN)
    expected = F.linear(F.linear(x, first.weight.float() * 0, first.bias.float()), second.weight.float(),
                        second.bias.float())
    first.weight_function.append(lambda w: w * 0)
    out = stored_fp16(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)
