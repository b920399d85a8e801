"""Today's ComfyUI sampling helpers that guiders of packs call (LanPaint, ComfyUI-NAG):
`comfy.sampler_helpers.prepare_sampling` / `cleanup_models` / `prepare_model_patcher`, the hook
helpers of `comfy.samplers` (`preprocess_conds_hooks`, `filter_registered_hooks_on_conds`,
`get_total_hook_groups_in_conds`, `cast_to_load_options`) and `comfy.ldm.hidream.model.attention`.

A fixture pack written here (PACK_SOURCE) calls them as those packs do: LanPaint's way (its own
`outer_sample` and `predict_noise` installed on `comfy.samplers.CFGGuider` for one KSampler run:
`prepare_sampling`, then `inner_sample`, then `cleanup_models`) and NAG's way (a `CFGGuider`
subclass with its own `sample` and `inner_sample` using the hook helpers). Where the pack's code
does nothing different, the sampled latent equals our plain KSampler's on the tiny SD1 model, bit
for bit; with a LoRA hook on the conditioning, NAG's way equals our guider's own run."""
from __future__ import annotations

import sys
import types

import pytest
import torch

PACK_SOURCE = '''
import torch
import comfy.hooks
import comfy.model_patcher
import comfy.patcher_extension
import comfy.sampler_helpers
import comfy.samplers
import nodes
from comfy.samplers import *  # LanPaint: cast_to_load_options, calc_cond_batch, cfg_function
from comfy.samplers import (process_conds, preprocess_conds_hooks, cast_to_load_options,
                            filter_registered_hooks_on_conds, get_total_hook_groups_in_conds, CFGGuider)

EVENTS = []


class PaintGuider:
    """LanPaint's CFGGuider_LanPaint: its methods replace CFGGuider's for one node run."""

    def outer_sample(self, noise, latent_image, sampler, sigmas, denoise_mask=None, callback=None,
                     disable_pbar=False, seed=None, **kwargs):
        self.inner_model, self.conds, self.loaded_models = comfy.sampler_helpers.prepare_sampling(
            self.model_patcher, noise.shape, self.conds, self.model_options)
        EVENTS.append(("prepared", self.inner_model, list(self.loaded_models)))
        device = self.model_patcher.load_device
        if denoise_mask is not None:
            denoise_mask = comfy.sampler_helpers.prepare_mask(denoise_mask, noise.shape, device)
        noise = noise.to(device)
        latent_image = latent_image.to(device)
        sigmas = sigmas.to(device)
        cast_to_load_options(self.model_options, device=device, dtype=self.model_patcher.model_dtype())
        try:
            self.model_patcher.pre_run()
            output = self.inner_sample(noise, latent_image, device, sampler, sigmas, denoise_mask, callback,
                                       disable_pbar, seed, **kwargs)
        finally:
            self.model_patcher.cleanup()
        comfy.sampler_helpers.cleanup_models(self.conds, self.loaded_models)
        del self.inner_model
        del self.loaded_models
        return output

    def predict_noise(self, x, timestep, model_options={}, seed=None):
        cond, uncond = self.conds.get("positive", None), self.conds.get("negative", None)
        EVENTS.append(("predict", self.inner_model))
        out = calc_cond_batch(self.inner_model, [cond, uncond], x, timestep, model_options)
        return cfg_function(self.inner_model, out[0], out[1], self.cfg, x, timestep, model_options=model_options,
                            cond=cond, uncond=uncond)


def paint_ksampler(model, seed, steps, cfg, sampler_name, scheduler, positive, negative, latent, denoise=1.0):
    saved = comfy.samplers.CFGGuider.outer_sample, comfy.samplers.CFGGuider.predict_noise
    comfy.samplers.CFGGuider.outer_sample = PaintGuider.outer_sample
    comfy.samplers.CFGGuider.predict_noise = PaintGuider.predict_noise
    try:
        return nodes.common_ksampler(model, seed, steps, cfg, sampler_name, scheduler, positive, negative, latent,
                                     denoise=denoise)
    finally:
        comfy.samplers.CFGGuider.outer_sample, comfy.samplers.CFGGuider.predict_noise = saved


class HookedGuider(CFGGuider):
    """ComfyUI-NAG's NAGCFGGuider: CFGGuider.sample and inner_sample of its own."""

    def inner_sample(self, noise, latent_image, device, sampler, sigmas, denoise_mask, callback, disable_pbar,
                     seed, latent_shapes=None, **kwargs):
        if latent_image is not None and torch.count_nonzero(latent_image) > 0:
            latent_image = self.inner_model.process_latent_in(latent_image)
        self.conds = process_conds(self.inner_model, noise, self.conds, device, latent_image, denoise_mask, seed)
        extra_model_options = comfy.model_patcher.create_model_options_clone(self.model_options)
        extra_model_options.setdefault("transformer_options", {})["sample_sigmas"] = sigmas
        extra_args = {"model_options": extra_model_options, "seed": seed}
        executor = comfy.patcher_extension.WrapperExecutor.new_class_executor(
            sampler.sample, sampler, comfy.patcher_extension.get_all_wrappers(
                comfy.patcher_extension.WrappersMP.SAMPLER_SAMPLE, extra_args["model_options"], is_model_options=True))
        samples = executor.execute(self, sigmas, extra_args, callback, noise, latent_image, denoise_mask,
                                   disable_pbar)
        return self.inner_model.process_latent_out(samples.to(torch.float32))

    def sample(self, noise, latent_image, sampler, sigmas, denoise_mask=None, callback=None, disable_pbar=False,
               seed=None, latent_shapes=None, **kwargs):
        if sigmas.shape[-1] == 0:
            return latent_image
        self.conds = {}
        for k in self.original_conds:
            self.conds[k] = list(map(lambda a: a.copy(), self.original_conds[k]))
        preprocess_conds_hooks(self.conds)
        try:
            orig_model_options = self.model_options
            self.model_options = comfy.model_patcher.create_model_options_clone(self.model_options)
            orig_hook_mode = self.model_patcher.hook_mode
            groups = get_total_hook_groups_in_conds(self.conds)
            if groups <= 1:
                self.model_patcher.hook_mode = comfy.hooks.EnumHookMode.MinVram
            to_load = comfy.sampler_helpers.prepare_model_patcher(self.model_patcher, self.conds, self.model_options)
            filter_registered_hooks_on_conds(self.conds, self.model_options)
            EVENTS.append(("registered", groups, self.model_options.get("registered_hooks"), to_load))
            executor = comfy.patcher_extension.WrapperExecutor.new_class_executor(
                self.outer_sample, self, comfy.patcher_extension.get_all_wrappers(
                    comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, self.model_options, is_model_options=True))
            output = executor.execute(noise, latent_image, sampler, sigmas, denoise_mask, callback, disable_pbar,
                                      seed)
        finally:
            cast_to_load_options(self.model_options, device=self.model_patcher.offload_device)
            self.model_options = orig_model_options
            self.model_patcher.hook_mode = orig_hook_mode
            self.model_patcher.restore_hook_patches()
        del self.conds
        return output
'''

