"""Hypernetworks (A1111 layout) on attention keys and values, attention multipliers as weight
patches, and the compute-dtype wrapper."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from comfy_core.model_patches.attention_multiply import (CLIP_PROJECTIONS, UNET_PROJECTIONS, NoDelta,
                                                         projection_factors, temporal_factors)
from comfy_core.model_patches.compute_dtype import ComputeDtype, call_in_dtype
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.hypernetwork import hypernetwork_from_state
from comfy_core.patching.patcher import Patcher
from tests.fixtures.hypernetworks import hypernetwork_state


def _reference(state: dict, activation: nn.Module | None, layer_norm: bool, activate_output: bool) -> nn.Sequential:
    """A1111's module rebuilt with torch layers from the layout rules."""
    names = sorted({k.rsplit(".", 1)[0] for k in state}, key=lambda s: int(s.split(".")[1]))
    layers, i, linear_count = [], 0, 0
    n_linear = len(names) // (2 if layer_norm else 1)
    while i < len(names):
        w = state[f"{names[i]}.weight"]
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.load_state_dict({"weight": w, "bias": state[f"{names[i]}.bias"]})
        layers.append(lin)
        linear_count += 1
        if activation is not None and (linear_count < n_linear or activate_output):
            layers.append(activation)
        if layer_norm:
            i += 1
            ln = nn.LayerNorm(w.shape[0])
            ln.load_state_dict({"weight": state[f"{names[i]}.weight"], "bias": state[f"{names[i]}.bias"]})
            layers.append(ln)
        i += 1
    return nn.Sequential(*layers).eval()


@pytest.mark.parametrize("activation,module,layer_norm,activate_output", [
    ("linear", None, False, False), ("relu", nn.ReLU(), False, False), ("swish", nn.Hardswish(), True, False),
    ("tanh", nn.Tanh(), True, True), ("mish", nn.Mish(), False, True)])
def test_hypernetwork_adds_its_mlps_to_keys_and_values(activation, module, layer_norm, activate_output) -> None:
    sd = hypernetwork_state(widths=(16, 12), layer_structure=(1, 2, 2, 1), activation=activation,
                            layer_norm=layer_norm, activate_output=activate_output, use_dropout=True)
    patch = hypernetwork_from_state(sd, 0.7)
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 7, 12), torch.randn(2, 7, 12)
    out_q, out_k, out_v = patch(q, k, v, {})
    with torch.no_grad():
        expected_k = k + _reference(sd[12][0], module, layer_norm, activate_output)(k) * 0.7
        expected_v = v + _reference(sd[12][1], module, layer_norm, activate_output)(v) * 0.7
    assert out_q is q
    torch.testing.assert_close(out_k, expected_k)
    torch.testing.assert_close(out_v, expected_v)
    assert patch(q, k, v, {}) is not None and torch.equal(patch(q, k, v, {})[1], out_k)  # no dropout at inference
    other = torch.randn(1, 3, 20)
    assert patch(q, other, other, {})[1] is other  # no network of that width
    assert copy.deepcopy(patch) is patch


def test_hypernetwork_runs_in_the_attention_dtype_and_rejects_bad_files() -> None:
    patch = hypernetwork_from_state(hypernetwork_state(widths=(16,)), 1.0)
    k = torch.randn(1, 4, 16, dtype=torch.bfloat16)
    assert patch(k, k, k, {})[1].dtype == torch.bfloat16
    with pytest.raises(ModelPatchError, match="gelu"):
        hypernetwork_from_state(hypernetwork_state(activation="gelu"), 1.0)
    with pytest.raises(ModelPatchError, match="no width entries"):
        hypernetwork_from_state({"activation_func": "relu"}, 1.0)


def test_multiplier_keys_select_the_projections_of_one_attention() -> None:
    keys = [f"m.attn{a}.{p}.{w}" for a in (1, 2) for p in ("to_q", "to_k", "to_v", "to_out.0") for w in ("weight", "bias")]
    keys += ["m.attn1.other.weight", "m.time_stack.0.attn2.to_out.0.weight"]
    found = dict(projection_factors(keys, "attn1.", UNET_PROJECTIONS, {"q": 1.5, "k": 2.0, "v": 0.5, "out": 3.0}))
    assert found == {"m.attn1.to_q.weight": 1.5, "m.attn1.to_q.bias": 1.5, "m.attn1.to_k.weight": 2.0,
                     "m.attn1.to_k.bias": 2.0, "m.attn1.to_v.weight": 0.5, "m.attn1.to_v.bias": 0.5,
                     "m.attn1.to_out.0.weight": 3.0, "m.attn1.to_out.0.bias": 3.0}
    clip_keys = ["l.0.self_attn.q_proj.weight", "l.0.self_attn.out_proj.bias", "l.0.mlp.fc1.weight"]
    assert projection_factors(clip_keys, "", CLIP_PROJECTIONS, {"q": 2, "k": 1, "v": 1, "out": 4}) == [
        ("l.0.self_attn.q_proj.weight", 2.0), ("l.0.self_attn.out_proj.bias", 4.0)]
    assert dict(temporal_factors(keys, 1.1, 1.2, 1.3, 1.4)) == {
        "m.attn1.to_out.0.weight": 1.1, "m.attn1.to_out.0.bias": 1.1, "m.attn2.to_out.0.weight": 1.3,
        "m.attn2.to_out.0.bias": 1.3, "m.time_stack.0.attn2.to_out.0.weight": 1.4}


def test_no_delta_patches_multiply_the_weight_and_stack() -> None:
    layer = nn.Linear(3, 2)
    original = layer.weight.detach().clone()
    patcher = Patcher(layer)
    patcher.add_patches({"weight": NoDelta()}, 0.0, 2.0)
    patcher.add_patches({"weight": NoDelta()}, 0.0, 1.5)
    with patcher.applied() as module:
        torch.testing.assert_close(module.weight.detach(), original * 3.0)
    assert torch.equal(layer.weight.detach(), original)


def test_compute_dtype_runs_the_module_with_cast_weights_and_leaves_it_alone() -> None:
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def apply_model(self, x: torch.Tensor, t: torch.Tensor, **c) -> torch.Tensor:
            return self(x, t)

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            dtype = self.lin.weight.dtype  # as DiffusionModel: the input runs in the weights' dtype
            return self.lin(x.to(dtype)).float() + t

    model = Model()
    x, t = torch.randn(2, 4), torch.tensor(1.0)
    wrapper = ComputeDtype(torch.bfloat16)
    out = wrapper(model.apply_model, {"input": x, "timestep": t, "c": {}})
    cast = copy.deepcopy(model).to(torch.bfloat16)
    assert torch.equal(out, cast(x, t))
    assert model.lin.weight.dtype == torch.float32 and not torch.equal(out, model(x, t))
    seen = []

    def inner(apply_model, args):  # noqa: ANN001, ANN202
        seen.append(True)
        return apply_model(args["input"], args["timestep"], **args["c"])
    assert torch.equal(ComputeDtype(torch.bfloat16, inner)(model.apply_model, {"input": x, "timestep": t, "c": {}}), out)
    assert seen == [True]
    assert torch.equal(call_in_dtype(model, torch.float32, x, t), model(x, t))
