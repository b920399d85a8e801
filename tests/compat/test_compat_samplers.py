"""ComfyUI's sampling API for packs (`comfy.samplers`, `comfy.sample`, `comfy.sampler_helpers`,
`comfy.k_diffusion.sampling`) on our runtime, through the fixture pack
tests/compat/api_packs/samplers_pack: its results equal the built-in nodes' bit for bit on a tiny
random SD1 checkpoint, and what it registers or replaces is what our nodes run."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "samplers_pack" / "__init__.py"


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _vae = load_checkpoint(tiny_sd1_ckpt)
    return model, clip_text_encode("a cat", clip)[0], clip_text_encode("blurry", clip)[0]


@pytest.fixture
def pack(session):
    spec = importlib.util.spec_from_file_location("samplers_pack_fixture", PACK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        module.unregister()  # the live name lists are process-wide: leave them as ComfyUI's
        sys.modules.pop(spec.name, None)


def _latent():
    return {"samples": torch.zeros(1, 4, 8, 8)}


def _ksampler_node(model, pos, neg, sampler="euler", scheduler="normal", steps=2, cfg=3.0, seed=5, denoise=1.0,
                   latent=None):
    from nodes.sampling import ksampler

    return ksampler(model, seed, steps, cfg, sampler, scheduler, pos, neg, latent or _latent(), denoise)[0]["samples"]


def test_ksampler_object_equals_the_ksampler_node(pack, sd1) -> None:
    model, pos, neg = sd1
    for sampler, scheduler, denoise in (("euler", "normal", 1.0), ("dpm_2", "karras", 1.0), ("heun", "simple", 0.6)):
        ours = pack.ObjectKSampler().run(model, 5, 2, 3.0, sampler, scheduler, pos, neg, _latent(), denoise)[0]["samples"]
        assert torch.equal(ours, _ksampler_node(model, pos, neg, sampler, scheduler, denoise=denoise))


def test_ksampler_object_sigmas_as_comfyui(session, sd1) -> None:
    import comfy.samplers

    model = sd1[0]
    ms = model.get_model_object("model_sampling")
    k = comfy.samplers.KSampler(model, steps=4, device="cpu", sampler="euler", scheduler="karras")
    assert torch.equal(k.sigmas, comfy.samplers.calculate_sigmas(ms, "karras", 4))
    k.set_steps(4, denoise=0.5)  # int(4 / 0.5) = 8 steps scheduled, the last 5 sigmas kept
    assert torch.equal(k.sigmas, comfy.samplers.calculate_sigmas(ms, "karras", 8)[-5:])
    dpm2 = comfy.samplers.KSampler(model, steps=3, device="cpu", sampler="dpm_2", scheduler="normal")
    full = comfy.samplers.calculate_sigmas(ms, "normal", 4)
    assert torch.equal(dpm2.sigmas, torch.cat([full[:-2], full[-1:]]))
    fallback = comfy.samplers.KSampler(model, steps=2, device="cpu", sampler="nope", scheduler="nope")
    assert (fallback.sampler, fallback.scheduler) == ("euler", "simple")  # ComfyUI's first names


def test_pack_registered_sampler_and_scheduler_run_in_the_ksampler_node(pack, sd1) -> None:
    import comfy.k_diffusion.sampling
    import comfy.samplers

    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.custom_sampling import sampler_custom

    model, pos, neg = sd1
    registry = Registry()
    register_builtin_nodes(registry)
    required = registry.object_info_for("KSampler")["KSampler"]["input"]["required"]
    assert pack.SAMPLER in required["sampler_name"][0] and pack.SCHEDULER in required["scheduler"][0]
    assert comfy.samplers.SAMPLER_NAMES is comfy.samplers.KSampler.SAMPLERS

    before = pack.CALLS["sampler"]
    ours = _ksampler_node(model, pos, neg, sampler=pack.SAMPLER)
    assert pack.CALLS["sampler"] == before + 1
    assert torch.equal(ours, _ksampler_node(model, pos, neg, sampler="euler"))

    ms = model.get_model_object("model_sampling")
    sigmas = comfy.k_diffusion.sampling.get_sigmas_karras(3, float(ms.sigma_min), float(ms.sigma_max), rho=5.0)
    custom = sampler_custom(model, True, 5, 3.0, pos, neg, comfy.samplers.sampler_object("euler"), sigmas,
                            _latent())[0]["samples"]
    assert torch.equal(_ksampler_node(model, pos, neg, scheduler=pack.SCHEDULER, steps=3), custom)
    assert not torch.equal(custom, _ksampler_node(model, pos, neg, scheduler="karras", steps=3))

    pack.unregister()
    with pytest.raises(Exception, match=pack.SAMPLER):
        _ksampler_node(model, pos, neg, sampler=pack.SAMPLER)


def test_guider_subclass_and_custom_ksampler_function(pack, sd1) -> None:
    import comfy.samplers

    from nodes.custom_sampling import sampler_custom

    model, pos, neg = sd1
    ms = model.get_model_object("model_sampling")
    sigmas = comfy.samplers.calculate_sigmas(ms, "karras", 3)
    node = sampler_custom(model, True, 5, 3.0, pos, neg, comfy.samplers.sampler_object("euler"), sigmas,
                          _latent())[0]["samples"]
    run = pack.GuiderSampler().run
    assert torch.equal(run(model, 5, 3.0, pos, neg, _latent(), sigmas, 1.0, False)[0]["samples"], node)
    # the KSAMPLER's option reaches the function; VAE-space output is linear in the sampler's result
    assert torch.allclose(run(model, 5, 3.0, pos, neg, _latent(), sigmas, 2.0, False)[0]["samples"], 2 * node)
    # the subclass' predict_noise is what the sampler calls: at cfg 1 guided == positive, so no change
    at1 = run(model, 5, 1.0, pos, neg, _latent(), sigmas, 1.0, False)[0]["samples"]
    assert torch.equal(run(model, 5, 1.0, pos, neg, _latent(), sigmas, 1.0, True)[0]["samples"], at1)
    assert not torch.equal(run(model, 5, 3.0, pos, neg, _latent(), sigmas, 1.0, True)[0]["samples"], node)


def test_replaced_sampling_function_is_called_by_our_sampler(pack, sd1) -> None:
    import comfy.samplers

    from comfy_core.sampling import cfg

    model, pos, neg = sd1
    original = cfg.sampling_function
    before = pack.CALLS["sampling_function"]
    out = pack.ReplacedSamplingFunction().run(model, 5, 2, 3.0, pos, neg, _latent())[0]["samples"]
    assert pack.CALLS["sampling_function"] == before + 2  # one call per euler step
    assert torch.equal(out, _ksampler_node(model, pos, neg))
    assert cfg.sampling_function is original and comfy.samplers.sampling_function is original


def test_replaced_sample_and_ksampler_sample_are_what_the_node_runs(session, sd1) -> None:
    import comfy.sample
    import comfy.samplers

    model, pos, neg = sd1
    seen = []
    original_sample, original_method = comfy.sample.sample, comfy.samplers.KSampler.sample

    def informative_sample(*args, **kwargs):  # Impact-Pack's sample_error_enhancer pattern
        seen.append("comfy.sample.sample")
        return original_sample(*args, **kwargs)

    def ksampler_sample(self, *args, **kwargs):  # smZNodes patches the class method
        seen.append(("KSampler.sample", self.sampler, self.scheduler))
        return original_method(self, *args, **kwargs)

    expected = _ksampler_node(model, pos, neg)
    comfy.sample.sample = informative_sample
    comfy.samplers.KSampler.sample = ksampler_sample
    try:
        out = _ksampler_node(model, pos, neg)
    finally:
        comfy.sample.sample = original_sample
        comfy.samplers.KSampler.sample = original_method
    assert seen == ["comfy.sample.sample", ("KSampler.sample", "euler", "normal")]
    assert torch.equal(out, expected)


def test_k_diffusion_sampling_names_and_replacements(session, sd1) -> None:
    import comfy.k_diffusion.sampling as kds
    import comfy.k_diffusion.utils
    import comfy.samplers

    from comfy_core.sampling.samplers.registry import KSAMPLER_NAMES

    for name in KSAMPLER_NAMES:
        assert callable(getattr(kds, f"sample_{name}")), name
    for name in ("get_sigmas_karras", "get_sigmas_exponential", "get_sigmas_polyexponential", "get_sigmas_vp",
                 "get_sigmas_laplace", "to_d", "get_ancestral_step", "default_noise_sampler", "BrownianTreeNoiseSampler",
                 "BatchedBrownianTree", "append_zero", "trange"):
        assert getattr(kds, name) is not None
    assert torch.equal(kds.append_zero(torch.ones(2)), torch.tensor([1.0, 1.0, 0.0]))
    assert comfy.k_diffusion.utils.append_dims(torch.ones(3), 4).shape == (3, 1, 1, 1)
    assert comfy.samplers.k_diffusion_sampling is kds

    model, pos, neg = sd1
    expected = _ksampler_node(model, pos, neg, sampler="euler_ancestral")
    calls = []
    original = kds.default_noise_sampler

    def counting_noise_sampler(x, seed=None):  # AnimateDiff / smZNodes replace it for their noise options
        calls.append(seed)
        return original(x, seed=seed)

    kds.default_noise_sampler = counting_noise_sampler
    try:
        out = _ksampler_node(model, pos, neg, sampler="euler_ancestral")
    finally:
        kds.default_noise_sampler = original
    assert calls == [5] and torch.equal(out, expected)

    euler = kds.sample_euler
    kds.sample_euler = lambda model, x, sigmas, **kw: euler(model, x, sigmas, **kw) * 0  # noqa: E731
    try:
        zeroed = _ksampler_node(model, pos, neg, sampler="euler")
    finally:
        kds.sample_euler = euler
    assert torch.count_nonzero(zeroed) == 0


def test_sampler_helpers(session) -> None:
    import comfy.sample
    import comfy.sampler_helpers

    cond = [[torch.ones(1, 77, 8), {"strength": 0.5, "gligen": ("position", "G", [])}]]
    entries = comfy.sampler_helpers.convert_cond(cond)
    assert entries[0]["cross_attn"] is cond[0][0] and entries[0]["model_conds"] == {} and "uuid" in entries[0]

    class Control:
        def __init__(self):
            self.cleaned = 0

        def get_models(self):
            return ["cnet-model"]

        def inference_memory_requirements(self, dtype):
            return 7

        def cleanup(self):
            self.cleaned += 1

    control = Control()
    conds = {"positive": [{**entries[0], "control": control}], "negative": [{"control": control}]}
    models, memory = comfy.sampler_helpers.get_additional_models(conds, torch.float32)
    assert models == ["cnet-model", "G"] and memory == 7
    comfy.sampler_helpers.cleanup_models(conds, [])
    assert control.cleaned == 1
    mask = comfy.sampler_helpers.prepare_mask(torch.ones(1, 16, 16), (2, 4, 8, 8), "cpu")
    assert mask.shape == (2, 4, 8, 8)
    with pytest.raises(NotImplementedError, match="prepare_sampling"):
        comfy.sampler_helpers.prepare_sampling(None, (1, 4, 8, 8), conds)
    assert comfy.sample.np.pi > 3


def test_process_conds_hands_packs_comfyuis_cond_wrappers_which_batch_as_ours():
    # comfyui-tooling-nodes reads `process_conds(...)["positive"][i]["model_conds"]["c_crossattn"].cond`
    import torch

    from comfy_core.sampling.cond_batch import get_area_and_mult
    from compat import mp_conds
    from compat.mp_conds import as_cond as as_comfy_cond

    text = torch.randn(1, 5, 8)
    wrapped = as_comfy_cond("c_crossattn", text)
    assert isinstance(wrapped, mp_conds.CONDCrossAttn) and wrapped.cond is text
    assert isinstance(as_comfy_cond("c_concat", text), mp_conds.CONDNoiseShape)
    assert isinstance(as_comfy_cond("ref_latents", [text]), mp_conds.CONDList)
    assert isinstance(as_comfy_cond("y", torch.zeros(1, 4)), mp_conds.CONDRegular)
    assert as_comfy_cond("num_tokens", 5).cond == 5
    # an entry holding wrappers batches exactly as one holding the values
    x = torch.zeros(2, 4, 3, 3)
    plain = {"model_conds": {"c_crossattn": text, "num_tokens": 5}, "uuid": "u"}
    comfy = {"model_conds": {k: as_comfy_cond(k, v) for k, v in plain["model_conds"].items()}, "uuid": "u"}
    a, b = get_area_and_mult(plain, x, torch.tensor([1.0]), 0), get_area_and_mult(comfy, x, torch.tensor([1.0]), 0)
    assert torch.equal(a.conditioning["c_crossattn"], b.conditioning["c_crossattn"])
    assert a.conditioning["num_tokens"] == b.conditioning["num_tokens"] == 5


def test_a_packs_calc_cond_batch_function_sees_comfy_conds_and_hands_them_back(session, tiny_sd1_ckpt):
    # ComfyUI-ppm's CADS: walks args["conds"][i][j]["model_conds"], noises `.cond` through `_copy_with`,
    # then batches with comfy.samplers.calc_cond_batch.
    import comfy.samplers
    import comfy.sd
    import torch

    from comfy_core.sampling.ksampler import sample

    model, clip, _vae, _ = comfy.sd.load_checkpoint_guess_config(tiny_sd1_ckpt)
    seen = []

    def cads(args):
        conds = []
        for entries in args["conds"]:
            if entries is None:
                conds.append(None)
                continue
            edited = []
            for entry in entries:
                text = entry["model_conds"]["c_crossattn"]
                seen.append(type(text).__name__)
                edited.append({**entry, "model_conds": {**entry["model_conds"],
                                                         "c_crossattn": text._copy_with(text.cond * 1.0)}})
            conds.append(edited)
        return comfy.samplers.calc_cond_batch(args["model"], conds, args["input"], args["sigma"],
                                              args["model_options"])

    patched = model.clone()
    patched.set_model_sampler_calc_cond_batch_function(cads)
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    with_pack = sample(patched, noise, 2, 3.0, "euler", "simple", cond, cond, torch.zeros(1, 4, 8, 8))
    plain = sample(model, noise, 2, 3.0, "euler", "simple", cond, cond, torch.zeros(1, 4, 8, 8))
    assert seen and set(seen) == {"CONDCrossAttn"}
    torch.testing.assert_close(with_pack, plain)  # the wrappers batch exactly as the values