CFG = 3.0


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _vae = load_checkpoint(tiny_sd1_ckpt)
    return model, clip_text_encode("a cat", clip)[0], clip_text_encode("blurry", clip)[0]


@pytest.fixture
def pack(session):
    module = types.ModuleType("sampler_helpers_pack_fixture")
    sys.modules[module.__name__] = module
    try:
        exec(compile(PACK_SOURCE, "<sampler_helpers_pack_fixture>", "exec"), module.__dict__)
        yield module
    finally:
        sys.modules.pop(module.__name__, None)


def _latent(masked: bool = False) -> dict:
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    if masked:
        mask = torch.zeros(1, 64, 64)
        mask[:, 16:48, 16:48] = 1.0
        latent["noise_mask"] = mask
    return latent


def _ksampler(model, pos, neg, latent=None, seed=5, steps=3, sampler="euler", scheduler="normal", denoise=1.0):
    from nodes.sampling import ksampler

    return ksampler(model, seed, steps, CFG, sampler, scheduler, pos, neg, latent or _latent(), denoise)[0]["samples"]


def _guided(guider, model, seed=5, steps=3, latent=None):
    """`guider.sample` as the KSampler node runs it: the seed's noise, the KSampler's sigmas."""
    import comfy.sample
    import comfy.samplers

    latent_image = (latent or _latent())["samples"]
    noise = comfy.sample.prepare_noise(latent_image, seed)
    sigmas = comfy.samplers.KSampler(model, steps=steps, device="cpu", sampler="euler", scheduler="normal").sigmas
    return guider.sample(noise, latent_image, comfy.samplers.sampler_object("euler"), sigmas, seed=seed)


