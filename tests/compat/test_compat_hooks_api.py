"""ComfyUI's hooks API (`comfy.hooks`, the ModelPatcher's hook methods) as packs call it, through
the fixture pack tests/compat/api_packs/hooks_pack: a LoRA hook made with
`load_hook_lora_for_models` and set with `set_hooks_for_conditioning` changes only the conditioned
pass, exactly as our own hook nodes' do; keyframes a pack builds with ComfyUI's mutable classes
schedule it as ours do; a pack's `add_hook_patches` registration is what the run applies; wrapper
hooks register into the run's options as ComfyUI's registration does, so an Advanced-ControlNet
style OUTER_SAMPLE wrapper hook on the conds wraps the run; the CLIP side of
`load_hook_lora_for_models` encodes as our SetClipHooks does."""
from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "hooks_pack" / "__init__.py"
CFG = 5.0


@pytest.fixture
def pack(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    import shutil

    from safetensors.torch import load_file

    from tests.fixtures.loras import write_unet_lora

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    from nodes.loaders import checkpoint_loader_simple

    model, clip, _ = checkpoint_loader_simple("tiny.safetensors")
    loras = tmp_path / "models" / "loras"
    loras.mkdir(parents=True, exist_ok=True)
    path = write_unet_lora(loras / "hook.safetensors", model, 3, targets=("to_q.weight", "to_k.weight"), scale=0.5)
    spec = importlib.util.spec_from_file_location("hooks_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.model, module.clip, module.lora = model, clip, load_file(str(path))
    yield module
    sys.modules.pop("hooks_pack_under_test", None)


def _cond(value: float) -> list:
    return [[torch.full((1, 77, 64), value), {}]]


def _predict(model, positive, negative=None, sigmas=None) -> list[torch.Tensor]:
    """The guider's x0 predictions at each sigma of a 3-step schedule on one fixed x."""
    from comfy_core.sampling.guider import BasicGuider, CFGGuider
    from comfy_core.sampling.ksampler import ksampler_sigmas

    sigmas = ksampler_sigmas(model.model_sampling, 3, "euler", "normal") if sigmas is None else sigmas
    if negative is None:
        guider = BasicGuider(model)
        guider.set_conds(positive)
    else:
        guider = CFGGuider(model)
        guider.set_conds(positive, negative)
        guider.set_cfg(CFG)
    outputs = []

    class Recorder:
        def sample(self, guider, sigmas, extra_args, callback, noise, latent, mask, disable_pbar):
            x = noise * sigmas[0]
            with torch.no_grad():
                for sigma in sigmas[:-1]:
                    outputs.append(guider(x, sigma * x.new_ones([x.shape[0]]), **extra_args))
            return x

    torch.manual_seed(0)
    guider.sample(torch.randn(1, 4, 8, 8), torch.zeros(1, 4, 8, 8), Recorder(), sigmas)
    return outputs


def _assert_equal(got, expected):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert torch.equal(g, e), f"step {i}: max |diff| {(g - e).abs().max().item()}"


def test_a_pack_lora_hook_changes_only_the_conditioned_pass_as_our_hook_nodes_do(pack):
    from comfy_core.hooks import create_hook_lora
    from comfy_core.hooks.conditioning import set_conds_props
    from comfy_core.lora import load_lora_for_models

    model, clip, hooks = pack.MaskableLoraLoader().load_lora(pack.model, pack.clip, "hook.safetensors", 0.75, 1.0)
    assert model is not pack.model and clip is not pack.clip and not model.patches  # hooks only, no plain LoRA
    (positive,) = pack.SetModelLoraHook().attach_lora_hook(_cond(0.2), hooks)
    negative = _cond(-0.1)
    got = _predict(model, positive, negative)

    ours = set_conds_props([_cond(0.2)], 1.0, "default", hooks=create_hook_lora(pack.lora, 0.75, 1.0))[0]
    _assert_equal(got, _predict(pack.model, ours, negative))
    # = CFG of the LoRA model on the positive and the plain model on the negative
    lora_model = load_lora_for_models(pack.model, None, pack.lora, 0.75, 0.0)[0]
    cond, uncond = _predict(lora_model, _cond(0.2)), _predict(pack.model, negative)
    _assert_equal(got, [u + (c - u) * CFG for c, u in zip(cond, uncond)])
    plain = _predict(pack.model, _cond(0.2), negative)
    assert not torch.equal(got[0], plain[0])


def test_load_hook_lora_for_models_registers_on_the_clones_and_logs_keys_nothing_has(pack, caplog):
    import comfy.hooks

    lora = dict(pack.lora)
    lora["lora_unet_nowhere.lora_up.weight"] = torch.zeros(4, 2)
    lora["lora_unet_nowhere.lora_down.weight"] = torch.zeros(2, 4)
    with caplog.at_level(logging.WARNING):
        model, clip, hooks = comfy.hooks.load_hook_lora_for_models(pack.model, pack.clip, lora, 0.5, 1.0)
    assert "lora_unet_nowhere" in caplog.text
    (hook,) = hooks.hooks
    assert isinstance(hook, comfy.hooks.WeightHook) and hook.hook_ref in model.hook_patches
    signature = pack.model.cache_signature()
    assert not pack.model.hook_patches  # the input model is not changed, nor by reading
    assert pack.model.cache_signature() == signature and model.cache_signature() != signature
    entries = [e for es in model.hook_patches[hook.hook_ref].values() for e in es]
    assert entries and all(e.strength_patch == 0.5 for e in entries)
    assert clip.patcher.hook_patches[hook.hook_ref] == {}  # registered there, with no keys: a UNet LoRA
    # a model clone keeps its own copy of the registrations
    clone = model.clone()
    clone.hook_patches[hook.hook_ref].clear()
    assert model.hook_patches[hook.hook_ref]
    none_model, none_clip, only_clip = comfy.hooks.load_hook_lora_for_models(None, pack.clip, pack.lora, 1.0, 1.0)
    assert none_model is None and only_clip.hooks[0].strength_model == 0.0


def test_patches_a_pack_registers_with_add_hook_patches_are_what_the_run_applies(pack):
    from comfy_core.lora import load_lora_for_models

    model, hooks, keys = pack.register_lora_on_model(pack.model, pack.lora, 0.6)
    assert keys and set(model.get_combined_hook_patches(hooks)) == {k if isinstance(k, str) else k[0] for k in keys}
    import comfy.hooks

    positive = comfy.hooks.set_hooks_for_conditioning(_cond(0.3), hooks)
    got = _predict(model, positive)
    _assert_equal(got, _predict(load_lora_for_models(pack.model, None, pack.lora, 0.6, 0.0)[0], _cond(0.3)))
    # the hook carries no LoRA of its own: on a model it is not registered on it does nothing
    _assert_equal(_predict(pack.model, positive), _predict(pack.model, _cond(0.3)))


def test_register_all_hook_patches_registers_each_weight_hook_once(pack):
    import comfy.hooks
    from comfy_core.hooks import create_hook_lora

    ours = create_hook_lora(pack.lora, 0.5, 1.0)  # our node's hook: no add_hook_patches of its own
    theirs = comfy.hooks.create_hook_lora(pack.lora, 0.25, 1.0)
    group = comfy.hooks.HookGroup.combine_all_hooks([ours, theirs])
    model = pack.model.clone()
    calls = []
    model.add_callback(comfy.patcher_extension.CallbacksMP.ON_REGISTER_ALL_HOOK_PATCHES,
                       lambda *args: calls.append(args))
    target = comfy.hooks.create_target_dict(comfy.hooks.EnumWeightTarget.Model)
    registered = model.register_all_hook_patches(group, target, {})
    assert len(registered) == 2 and len(calls) == 1
    strengths = {ref: {e.strength_patch for es in by_key.values() for e in es} for ref, by_key in model.hook_patches.items()}
    assert strengths == {ours.hooks[0].hook_ref: {0.5}, theirs.hooks[0].hook_ref: {0.25}}
    # as ComfyUI: the registrations a run adds are undone by `restore_hook_patches` (and by the
    # next registration); a hook registered before (load_hook_lora_for_models) stays, once
    model.restore_hook_patches()
    assert model.hook_patches == {}
    pre, _, pre_hooks = comfy.hooks.load_hook_lora_for_models(pack.model, None, pack.lora, 0.3, 0.0)
    ref = pre_hooks.hooks[0].hook_ref
    entries = pre.hook_patches[ref]
    both = comfy.hooks.HookGroup.combine_all_hooks([pre_hooks, theirs])
    assert len(pre.register_all_hook_patches(both, target, {})) == 2 and pre.hook_patches[ref] is entries
    pre.restore_hook_patches()
    assert list(pre.hook_patches) == [ref] and pre.hook_patches[ref] == entries


def test_keyframes_a_pack_builds_schedule_the_hook_as_our_keyframes_do(pack):
    import comfy.hooks
    from comfy_core.hooks import HookKeyframe as CoreKeyframe
    from comfy_core.hooks import HookKeyframeGroup as CoreGroup
    from comfy_core.hooks import create_hook_lora
    from comfy_core.hooks.conditioning import set_conds_props

    (kf,) = pack.LoraHookKeyframes().create_hook_keyframes(1.0, 0.0, 1)
    (kf,) = pack.LoraHookKeyframes().create_hook_keyframes(0.0, 0.5, 1, prev_hook_kf=kf)
    assert [(k.strength, k.start_percent) for k in kf.keyframes] == [(1.0, 0.0), (0.0, 0.5)]
    (hooks,) = pack.SetHookKeyframes().set_keyframes(comfy.hooks.create_hook_lora(pack.lora, 1.0, 1.0), kf)
    got = _predict(pack.model, comfy.hooks.set_hooks_for_conditioning(_cond(0.2), hooks))

    ours = create_hook_lora(pack.lora, 1.0, 1.0)
    ours.set_keyframes_on_hooks(CoreGroup([CoreKeyframe(1.0, 0.0, 1), CoreKeyframe(0.0, 0.5, 1)]))
    expected = _predict(pack.model, set_conds_props([_cond(0.2)], 1.0, "default", hooks=ours)[0])
    _assert_equal(got, expected)
    plain = _predict(pack.model, _cond(0.2))
    assert not torch.equal(got[0], plain[0]) and torch.equal(got[-1], plain[-1])  # off from 50 %


def test_a_keyframe_group_a_pack_steps_itself_follows_comfyuis_rules(pack):
    from comfy.hooks import HookKeyframe, HookKeyframeGroup
    from comfy_core.sampling.ksampler import ksampler_sigmas

    group = HookKeyframeGroup()
    assert group.strength == 1.0 and not group.prepare_current_keyframe(1.0, {"sample_sigmas": torch.ones(2)})
    group.add(HookKeyframe(0.5, 0.6, guarantee_steps=1))
    group.add(HookKeyframe(2.0, 0.0, guarantee_steps=2))
    assert group.strength == 2.0 and group.has_index(1) and not group.has_index(2)
    sampling = pack.model.model_sampling
    group.initialize_timesteps(pack.model.model)
    assert group.keyframes[1].start_t == pytest.approx(float(sampling.percent_to_sigma(0.6)))
    sigmas = ksampler_sigmas(sampling, 6, "euler", "normal")
    seen = []
    for sigma in sigmas[:-1]:
        group.prepare_current_keyframe(sigma, {"sample_sigmas": sigmas})
        seen.append(group.strength)
    late = [i for i, s in enumerate(sigmas[:-1]) if float(s) <= float(sampling.percent_to_sigma(0.6))]
    assert seen == [2.0 if i < late[0] else 0.5 for i in range(len(seen))]
    group.reset()
    assert group.strength == 2.0
    clone = group.clone()
    assert clone is not group and clone.keyframes[1].start_t == group.keyframes[1].start_t
    assert group.keyframes[1].get_effective_guarantee_steps(torch.max(sigmas)) == 1
    assert group.keyframes[0].get_effective_guarantee_steps(torch.max(sigmas)) == 0  # 0 % is before any sigma
    assert HookKeyframe(1.0, 0.0, 3).get_effective_guarantee_steps(torch.tensor(10.0)) == 0  # never initialised


def test_wrapper_hooks_register_into_the_runs_options_as_comfyuis_registration(pack):
    import comfy.hooks

    def wrapper(executor, *args, **kwargs):
        return executor(*args, **kwargs)

    hooks = pack.create_wrapper_hooks(wrapper)
    (hook,) = hooks.hooks
    assert comfy.hooks.WrapperHook is comfy.hooks.TransformerOptionsHook and hook.hook_id == "hooks_pack"
    assert hook.clone() == hook and hook.clone().custom_should_register is pack.should_register_once
    model_options: dict = {"transformer_options": {}}
    registered = comfy.hooks.HookGroup()
    target = comfy.hooks.create_target_dict(comfy.hooks.EnumWeightTarget.Model)
    assert hook.add_hook_patches(pack.model, model_options, target, registered)
    wrappers = model_options["transformer_options"]["wrappers"]["outer_sample"]["hooks_pack"]
    assert wrappers == [wrapper] and model_options["to_load_options"]["wrappers"]["outer_sample"]["hooks_pack"]
    assert registered.contains(hook)
    # the pack's should_register sees the wrapper now: a second registration is refused
    assert not hook.add_hook_patches(pack.model, model_options, target, comfy.hooks.HookGroup())
    # all-conditioning hooks are in the run's options already; hooked-only ones join a pass's
    assert comfy.hooks.create_transformer_options_from_hooks(pack.model, hooks) == {}
    only = comfy.hooks.TransformerOptionsHook({"patches": {"attn1_patch": [wrapper]}},
                                              hook_scope=comfy.hooks.EnumHookScope.HookedOnly)
    options: dict = {}
    assert only.add_hook_patches(pack.model, options, target, comfy.hooks.HookGroup())
    assert "transformer_options" not in options
    per_pass = comfy.hooks.create_transformer_options_from_hooks(pack.model, comfy.hooks.HookGroup([only]))
    assert per_pass == {"patches": {"attn1_patch": [wrapper]}}
    with pytest.raises(NotImplementedError):
        comfy.hooks.ObjectPatchHook({}).add_hook_patches(pack.model, {}, target, comfy.hooks.HookGroup())


def test_a_hooked_only_transformer_options_hook_joins_the_hooked_conds_passes_only(pack):
    """ComfyUI's `_calc_cond_batch` runs each hook group apart and gives its passes
    `apply_hooks(hooks)`: a hooked-only TransformerOptionsHook's dictionary under the run's
    `transformer_options`. The positive carries an attn1 patch that way; the negative does not."""
    import comfy.hooks

    seen = []

    def scale_q(n, context_attn1, value_attn1, extra_options):
        seen.append(list(extra_options["cond_or_uncond"]))
        return n * 1.5, context_attn1, value_attn1

    hooks = pack.create_hooked_only_patch_hooks(scale_q)
    positive = comfy.hooks.set_hooks_for_conditioning(_cond(0.2), hooks)
    negative = _cond(-0.1)
    got = _predict(pack.model, positive, negative)
    assert seen and all(kinds == [0] for kinds in seen)  # the positive's passes, never the negative's
    patched = pack.model.clone()
    patched.set_model_attn1_patch(scale_q)
    cond, uncond = _predict(patched, _cond(0.2)), _predict(pack.model, negative)
    _assert_equal(got, [u + (c - u) * CFG for c, u in zip(cond, uncond)])
    assert not torch.equal(got[0], _predict(pack.model, _cond(0.2), negative)[0])


def test_conditioning_helpers_combine_and_replace_hooks(pack):
    import comfy.hooks

    a = comfy.hooks.create_hook_lora(pack.lora, 1.0, 1.0)
    b = comfy.hooks.create_hook_lora(pack.lora, 0.5, 1.0)
    cond = comfy.hooks.set_hooks_for_conditioning(_cond(0.0) + _cond(1.0), a)
    both = comfy.hooks.set_hooks_for_conditioning(cond, b)
    assert both[0][1]["hooks"] is both[1][1]["hooks"] and len(both[0][1]["hooks"]) == 2  # one group for both
    replaced = comfy.hooks.set_hooks_for_conditioning(cond, b, append_hooks=False)
    assert replaced[0][1]["hooks"] is b and cond[0][1]["hooks"] is a  # inputs unchanged
    mask = torch.ones(8, 8)
    (props,) = comfy.hooks.set_conds_props([_cond(0.0)], 0.5, "mask bounds", mask=mask, hooks=a,
                                           timesteps_range=(0.1, 0.9))
    d = props[0][1]
    assert d["hooks"] is a and d["mask"].shape == (1, 8, 8) and d["set_area_to_bounds"] and d["mask_strength"] == 0.5
    assert (d["start_percent"], d["end_percent"]) == (0.1, 0.9)
    (default,) = comfy.hooks.set_default_conds_and_combine([_cond(0.0)], [_cond(1.0)], hooks=b)
    assert len(default) == 2 and default[1][1]["default"] and default[1][1]["hooks"] is b
    assert comfy.hooks.combine_with_new_conds([_cond(0.0)], [_cond(1.0)])[0][1][0][0, 0, 0] == 1.0
    group = comfy.hooks.HookGroup.combine_all_hooks([a, None, b])
    group.remove(a.hooks[0])
    assert group.hooks == [b.hooks[0]]
    with pytest.raises(Exception):
        comfy.hooks.HookGroup.combine_all_hooks([a, None], require_count=2)


def test_a_packs_wrapper_hook_on_the_conds_wraps_the_run_once(pack):
    """Advanced-ControlNet's way: an OUTER_SAMPLE wrapper carried by a WrapperHook on the conds
    joins the run's options before its outer wrappers are read; its `custom_should_register`
    keeps a second copy out."""
    import comfy.hooks
    import comfy.patcher_extension
    from nodes.sampling import ksampler

    calls = []

    def wrapper(executor, *args, **kwargs):
        calls.append(executor.class_obj.model_patcher)
        return executor(*args, **kwargs)

    hooks = pack.create_wrapper_hooks(wrapper)
    positive = comfy.hooks.set_hooks_for_conditioning(_cond(0.2), hooks)
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    hooked = ksampler(pack.model, 3, 2, 2.0, "euler", "normal", positive, _cond(-0.1), latent, 1.0)[0]["samples"]
    assert len(calls) == 1 and calls[0].model is pack.model.model
    plain = ksampler(pack.model, 3, 2, 2.0, "euler", "normal", _cond(0.2), _cond(-0.1), latent, 1.0)[0]["samples"]
    assert len(calls) == 1  # a plain run is not wrapped
    # a hooked positive runs in a pass of its own (ComfyUI batches by hook group), so the numbers
    # to compare with are those of the same conds under a wrapper that only passes through
    passthrough = comfy.hooks.set_hooks_for_conditioning(
        _cond(0.2), pack.create_wrapper_hooks(lambda executor, *a, **k: executor(*a, **k)))
    same = ksampler(pack.model, 3, 2, 2.0, "euler", "normal", passthrough, _cond(-0.1), latent, 1.0)[0]["samples"]
    assert torch.equal(hooked, same) and len(calls) == 1
    torch.testing.assert_close(hooked, plain, rtol=1e-2, atol=1e-2)  # float rounding apart
    # the model carries the pack's wrapper already: the hook's should_register refuses a second
    own = []
    model = pack.model.clone()
    model.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "hooks_pack",
                               lambda executor, *a, **k: own.append(1) or executor(*a, **k))
    ksampler(model, 3, 2, 2.0, "euler", "normal", positive, _cond(-0.1), latent, 1.0)
    assert own == [1] and len(calls) == 1


def test_a_clip_lora_hook_from_load_hook_lora_for_models_encodes_as_our_hooks(pack):
    """The CLIP clone's registered hook patches are what a hooked CLIP encodes with (our
    SetClipHooks), exactly as our own hook of the same LoRA."""
    import comfy.hooks
    from comfy_core.hooks import create_hook_lora
    from comfy_core.lora.keymap import text_encoder_key_map
    from nodes.conditioning import clip_text_encode
    from nodes.hook_conditioning import set_clip_hooks

    g = torch.Generator().manual_seed(4)
    params = dict(pack.clip.patcher.model.named_parameters())
    lora = {}
    for layer, key in text_encoder_key_map(pack.clip.patcher.model).items():
        if layer.startswith("lora_te_") and key.endswith("q_proj.weight"):
            lora[f"{layer}.lora_up.weight"] = torch.randn(params[key].shape[0], 2, generator=g) * 0.5
            lora[f"{layer}.lora_down.weight"] = torch.randn(2, params[key].shape[1], generator=g) * 0.5
    _, clip, hooks = comfy.hooks.load_hook_lora_for_models(pack.model, pack.clip, lora, 1.0, 0.6)
    assert clip.patcher.hook_patches[hooks.hooks[0].hook_ref]
    got = clip_text_encode("a red cube", set_clip_hooks(clip, True, False, hooks)[0])[0]
    ours = clip_text_encode("a red cube", set_clip_hooks(pack.clip, True, False, create_hook_lora(lora, 1.0, 0.6))[0])[0]
    plain = clip_text_encode("a red cube", pack.clip)[0]
    assert torch.equal(got[0][0], ours[0][0]) and not torch.equal(got[0][0], plain[0][0])
    assert got[0][1]["hooks"] is not None
