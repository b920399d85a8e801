"""comfy.model_patcher / comfy.patcher_extension on our patcher: a fixture pack
(tests/compat/api_packs/patcher_pack) clones MODELs and adds weight and object patches,
wrappers, callbacks and a ModelPatcher subclass; sampling gives the numbers the patches imply
and the base model is unchanged afterwards."""
from __future__ import annotations


import pytest
import torch

from tests.compat.api_pack_support import constant_cond, import_api_pack, load_sd1_model


@pytest.fixture
def pack(session):
    yield from import_api_pack("patcher_pack")


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    return load_sd1_model(tiny_sd1_ckpt)


def _cond(model, value: float):
    return constant_cond(model, value)


def _sample(model, steps: int = 2, cfg: float = 2.0):
    # KSampler's path (the KSampler node calls this driver)
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    latent = torch.zeros(1, 4, 8, 8)
    return sample(model, prepare_noise(latent, 3), steps, cfg, "euler", "normal", _cond(model, 0.3),
                  _cond(model, -0.2), latent, seed=3)


def _weights(model):
    return {k: v.clone() for k, v in model.model.state_dict().items()}


def test_loaded_model_is_comfys_model_patcher(session, sd1) -> None:
    import comfy.model_patcher

    assert isinstance(sd1, comfy.model_patcher.ModelPatcher)
    clone = sd1.clone()
    assert clone.is_clone(sd1) and clone.clone_has_same_weights(sd1)
    assert sd1.model_size() > 0 and sd1.lowvram_patch_counter() == 0
    assert sd1.model_dtype() == torch.float32


def test_weight_patch_gives_the_patched_numbers_and_leaves_the_base(pack, sd1) -> None:
    before = _weights(sd1)
    base = _sample(sd1)
    patched = pack.PatcherPackBiasPatch().patch(sd1, 0.25)[0]
    assert patched.get_key_patches()["diffusion_model.out.2.bias"][1:]  # data on the clone only
    assert not sd1.patches
    with patched.applied() as dm:
        assert torch.equal(dm.diffusion_model.out[2].bias, before["diffusion_model.out.2.bias"] + 0.25)
    # eps + 0.25 everywhere: one euler step from sigma0 to 0 lowers the denoised by 0.25 * sigma0.
    one_base, one_patched = _sample(sd1, steps=1), _sample(patched, steps=1)
    sigma0 = float(sd1.model_sampling.sigma_max)
    assert torch.allclose(one_patched, one_base - 0.25 * sigma0 / 0.18215, atol=1e-3)
    assert not torch.equal(_sample(patched), base)
    assert torch.equal(_sample(sd1), base)
    assert all(torch.equal(v, before[k]) for k, v in sd1.model.state_dict().items())


def test_wrappers_and_callbacks_run_where_comfyui_runs_them(pack, sd1) -> None:
    base = _sample(sd1)
    passthrough = pack.PatcherPackWrappers().patch(sd1, 1.0)[0]
    assert torch.equal(_sample(passthrough), base)  # a wrapper returning the default is bit-exact
    kinds = [e[0] for e in pack.EVENTS]
    assert kinds[:2] == ["outer_sample", "pre_run"] and kinds[-1] == "cleanup"  # pre_run inside outer_sample
    assert ("outer_sample", "CFGGuider", True) in pack.EVENTS
    assert kinds.count("apply_model") == 2 and kinds.count("diffusion_model") == 2  # 2 steps, cond+uncond batched
    assert ("apply_model", "BaseModel", (2, 4, 8, 8)) in pack.EVENTS
    assert ("diffusion_model", "UNetModel") in pack.EVENTS
    assert not sd1.wrappers and not sd1.callbacks  # the clone's, not the base's

    scaled = pack.PatcherPackWrappers().patch(sd1, 0.5)[0]
    x = torch.randn(1, 4, 8, 8)
    sigma = torch.tensor([2.0])
    to = scaled.sampling_extensions(scaled.model_options)["transformer_options"]
    with scaled.applied() as dm:
        out = dm.apply_model(x, sigma, _cond(sd1, 0.1)[0][0], transformer_options=to)
    with sd1.applied() as dm:
        ref = dm.apply_model(x, sigma, _cond(sd1, 0.1)[0][0], transformer_options={})
    assert torch.equal(out, ref * 0.5)