# -- LanPaint's way: prepare_sampling, inner_sample / predict_noise, cleanup_models ------------------


def test_a_packs_outer_sample_with_prepare_sampling_equals_the_plain_ksampler(pack, sd1):
    model, pos, neg = sd1
    for latent in (None, _latent(masked=True)):
        plain = _ksampler(model, pos, neg, latent)
        pack.EVENTS.clear()
        got = pack.paint_ksampler(model, 5, 3, CFG, "euler", "normal", pos, neg, latent or _latent())[0]["samples"]
        assert torch.equal(got, plain)
        prepared = [e for e in pack.EVENTS if e[0] == "prepared"]
        assert len(prepared) == 1 and prepared[0][2] == []  # no extra models on a plain conditioning
        assert sum(e[0] == "predict" for e in pack.EVENTS) == 3  # the pack's predict_noise made every step


def test_a_controlnet_on_the_conds_is_loaded_run_and_cleaned_up_as_in_the_plain_ksampler(pack, sd1, tmp_path):
    import comfy.controlnet

    from nodes.controlnet import apply_controlnet
    from tests.fixtures.controlnets import write_controlnet

    model, pos, neg = sd1
    control = comfy.controlnet.load_controlnet(str(write_controlnet(tmp_path / "cn.safetensors")))
    hint = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(2))
    cpos, cneg = apply_controlnet(pos, neg, control, hint, 0.8, 0.0, 1.0)
    plain = _ksampler(model, cpos, cneg)
    assert not torch.equal(plain, _ksampler(model, pos, neg))  # the ControlNet acts
    pack.EVENTS.clear()
    got = pack.paint_ksampler(model, 5, 3, CFG, "euler", "normal", cpos, cneg, _latent())[0]["samples"]
    assert torch.equal(got, plain)
    (_, _, loaded), = [e for e in pack.EVENTS if e[0] == "prepared"]
    assert loaded == list(cpos[0][1]["control"].get_models()) and loaded  # its model was loaded for the run
    assert _ksampler(model, cpos, cneg).equal(plain)  # cleaned up: a later run is the same


def test_the_inner_model_is_what_the_guiders_inner_model_is_in_a_run(pack, sd1):
    import comfy.model_base
    import comfy.sampler_helpers
    import comfy.samplers

    model, pos, neg = sd1
    seen = []

    class Recorder(comfy.samplers.CFGGuider):
        def predict_noise(self, x, timestep, model_options={}, seed=None):
            seen.append(self.inner_model)
            return super().predict_noise(x, timestep, model_options=model_options, seed=seed)

    guider = Recorder(model)
    guider.set_conds(pos, neg)
    guider.set_cfg(CFG)
    _guided(guider, model, steps=1)
    conds = {"positive": comfy.sampler_helpers.convert_cond(pos)}
    inner, out_conds, models = comfy.sampler_helpers.prepare_sampling(model, (1, 4, 8, 8), conds, model.model_options)
    assert inner is seen[0] and inner is model.model and out_conds is conds and models == []
    assert isinstance(inner, comfy.model_base.BaseModel)
    # what packs then call on it
    assert inner.memory_required([2, 4, 8, 8]) == model.model.memory_required([2, 4, 8, 8]) > 0
    x, sigma = torch.randn(1, 4, 8, 8), torch.tensor([2.0])
    with model.applied() as dm:
        expected = dm.apply_model(x, sigma, c_crossattn=pos[0][0])
    assert torch.equal(inner.apply_model(x, sigma, c_crossattn=pos[0][0]), expected)
    assert callable(inner.extra_conds)
    comfy.sampler_helpers.cleanup_models(out_conds, models)


