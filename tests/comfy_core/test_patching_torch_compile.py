"""`torch.compile` as an APPLY_MODEL wrapper (comfy_core/patching/torch_compile.py) on a tiny SD1
UNet: sampled through it the latent is the one sampled without it; the compile happens at the
first call, is logged with its time and not repeated for a second run or a LoRA clone, whose
LoRA takes effect; a backend that cannot work here, or a compile that fails, is a
`TorchCompileError`, with the model put back. The fast tests use TorchDynamo's `eager` backend
(tracing and guards, the graph run as traced) through the same code path as inductor's; the
inductor run is in tests/nodes/test_torch_compile.py (slow)."""
from __future__ import annotations

import logging

import pytest
import torch

from comfy_core.loading import load_checkpoint
from comfy_core.lora import load_lora_for_models, unet_key_map
from comfy_core.patching.torch_compile import (COMPILE_KEY, TORCH_COMPILE_KWARGS, TorchCompileError,
                                               TorchCompileWrapper, check_backend, compile_problem,
                                               set_torch_compile_wrapper)
from comfy_core.wrappers import WrappersMP
from comfy_core.sampling.ksampler import sample

LOG = "comfy_core.patching.torch_compile"
# a spatial transformer's block: called as a plain module, LoRA targets in it, quick to trace
BLOCK = "diffusion_model.middle_block.1.transformer_blocks.0"
BACKENDS = {"inductor", "cudagraphs", "eager", "aot_eager"}


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    # sd1_fast: SD1's keys without the full-resolution transformers (less to trace)
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("compile") / "tiny.safetensors", "sd1_fast")
    model, clip, _ = load_checkpoint(path)
    cond = [[clip.encode_from_tokens(clip.tokenize("a photo of a cat")), {}]]
    uncond = [[clip.encode_from_tokens(clip.tokenize("")), {}]]
    return model, cond, uncond


