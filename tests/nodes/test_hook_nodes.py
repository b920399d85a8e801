"""The hook nodes of comfy_extras.nodes_hooks: declared as ComfyUI 0.3.64 declares them, building
ComfyUI's structures (hook groups, keyframes, conditioning entries), never changing their inputs,
typed errors, and a workflow that samples with a hooked CLIP through the executor."""
from __future__ import annotations

import shutil

import pytest
import torch

from comfy_core.hooks import HookGroup, HookKeyframe, HookKeyframeGroup, WeightHook
from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.hook_conditioning import (
    conditioning_set_default_combine,
    conditioning_set_properties,
    conditioning_set_properties_and_combine,
    conditioning_timesteps_range,
    pair_conditioning_combine,
    pair_conditioning_set_default_combine,
    pair_conditioning_set_properties,
    pair_conditioning_set_properties_and_combine,
    set_clip_hooks,
)
from nodes.hook_nodes import (
    combine_hooks_2,
    combine_hooks_4,
    combine_hooks_8,
    create_hook_keyframe,
    create_hook_keyframes_from_floats,
    create_hook_keyframes_interpolated,
    create_hook_lora_node,
    create_hook_lora_model_only,
    create_hook_model_as_lora_model_only,
    create_hook_model_as_lora_node,
    set_hook_keyframes,
)
from tests.fixtures.loras import write_unet_lora
from tests.fixtures.object_info_parity import comfyui_object_info, differences

MODULE = "comfy_extras.nodes_hooks"


def cond(value: float = 0.0, **options) -> list:
    return [[torch.full((1, 2, 4), value), dict(options)]]


def group(n: int = 1) -> HookGroup:
    return HookGroup(WeightHook(1.0, 1.0, lora={}) for _ in range(n))


# --- declarations ---

def test_every_hook_node_is_declared_as_comfyui_declares_it(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = {k: v for k, v in comfyui_object_info().items() if v["python_module"] == MODULE}
    assert len(theirs) == 20 and set(theirs) <= set(ours)
    assert differences({k: ours[k] for k in theirs}, theirs) == {}
    assert all(ours[k]["experimental"] is True for k in theirs)


# --- creating hooks ---

@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    root = tmp_path_factory.mktemp("hook_nodes")
    (root / "models" / "loras").mkdir(parents=True)
    (root / "models" / "checkpoints").mkdir(parents=True)
    shutil.copyfile(tiny_sd1_ckpt, root / "models" / "checkpoints" / "tiny.safetensors")
    model = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)[0]
    write_unet_lora(root / "models" / "loras" / "a.safetensors", model, seed=1)
    return Environment.rooted_at(root), model


def test_create_hook_lora_appends_a_lora_hook_to_a_clone_of_the_previous_hooks(files, in_node):
    env, _ = files
    prev = group()
    with in_node("CreateHookLora", env=env):
        (hooks,) = create_hook_lora_node("a.safetensors", 0.7, 0.4, prev)
        (model_only,) = create_hook_lora_model_only("a.safetensors", 0.7)
    assert len(prev) == 1 and hooks is not prev and len(hooks) == 2
    assert hooks.hooks[0] == prev.hooks[0] and hooks.hooks[0] is not prev.hooks[0]  # a clone, same ref
    new = hooks.hooks[1]
    assert (new.strength_model, new.strength_clip, new.lora_name) == (0.7, 0.4, "a.safetensors")
    assert new.lora and all(isinstance(t, torch.Tensor) for t in new.lora.values())
    assert len(model_only) == 1 and model_only.hooks[0].strength_clip == 0.0


def test_create_hook_lora_at_zero_strengths_hands_the_previous_hooks_through(files, in_node):
    env, _ = files
    prev = group()
    with in_node("CreateHookLora", env=env):
        assert create_hook_lora_node("missing.safetensors", 0.0, 0.0, prev)[0] is prev
        (empty,) = create_hook_lora_node("missing.safetensors", 0.0, 0.0)
        assert isinstance(empty, HookGroup) and len(empty) == 0
        with pytest.raises(NodeInputError, match="lora_name"):
            create_hook_lora_node("missing.safetensors", 1.0, 0.0)
        with pytest.raises(NodeInputError, match="prev_hooks"):
            create_hook_lora_node("a.safetensors", 1.0, 0.0, "not hooks")