def test_prepare_sampling_leaves_the_models_weight_patches_on_as_comfyuis_load(pack, sd1):
    import comfy.sampler_helpers

    model, pos, neg = sd1
    key = next(k for k, _ in model.model.named_parameters() if k.endswith("attn2.to_q.weight"))
    original = dict(model.model.named_parameters())[key].detach().clone()
    delta = torch.full_like(original, 0.25)
    patched = model.clone()
    patched.add_patches({key: (delta,)}, 1.0)
    inner, _, _ = comfy.sampler_helpers.prepare_sampling(patched, (1, 4, 8, 8), {}, patched.model_options)
    assert torch.equal(dict(inner.named_parameters())[key], original + delta)  # the LoRA-style patch is on
    with model.applied() as dm:  # another patch set applies the module: the patch comes off
        assert torch.equal(dict(dm.named_parameters())[key], original)
    assert torch.equal(dict(model.model.named_parameters())[key], original)
    # and a pack's run on the patched model equals the plain KSampler on it
    plain = _ksampler(patched, pos, neg)
    got = pack.paint_ksampler(patched, 5, 3, CFG, "euler", "normal", pos, neg, _latent())[0]["samples"]
    assert torch.equal(got, plain) and not torch.equal(plain, _ksampler(model, pos, neg))


def test_prepare_sampling_runs_the_prepare_sampling_wrappers_and_loads_the_extra_models(pack, sd1):
    import comfy.patcher_extension
    import comfy.sampler_helpers

    model, pos, _ = sd1
    calls = []

    class Extra:
        """A model an entry carries (`additional_models`), as a pack's conditioning may."""

        cleaned = 0

        def cleanup(self):
            self.cleaned += 1

    extra = Extra()
    extra_patcher = model.clone()

    def wrapper(executor, patcher, noise_shape, conds, *args, **kwargs):
        calls.append((patcher, tuple(noise_shape), sorted(kwargs)))
        return executor(patcher, noise_shape, conds, *args, **kwargs)

    options = {"transformer_options": {}}
    comfy.patcher_extension.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.PREPARE_SAMPLING, "k", wrapper,
                                                 options, is_model_options=True)
    conds = {"positive": [{**comfy.sampler_helpers.convert_cond(pos)[0], "additional_models": [extra]}]}
    with_nested = model.clone()
    with_nested.set_additional_models("pack", [extra_patcher])
    inner, _, models = comfy.sampler_helpers.prepare_sampling(with_nested, (2, 4, 8, 8), conds, options,
                                                              force_full_load=True)
    assert calls == [(with_nested, (2, 4, 8, 8), ["force_full_load", "force_offload", "model_options"])]
    assert models == [extra, extra_patcher] and inner is model.model
    comfy.sampler_helpers.cleanup_models(conds, models)
    assert extra.cleaned == 1