def test_model_sampling_object_patch_from_comfy_classes(pack, sd1) -> None:
    import comfy.model_sampling

    vpred = pack.PatcherPackVPrediction().patch(sd1)[0]
    ms = vpred.get_model_object("model_sampling")
    assert isinstance(ms, comfy.model_sampling.ModelSamplingDiscrete) and ms.prediction == "v"
    assert torch.equal(ms.sigmas, sd1.model_sampling.sigmas)
    assert not torch.equal(_sample(vpred), _sample(sd1))
    assert sd1.model_sampling.prediction == "eps"


def test_pack_subclass_survives_clone_and_samples(pack, sd1) -> None:
    sub = pack.PatcherPackSubclass().patch(sd1)[0]
    assert type(sub) is pack.PackModelPatcher and sub.cloned_by_pack
    assert type(sub.clone()) is pack.PackModelPatcher
    assert torch.equal(_sample(sub), _sample(sd1))


def test_patcher_extension_helpers(session) -> None:
    import comfy.patcher_extension as pe

    opts: dict = {}
    calls = []
    pe.add_wrapper_with_key(pe.WrappersMP.OUTER_SAMPLE, "a", lambda ex, v: ex(v + 1) * 10, opts, is_model_options=True)
    pe.add_wrapper(pe.WrappersMP.OUTER_SAMPLE, lambda ex, v: calls.append(v) or ex(v * 2), opts, is_model_options=True)
    wrappers = pe.get_all_wrappers(pe.WrappersMP.OUTER_SAMPLE, opts, is_model_options=True)
    # the first wrapper is the outermost: ((3 + 1) * 2 + 5) * 10
    assert pe.WrapperExecutor.new_executor(lambda v: v + 5, wrappers).execute(3) == 130 and calls == [4]
    assert len(pe.get_wrappers_with_key(pe.WrappersMP.OUTER_SAMPLE, "a", opts, is_model_options=True)) == 1
    merged = pe.merge_nested_dicts({"w": {"k": [1]}, "x": 1}, {"w": {"k": [2]}, "y": 2})
    assert merged == {"w": {"k": [2, 1]}, "x": 1, "y": 2}


def test_model_options_functions_copy_what_they_change(session) -> None:
    import comfy.model_patcher as mp

    shared = {"patches_replace": {"attn1": {}}}
    options = {"transformer_options": shared}
    mp.set_model_options_patch_replace(options, "p", "attn1", "input", 1)
    assert options["transformer_options"]["patches_replace"]["attn1"] == {("input", 1): "p"}
    assert shared == {"patches_replace": {"attn1": {}}}
    mp.set_model_options_post_cfg_function(options, "f", disable_cfg1_optimization=True)
    assert options["sampler_post_cfg_function"] == ["f"] and options["disable_cfg1_optimization"]
    clone = mp.create_model_options_clone(options)
    clone["transformer_options"]["patches_replace"]["attn1"]["x"] = 1
    assert "x" not in options["transformer_options"]["patches_replace"]["attn1"]


def test_additional_models_and_injections(session, sd1) -> None:
    import comfy.model_patcher as mp

    m = sd1.clone()
    extra = sd1.clone()
    extra.set_additional_models("inner", [sd1.clone()])
    m.set_additional_models("x", [extra])
    assert len(m.get_nested_additional_models()) == 2
    seen = []
    m.set_injections("k", [mp.PatcherInjection(lambda p: seen.append("in"), lambda p: seen.append("out"))])
    with m.applied():
        assert seen == ["in"]
    assert seen == ["in", "out"] and not sd1.injections