def test_create_hook_model_as_lora_holds_the_checkpoints_weights(files, in_node):
    env, model = files
    with in_node("CreateHookModelAsLora", env=env):
        (hooks,) = create_hook_model_as_lora_node("tiny.safetensors", 0.5, 0.25)
        (model_only,) = create_hook_model_as_lora_model_only("tiny.safetensors", 0.5)
    (hook,) = hooks.hooks
    assert hook.is_model_as_lora and (hook.strength_model, hook.strength_clip) == (0.5, 0.25)
    assert set(hook.weights_model) == set(model.model_state_dict())
    assert any(k.startswith("clip_l.") for k in hook.weights_clip)
    assert model_only.hooks[0].strength_clip == 0.0


# --- scheduling ---

def test_keyframe_nodes_build_sorted_groups_without_changing_their_input():
    (kf1,) = create_hook_keyframe(0.5, 0.6)
    (kf2,) = create_hook_keyframe(1.5, 0.2, kf1)
    assert len(kf1) == 1 and [(k.strength, k.start_percent, k.guarantee_steps) for k in kf2.keyframes] == [
        (1.5, 0.2, 1), (0.5, 0.6, 1)]
    (interp,) = create_hook_keyframes_interpolated(1.0, 0.0, "linear", 0.0, 1.0, 5, False, kf1)
    assert [k.strength for k in interp.keyframes if k not in kf1.keyframes] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert [k.guarantee_steps for k in interp.keyframes if k not in kf1.keyframes] == [1, 0, 0, 0, 0]
    (floats,) = create_hook_keyframes_from_floats([0.2, 0.4, 0.8], 0.0, 0.5)
    assert [k.strength for k in floats.keyframes] == pytest.approx([0.2, 0.4, 0.8])
    assert [k.start_percent for k in floats.keyframes] == [0.0, 0.25, 0.5]
    (single,) = create_hook_keyframes_from_floats(0.3, 0.1, 0.9)
    assert [(k.strength, k.start_percent) for k in single.keyframes] == [(0.3, pytest.approx(0.1))]
    with pytest.raises(NodeInputError, match="floats_strength"):
        create_hook_keyframes_from_floats("abc", 0.0, 1.0)
    with pytest.raises(NodeInputError, match="interpolation"):
        create_hook_keyframes_interpolated(1.0, 0.0, "cubic", 0.0, 1.0, 5)


def test_set_hook_keyframes_gives_all_hooks_of_a_clone_one_new_keyframe_group():
    hooks = group(2)
    kf = HookKeyframeGroup([HookKeyframe(0.5, 0.3)])
    (out,) = set_hook_keyframes(hooks, kf)
    assert out is not hooks and all(h.hook_keyframe.is_empty() for h in hooks.hooks)
    first, second = (h.hook_keyframe for h in out.hooks)
    assert first is second and first is not kf and first.keyframes == kf.keyframes
    assert set_hook_keyframes(hooks, None)[0] is hooks
    with pytest.raises(NodeInputError, match="hooks"):
        set_hook_keyframes(None)


# --- combining ---

def test_combine_hooks_keeps_one_hook_per_ref_in_order():
    a, b = group(), group(2)
    assert combine_hooks_2() == (None,)
    assert combine_hooks_2(None, a)[0] is a  # one group: itself
    (both,) = combine_hooks_4(a, None, b, a)
    assert [h.hook_ref for h in both.hooks] == [h.hook_ref for h in a.hooks + b.hooks]
    assert len(a) == 1 and len(b) == 2
    (eight,) = combine_hooks_8(*([b] * 8))
    assert len(eight) == 2
    with pytest.raises(NodeInputError, match="hooks_B"):
        combine_hooks_2(a, 3)


# --- conditioning ---

def test_conditioning_set_properties_writes_comfyuis_keys():
    hooks, mask = group(), torch.ones(4, 4)
    source = cond(1.0, keep=True)
    (out,) = conditioning_set_properties(source, 0.6, "mask bounds", mask, hooks, (0.2, 0.8))
    options = out[0][1]
    assert options["hooks"] is hooks and options["keep"] is True
    assert options["mask"].shape == (1, 4, 4) and options["mask_strength"] == 0.6
    assert options["set_area_to_bounds"] is True
    assert (options["start_percent"], options["end_percent"]) == (0.2, 0.8)
    assert source[0][1] == {"keep": True} and out[0][0] is source[0][0]  # the input is unchanged
    (plain,) = conditioning_set_properties(source, 0.6, "default")
    assert plain[0][1] == {"keep": True}  # strength only weights a mask