def test_prepare_sampling_refuses_weight_hooks_it_would_sample_without(pack, sd1):
    import comfy.hooks
    import comfy.sampler_helpers

    from compat.samplers_helpers import UnsupportedSamplingHelper

    model, pos, _ = sd1
    hooks = comfy.hooks.HookGroup()
    hooks.add(comfy.hooks.WeightHook())
    conds = {"positive": comfy.sampler_helpers.convert_cond(comfy.hooks.set_hooks_for_conditioning(pos, hooks))}
    with pytest.raises(UnsupportedSamplingHelper, match="weight hooks"):
        comfy.sampler_helpers.prepare_sampling(model, (1, 4, 8, 8), conds, model.model_options)
    # a run that registered them (our guider's outer_sample) may call it
    inner, _, _ = comfy.sampler_helpers.prepare_sampling(model, (1, 4, 8, 8), conds, {"hook_run": object()})
    assert inner is model.model


# -- NAG's way: a guider with its own sample, the hook helpers ----------------------------------------


def test_a_guider_with_its_own_sample_and_the_hook_helpers_equals_the_plain_ksampler(pack, sd1):
    import comfy.hooks

    model, pos, neg = sd1
    guider = pack.HookedGuider(model)
    guider.set_conds(pos, neg)
    guider.set_cfg(CFG)
    pack.EVENTS.clear()
    assert torch.equal(_guided(guider, model), _ksampler(model, pos, neg))
    (_, groups, registered, to_load), = pack.EVENTS
    assert groups == 1 and registered is None and to_load == {"wrappers": {}, "callbacks": {}}
    assert model.hook_mode != comfy.hooks.EnumHookMode.MinVram  # put back


def test_a_lora_hook_through_the_hook_helpers_is_what_our_guider_applies(pack, sd1, tmp_path):
    import comfy.hooks
    import comfy.samplers
    from safetensors.torch import load_file

    from tests.fixtures.loras import write_unet_lora

    model, pos, neg = sd1
    lora = load_file(str(write_unet_lora(tmp_path / "hook.safetensors", model, 3, targets=("to_q.weight",),
                                         scale=0.5)))
    hooks = comfy.hooks.create_hook_lora(lora, 0.8, 1.0)
    hooked_pos = comfy.hooks.set_hooks_for_conditioning(pos, hooks)

    def run(cls):
        guider = cls(model)
        guider.set_conds(hooked_pos, neg)
        guider.set_cfg(CFG)
        return _guided(guider, model)

    pack.EVENTS.clear()
    got = run(pack.HookedGuider)
    ours = run(comfy.samplers.CFGGuider)
    assert torch.equal(got, ours) and not torch.equal(got, _ksampler(model, pos, neg))
    (_, groups, registered, _), = pack.EVENTS
    assert groups == 2 and registered is not None and len(registered) == 1  # hooked positive, plain negative
    assert not model.hook_patches  # restore_hook_patches took the run's registration off


def test_prepare_model_patcher_registers_hooks_and_merges_wrappers_as_comfyui(pack, sd1):
    import comfy.hooks
    import comfy.patcher_extension
    import comfy.sampler_helpers

    model, pos, _ = sd1
    patcher = model.clone()

    def own_wrapper(executor, *args, **kwargs):
        return executor(*args, **kwargs)

    def hook_wrapper(executor, *args, **kwargs):
        return executor(*args, **kwargs)

    patcher.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "own", own_wrapper)
    option_hook = comfy.hooks.TransformerOptionsHook(
        {"wrappers": {comfy.patcher_extension.WrappersMP.OUTER_SAMPLE: {"hook": [hook_wrapper]}}})
    weight_hook = comfy.hooks.WeightHook()
    weight_hook.weights = {}
    group = comfy.hooks.HookGroup()
    group.add(option_hook)
    group.add(weight_hook)
    conds = {"positive": comfy.sampler_helpers.convert_cond(comfy.hooks.set_hooks_for_conditioning(pos, group))}
    options = comfy.model_patcher.create_model_options_clone(patcher.model_options)
    to_load = comfy.sampler_helpers.prepare_model_patcher(patcher, conds, options)
    assert to_load is options["to_load_options"]
    wrappers = options["transformer_options"]["wrappers"][comfy.patcher_extension.WrappersMP.OUTER_SAMPLE]
    assert wrappers["own"] == [own_wrapper] and wrappers["hook"] == [hook_wrapper]
    assert to_load["wrappers"][comfy.patcher_extension.WrappersMP.OUTER_SAMPLE]["own"] == [own_wrapper]
    registered = options["registered_hooks"]
    assert registered.contains(option_hook) and registered.contains(weight_hook)
    assert weight_hook.hook_ref in patcher.hook_patches
    patcher.restore_hook_patches()
    assert weight_hook.hook_ref not in patcher.hook_patches
    # no hooks at all: nothing registered, the patcher's wrappers still merged
    plain = {"transformer_options": {}}
    comfy.sampler_helpers.prepare_model_patcher(patcher, {"positive": comfy.sampler_helpers.convert_cond(pos)}, plain)
    assert "registered_hooks" not in plain
    assert plain["to_load_options"]["wrappers"][comfy.patcher_extension.WrappersMP.OUTER_SAMPLE]["own"] == [own_wrapper]