class Lines(logging.Handler):
    """The messages of this module's logger (pytest's caplog would also collect TorchDynamo's
    own debug trace, slowly)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> "Lines":
        logger = logging.getLogger(LOG)
        self._level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc) -> None:
        logger = logging.getLogger(LOG)
        logger.removeHandler(self)
        logger.setLevel(self._level)


def run(model, cond, uncond) -> torch.Tensor:
    latent = torch.zeros(1, 4, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(5))
    return sample(model, noise, 2, 6.0, "euler", "normal", cond, uncond, latent, seed=5)


def lora_for(model, seed: int = 0, rank: int = 2) -> dict[str, torch.Tensor]:
    """A kohya LoRA over the middle block's attention query projections."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.model.named_parameters())
    lora = {}
    for layer, key in unet_key_map(model.model).items():
        if layer.startswith("lora_unet_") and key.endswith("to_q.weight") and key in params and "mid" in layer:
            w = params[key]
            lora[f"{layer}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.5
            lora[f"{layer}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * 0.5
            lora[f"{layer}.alpha"] = torch.tensor(float(rank))
    assert lora
    return lora


# --- the decision, without torch.compile ---

def test_compile_problem_refuses_what_cannot_work_on_the_device():
    ok = dict(has_cxx_compiler=True, has_triton=True)
    assert compile_problem("inductor", "cpu", BACKENDS, **ok) is None
    assert compile_problem("inductor", "cuda", BACKENDS, **ok) is None
    assert compile_problem("cudagraphs", "cuda", BACKENDS, **ok) is None
    assert "needs a CUDA device" in compile_problem("cudagraphs", "cpu", BACKENDS, **ok)
    assert "C++ compiler" in compile_problem("inductor", "cpu", BACKENDS, has_cxx_compiler=False, has_triton=True)
    assert compile_problem("inductor", "cuda", BACKENDS, has_cxx_compiler=False, has_triton=True) is None
    assert "triton" in compile_problem("inductor", "cuda", BACKENDS, has_cxx_compiler=True, has_triton=False)
    assert compile_problem("inductor", "cpu", BACKENDS, has_cxx_compiler=True, has_triton=False) is None
    assert "unknown backend" in compile_problem("nonesuch", "cpu", BACKENDS, **ok)
    assert compile_problem(lambda gm, inputs: gm, "cpu", BACKENDS, has_cxx_compiler=False, has_triton=False) is None


def test_check_backend_raises_a_typed_error_naming_the_reason(monkeypatch):
    with pytest.raises(TorchCompileError, match="cudagraphs.*needs a CUDA device; the model runs on cpu") as info:
        check_backend("cudagraphs", torch.device("cpu"))
    assert info.value.backend == "cudagraphs" and info.value.keys == ("diffusion_model",)
    import comfy_core.patching.torch_compile as tc

    monkeypatch.setattr(tc, "has_cxx_compiler", lambda: False)
    with pytest.raises(TorchCompileError, match="C\\+\\+ compiler"):
        check_backend("inductor", "cpu")
    monkeypatch.setattr(tc, "has_triton", lambda: True)
    check_backend("inductor", "cuda:0")  # a GPU needs triton, not the CPU's C++ compiler
    monkeypatch.setattr(tc, "has_triton", lambda: False)
    with pytest.raises(TorchCompileError, match="triton"):
        check_backend("inductor", torch.device("cuda", 0))


def test_a_refused_backend_leaves_the_patcher_without_a_wrapper(components):
    model, _, _ = components
    clone = model.clone()
    with pytest.raises(TorchCompileError):
        set_torch_compile_wrapper(clone, "cudagraphs")
    assert clone.get_all_wrappers(WrappersMP.APPLY_MODEL) == [] and TORCH_COMPILE_KWARGS not in clone.model_options


# --- sampling through the wrapper ---

def test_sampling_through_a_compiled_block_matches_is_lazy_logged_and_cached(components):
    model, cond, uncond = components
    expected = run(model, cond, uncond)
    compiled = model.clone()
    wrapper = set_torch_compile_wrapper(compiled, "eager", keys=[BLOCK])
    assert not wrapper.is_compiled  # nothing compiled until the model is called
    assert compiled.get_wrappers(WrappersMP.APPLY_MODEL, COMPILE_KEY) == [wrapper]
    assert compiled.model_options[TORCH_COMPILE_KWARGS]["backend"] == "eager"
    assert model.get_all_wrappers(WrappersMP.APPLY_MODEL) == []  # the input patcher is untouched
    block = model.model.get_submodule(BLOCK)
    with Lines() as log:
        first = run(compiled, cond, uncond)
    assert len(log.lines) == 1 and log.lines[0].startswith(f"torch.compile: compiled {BLOCK} in ")
    assert log.lines[0].endswith(" s") and wrapper.is_compiled
    torch.testing.assert_close(first, expected, atol=1e-5, rtol=1e-5)
    assert model.model.get_submodule(BLOCK) is block  # the compiled module was swapped out again
    with Lines() as log:
        again = run(compiled.clone(), cond, uncond)  # a clone shares the compiled module
    assert log.lines == []  # no second compile
    torch.testing.assert_close(again, expected, atol=1e-5, rtol=1e-5)


def test_a_lora_applied_after_the_compile_takes_effect(components):
    model, cond, uncond = components
    lora = lora_for(model)
    compiled = model.clone()
    set_torch_compile_wrapper(compiled, "eager", keys=[BLOCK])
    compiled_lora, _, _ = load_lora_for_models(compiled, None, lora, 1.0, 0.0)
    plain_lora, _, _ = load_lora_for_models(model, None, lora, 1.0, 0.0)
    expected = run(plain_lora, cond, uncond)
    assert not torch.allclose(expected, run(model, cond, uncond), atol=1e-3)  # the LoRA changes the result
    torch.testing.assert_close(run(compiled_lora, cond, uncond), expected, atol=1e-5, rtol=1e-5)
    # and the compiled model without the LoRA is still the plain one
    torch.testing.assert_close(run(compiled, cond, uncond), run(model, cond, uncond), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_the_whole_unet_compiled_samples_the_same_latent(components):
    """The default keys (the whole UNet traced by TorchDynamo): ~10 s on a loaded 2-core machine."""
    model, cond, uncond = components
    compiled = model.clone()
    set_torch_compile_wrapper(compiled, "eager")
    unet = model.model.diffusion_model
    with Lines() as log:
        out = run(compiled, cond, uncond)
    assert len(log.lines) == 1 and log.lines[0].startswith("torch.compile: compiled diffusion_model in ")
    torch.testing.assert_close(out, run(model, cond, uncond), atol=1e-5, rtol=1e-5)
    assert model.model.diffusion_model is unet


def test_a_failing_compile_is_a_typed_error_and_the_model_is_put_back(components):
    model, cond, uncond = components

    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no code generator here")

    compiled = model.clone()
    # the UNet's output head only (ComfyUI's `keys`): the same path, less to trace before the failure
    set_torch_compile_wrapper(compiled, broken_backend, keys=["diffusion_model.out"])
    unet, head = model.model.diffusion_model, model.model.diffusion_model.out
    before = {k: v.clone() for k, v in list(model.model.state_dict().items())[:8]}
    with pytest.raises(TorchCompileError, match="broken_backend.*diffusion_model.out: compiling failed: "
                                                "RuntimeError: no code generator here"):
        run(compiled, cond, uncond)
    assert model.model.diffusion_model is unet and unet.out is head
    for k, v in before.items():
        assert torch.equal(model.model.state_dict()[k], v)
    assert not model.in_use


def test_cache_signature_is_equal_for_the_same_module_and_settings(components):
    model, _, _ = components
    a, b = model.clone(), model.clone()
    wa, wb = set_torch_compile_wrapper(a, "inductor"), set_torch_compile_wrapper(b, "inductor")
    assert isinstance(wa, TorchCompileWrapper) and wa is not wb
    assert wa.cache_signature() == wb.cache_signature() and a.cache_signature() == b.cache_signature()
    c = model.clone()
    set_torch_compile_wrapper(c, "inductor", mode="max-autotune")
    assert c.cache_signature() != a.cache_signature() != model.cache_signature()
