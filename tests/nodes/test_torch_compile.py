"""TorchCompileModel: declared as ComfyUI 0.3.64 declares it; returns a clone carrying the compile
wrapper (the input MODEL untouched, nothing compiled yet); refuses a backend that cannot work on
the model's device with a typed error; and, once (slow: inductor compiles C++ kernels), a tiny SD1
UNet sampled through it with inductor gives the latent sampled without it."""
from __future__ import annotations

import pytest
import torch

from comfy_core.patching.torch_compile import COMPILE_KEY, TORCH_COMPILE_KWARGS, TorchCompileError
from comfy_core.wrappers import WrappersMP
from graph.native import spec_of
from graph.object_info import node_info
from nodes.errors import NodeInputError
from nodes.torch_compile import torch_compile_model
from tests.fixtures.object_info_parity import comfyui_object_info, node_differences


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("compile") / "tiny.safetensors", "sd1_fast")
    model, clip, _ = load_checkpoint(path)
    cond = [[clip.encode_from_tokens(clip.tokenize("a red car")), {}]]
    uncond = [[clip.encode_from_tokens(clip.tokenize("")), {}]]
    return model, cond, uncond


def test_declared_as_comfyui_declares_it():
    ours = node_info(spec_of(torch_compile_model))
    theirs = comfyui_object_info()["TorchCompileModel"]
    assert node_differences("TorchCompileModel", ours, theirs) == []
    assert ours["experimental"] is True and ours["input"]["required"]["backend"] == [["inductor", "cudagraphs"]]


def test_returns_a_clone_with_the_compile_wrapper_and_compiles_nothing_yet(components):
    model, _, _ = components
    (compiled,) = torch_compile_model(model, "inductor")
    assert compiled is not model and compiled.model is model.model
    (wrapper,) = compiled.get_wrappers(WrappersMP.APPLY_MODEL, COMPILE_KEY)
    assert not wrapper.is_compiled and compiled.model_options[TORCH_COMPILE_KWARGS]["backend"] == "inductor"
    assert model.get_all_wrappers(WrappersMP.APPLY_MODEL) == [] and TORCH_COMPILE_KWARGS not in model.model_options
    (again,) = torch_compile_model(compiled, "inductor")  # a second compile replaces the first
    assert len(again.get_wrappers(WrappersMP.APPLY_MODEL, COMPILE_KEY)) == 1


def test_a_backend_this_device_cannot_run_is_a_typed_error(components):
    model, _, _ = components
    with pytest.raises(TorchCompileError, match="cudagraphs.*needs a CUDA device; the model runs on cpu"):
        torch_compile_model(model, "cudagraphs")
    with pytest.raises(NodeInputError, match="backend"):
        torch_compile_model(model, "eager")  # not one of the node's options
    with pytest.raises(NodeInputError, match="a MODEL"):
        torch_compile_model("model", "inductor")


@pytest.mark.inductor
def test_sampling_through_inductor_gives_the_uncompiled_latent(components):
    """Inductor generates and builds C++ kernels for the tiny UNet (about a minute here)."""
    from comfy_core.sampling.ksampler import sample

    model, cond, uncond = components

    def run(m):
        latent = torch.zeros(1, 4, 8, 8)
        noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(11))
        return sample(m, noise, 2, 7.0, "euler", "normal", cond, uncond, latent, seed=11)

    (compiled,) = torch_compile_model(model, "inductor")
    # Inductor fuses and reorders fp32 reductions (GroupNorm, softmax): ~1e-6 per UNet call,
    # which two CFG-7 steps through random weights grow to ~2e-3 here (measured).
    torch.testing.assert_close(run(compiled), run(model), atol=5e-3, rtol=5e-3)