def _hook(name):
    import comfy.hooks

    hook = comfy.hooks.TransformerOptionsHook({})
    hook.name = name
    return hook


def _group(*hooks):
    import comfy.hooks

    group = comfy.hooks.HookGroup()
    for hook in hooks:
        group.add(hook)
    return group


def test_preprocess_conds_hooks_combines_a_controlnets_extra_hooks_with_the_entries(session):
    import comfy.samplers

    a, b, c = _hook("a"), _hook("b"), _hook("c")

    class Control:
        def __init__(self, extra):
            self.extra = extra

        def get_extra_hooks(self):
            return self.extra

    with_hooks, without = Control([_group(a)]), Control([])
    own = _group(b)
    e1, e2, e3, e4 = {"control": with_hooks, "hooks": own}, {"control": with_hooks, "hooks": own}, \
        {"control": with_hooks}, {"control": without, "hooks": _group(c)}
    conds = {"positive": [e1, e2], "negative": [e3, e4]}
    untouched = e4["hooks"]
    comfy.samplers.preprocess_conds_hooks(conds)
    assert e1["hooks"] is e2["hooks"] and e1["hooks"] is not own  # one new group per (control, hooks)
    assert [h.name for h in e1["hooks"].hooks] == ["a", "b"]
    assert [h.name for h in e3["hooks"].hooks] == ["a"]
    assert e4["hooks"] is untouched and [h.name for h in own.hooks] == ["b"]


def test_filter_registered_hooks_on_conds_keeps_only_registered_hooks(session):
    import comfy.samplers

    a, b = _hook("a"), _hook("b")
    shared = _group(a, b)
    only_b = _group(b)
    e1, e2, e3, e4 = {"hooks": shared}, {"hooks": shared}, {"hooks": only_b}, {}
    conds = {"positive": [e1, e3], "negative": [e2, e4]}
    comfy.samplers.filter_registered_hooks_on_conds(conds, {"registered_hooks": _group(a)})
    assert e1["hooks"] is e2["hooks"] and [h.name for h in e1["hooks"].hooks] == ["a"]  # shared replacement
    assert e3["hooks"] is None and e4 == {}
    subset = _group(a)
    kept = {"positive": [{"hooks": subset}]}
    comfy.samplers.filter_registered_hooks_on_conds(kept, {"registered_hooks": _group(a, b)})
    assert kept["positive"][0]["hooks"] is subset  # already registered: untouched
    comfy.samplers.filter_registered_hooks_on_conds(kept, {})  # none registered: every entry loses them
    assert kept == {"positive": [{}]}


def test_get_total_hook_groups_in_conds_counts_distinct_groups_and_none(session):
    import comfy.samplers

    group = _group(_hook("a"))
    assert comfy.samplers.get_total_hook_groups_in_conds({"positive": [{}], "negative": [{}]}) == 1
    conds = {"positive": [{"hooks": group}, {}], "negative": [{"hooks": group}, {"hooks": _group(_hook("a"))}]}
    assert comfy.samplers.get_total_hook_groups_in_conds(conds) == 3
    assert comfy.samplers.get_total_hook_groups_in_conds({}) == 0