def test_hooks_are_appended_to_hooks_entries_already_carry():
    first, second = group(), group()
    (pos, neg) = pair_conditioning_set_properties(cond(hooks=first), cond(hooks=first), 1.0, "default", None, second)
    combined = pos[0][1]["hooks"]
    assert combined is neg[0][1]["hooks"]  # one new group for one pair of groups
    assert [h.hook_ref for h in combined.hooks] == [first.hooks[0].hook_ref, second.hooks[0].hook_ref]
    (p2, n2) = pair_conditioning_set_properties(cond(), cond(), 1.0, "default", None, second)
    assert p2[0][1]["hooks"] is second and n2[0][1]["hooks"] is second


def test_the_combine_nodes_append_the_new_entries():
    a, b, c, d = cond(1.0), cond(2.0), cond(3.0), cond(4.0)
    hooks = group()
    (one,) = conditioning_set_properties_and_combine(a, b, 1.0, "default", None, hooks, None)
    assert len(one) == 2 and one[0] is a[0] and "hooks" not in one[0][1] and one[1][1]["hooks"] is hooks
    pos, neg = pair_conditioning_set_properties_and_combine(a, b, c, d, 1.0, "default", timesteps=(0.0, 0.5))
    assert [e[0][0, 0, 0].item() for e in pos] == [1.0, 3.0] and [e[0][0, 0, 0].item() for e in neg] == [2.0, 4.0]
    assert pos[1][1]["end_percent"] == 0.5 and "end_percent" not in pos[0][1]
    pos, neg = pair_conditioning_combine(a, b, c, d)
    assert pos == a + c and neg == b + d


def test_default_nodes_mark_the_new_entries_default():
    a, b = cond(1.0), cond(2.0)
    hooks = group()
    (out,) = conditioning_set_default_combine(a, b, hooks)
    assert "default" not in out[0][1] and out[1][1] == {"default": True, "hooks": hooks}
    pos, neg = pair_conditioning_set_default_combine(a, b, b, a)
    assert pos[1][1] == {"default": True} and neg[1][1] == {"default": True}
    assert "default" not in a[0][1] and "default" not in b[0][1]


def test_timesteps_range_and_its_errors():
    assert conditioning_timesteps_range(0.25, 0.75) == ((0.25, 0.75), (0.0, 0.25), (0.75, 1.0))
    with pytest.raises(NodeInputError, match="timesteps"):
        conditioning_set_properties(cond(), 1.0, "default", timesteps="early")
    with pytest.raises(NodeInputError, match="set_cond_area"):
        conditioning_set_properties(cond(), 1.0, "everywhere")
    with pytest.raises(NodeInputError, match="cond_NEW"):
        conditioning_set_properties("text", 1.0, "default")


def test_set_clip_hooks_without_hooks_and_with_a_foreign_clip():
    class Foreign:
        def tokenize(self, text): ...
        def encode_from_tokens(self, tokens): ...

    foreign = Foreign()
    assert set_clip_hooks(foreign, True, False)[0] is foreign
    with pytest.raises(NodeInputError, match="clip"):
        set_clip_hooks(foreign, True, False, group())


# --- a workflow ---

def workflow(hooked: bool) -> dict:
    clip = ["11", 0] if hooked else ["4", 1]
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
        "10": {"class_type": "CreateHookLora", "inputs": {"lora_name": "a.safetensors", "strength_model": 1.0,
                                                          "strength_clip": 1.0}},
        "11": {"class_type": "SetClipHooks", "inputs": {"clip": ["4", 1], "apply_to_conds": True,
                                                        "schedule_clip": False, "hooks": ["10", 0]}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a lighthouse", "clip": clip}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": 1, "steps": 2, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "9": {"class_type": "SaveLatent", "inputs": {"samples": ["3", 0], "filename_prefix": "hook" if hooked else "plain"}},
    }


async def test_a_hooked_clip_workflow_samples_with_the_hook_on_its_conds(files):
    from graph.executor import Executor
    from graph.validation import validate_prompt

    env, _ = files
    env.ensure_dirs()
    registry = Registry()
    register_builtin_nodes(registry)
    executor = Executor(registry, env=env)
    for hooked in (False, True):
        prompt = workflow(hooked)
        checked = await validate_prompt(prompt, registry, env=env)
        assert checked.ok, checked.node_errors
        out = await executor.execute(prompt, f"p{hooked}", outputs=checked.outputs)
        assert out.status == "success", out.error
    from safetensors.torch import load_file

    plain = load_file(str(next(env.output_dir.glob("plain*.latent"))))["latent_tensor"]
    hooked_latent = load_file(str(next(env.output_dir.glob("hook*.latent"))))["latent_tensor"]
    assert plain.shape == hooked_latent.shape and not torch.equal(plain, hooked_latent)