def test_cast_to_load_options_calls_to_on_patches_wrappers_and_callbacks(session):
    import comfy.samplers

    class Movable:
        def __init__(self, log=()):
            self.log = list(log)

        def to(self, what):
            return Movable(self.log + [what])

    def plain_fn():
        return None

    patch, replace, wrapper, callback = Movable(), Movable(), Movable(), Movable()
    options = {"to_load_options": {"patches": {"attn1_patch": [patch, plain_fn]},
                                   "patches_replace": {"attn2": {("input", 1): replace}},
                                   "wrappers": {"outer_sample": {"k": [wrapper]}},
                                   "callbacks": {"on_cleanup": {"k": [callback, plain_fn]}}}}
    comfy.samplers.cast_to_load_options(options, device="cpu", dtype=torch.float16)
    loaded = options["to_load_options"]
    assert loaded["patches"]["attn1_patch"][0].log == ["cpu", torch.float16] and loaded["patches"]["attn1_patch"][1] is plain_fn
    assert loaded["patches_replace"]["attn2"][("input", 1)].log == ["cpu", torch.float16]
    assert loaded["wrappers"]["outer_sample"]["k"][0].log == ["cpu", torch.float16]
    assert loaded["callbacks"]["on_cleanup"]["k"][0].log == ["cpu", torch.float16]
    comfy.samplers.cast_to_load_options(options)  # nothing to cast to: unchanged
    assert loaded["wrappers"]["outer_sample"]["k"][0].log == ["cpu", torch.float16]
    comfy.samplers.cast_to_load_options(None, device="cpu")
    comfy.samplers.cast_to_load_options({}, device="cpu")


def test_a_star_import_of_comfy_samplers_binds_the_hook_helpers(session):
    namespace: dict = {}
    exec("from comfy.samplers import *", namespace)
    for name in ("cast_to_load_options", "preprocess_conds_hooks", "filter_registered_hooks_on_conds",
                 "get_total_hook_groups_in_conds", "calc_cond_batch", "cfg_function", "CFGGuider"):
        assert callable(namespace[name]), name


def test_get_hooks_from_cond_collects_entry_and_controlnet_chain_hooks(session):
    import comfy.hooks
    import comfy.sampler_helpers

    a, b, c = _hook("a"), _hook("b"), _hook("c")

    class Control:
        def __init__(self, extra, previous=None):
            self.extra_hooks, self.previous_controlnet = extra, previous

    chain = Control(_group(b), previous=Control(_group(c)))
    found = comfy.sampler_helpers.get_hooks_from_cond([{"hooks": _group(a), "control": chain}, {}],
                                                      comfy.hooks.HookGroup())
    assert [h.name for h in found.hooks] == ["a", "b", "c"]
    registered = _group(comfy.hooks.AdditionalModelsHook(models=["m1", "m2"]))
    assert comfy.sampler_helpers.get_additional_models_from_model_options({"registered_hooks": registered}) == \
        ["m1", "m2"]
    assert comfy.sampler_helpers.get_additional_models_from_model_options(None) == []


# -- comfy.ldm.hidream.model.attention --------------------------------------------------------------


def test_hidream_attention_is_multi_head_attention_over_flattened_heads(session):
    import comfy.ldm.hidream.model

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 4, generator=g) for _ in range(3))  # [B, S, heads, head_dim]
    got = comfy.ldm.hidream.model.attention(q, k, v, transformer_options={})
    # independently: softmax(q k^T / sqrt(d)) v per head, heads concatenated
    weights = torch.softmax(torch.einsum("bshd,bthd->bhst", q, k) / 2.0, dim=-1)
    expected = torch.einsum("bhst,bthd->bshd", weights, v).reshape(2, 5, 12)
    assert got.shape == (2, 5, 12)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(comfy.ldm.hidream.model.attention(q, k, v), got)
