"""SetClipHooks' CLIP (comfy_core/hooks/clip.py): it encodes as the CLIP with the hooks' LoRA
loaded, at the hook's CLIP strength (times the keyframe in force with `schedule_clip`, one encoding
per range of the schedule, as ComfyUI's `encode_from_tokens_scheduled`), and its encodings carry
the hooks when `apply_to_conds`."""
from __future__ import annotations

import torch

from comfy_core.hooks import HookKeyframe, HookKeyframeGroup, create_hook_lora, create_hook_model_as_lora
from comfy_core.hooks import patch_weights_from_model
from comfy_core.hooks.clip import set_clip_hooks
from comfy_core.lora import load_lora_for_models
from nodes.conditioning import clip_text_encode

PROMPT = "a red cube"


def lora_clip(sd1, strength):
    return load_lora_for_models(None, sd1.clip, sd1.clip_lora, 0.0, strength)[1]


def encode(clip, text=PROMPT):
    return clip_text_encode(text, clip)[0]


def keyframed(hooks, *keyframes):
    hooks = hooks.clone()
    hooks.set_keyframes_on_hooks(HookKeyframeGroup(keyframes))
    return hooks


def assert_same_encoding(got, expected):
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1]["pooled_output"], expected[1]["pooled_output"])


def test_set_clip_hooks_encodes_as_the_clip_with_the_lora_loaded(sd1):
    hooks = create_hook_lora(sd1.clip_lora, 1.0, 0.8)
    clip = set_clip_hooks(sd1.clip, hooks, apply_to_conds=True, schedule_clip=False)
    (got,) = encode(clip)
    (expected,) = encode(lora_clip(sd1, 0.8))
    assert_same_encoding(got, expected)
    assert got[1]["hooks"] is hooks
    assert not torch.equal(got[0], encode(sd1.clip)[0][0])
    assert "hooks" not in encode(sd1.clip)[0][1]  # the input CLIP is unchanged


def test_without_schedule_clip_the_keyframes_are_ignored(sd1):
    hooks = keyframed(create_hook_lora(sd1.clip_lora, 1.0, 0.8), HookKeyframe(0.5, 0.0))
    (got,) = encode(set_clip_hooks(sd1.clip, hooks, True, False))
    assert_same_encoding(got, encode(lora_clip(sd1, 0.8))[0])
    assert got[1]["hooks"] is hooks  # the conds keep the keyframes for sampling


def test_with_schedule_clip_each_keyframe_range_is_encoded_at_its_strength(sd1):
    hooks = keyframed(create_hook_lora(sd1.clip_lora, 1.0, 0.8), HookKeyframe(1.0, 0.0), HookKeyframe(0.5, 0.5))
    clip = set_clip_hooks(sd1.clip, hooks, True, True)
    first, second = encode(clip)
    assert_same_encoding(first, encode(lora_clip(sd1, 0.8))[0])
    assert_same_encoding(second, encode(lora_clip(sd1, 0.4))[0])
    assert (first[1]["clip_start_percent"], first[1]["clip_end_percent"]) == (0.0, 0.5)
    assert (second[1]["clip_start_percent"], second[1]["clip_end_percent"]) == (0.5, 1.0)
    assert first[1]["hooks"] is hooks and second[1]["hooks"] is hooks
    # Ranges outside the entry's own percent range are not encoded.
    only = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT), add_dict={"start_percent": 0.6})
    assert len(only) == 1 and only[0][1]["clip_start_percent"] == 0.5 and only[0][1]["start_percent"] == 0.6
    # Any other way of encoding sees the first keyframe.
    cond, _ = clip.encode_from_tokens(clip.tokenize(PROMPT), return_pooled=True)
    assert torch.equal(cond, first[0])


def test_apply_to_conds_off_leaves_the_conds_without_hooks(sd1):
    (got,) = encode(set_clip_hooks(sd1.clip, create_hook_lora(sd1.clip_lora, 1.0, 0.8), False, False))
    assert "hooks" not in got[1]
    assert_same_encoding(got, encode(lora_clip(sd1, 0.8))[0])


def test_a_second_set_clip_hooks_replaces_the_first_and_a_later_lora_adds(sd1):
    first = set_clip_hooks(sd1.clip, create_hook_lora(sd1.clip_lora, 1.0, 0.3), True, False)
    hooks = create_hook_lora(sd1.clip_lora, 1.0, 0.8)
    second = set_clip_hooks(first, hooks, True, False)
    assert_same_encoding(encode(second)[0], encode(lora_clip(sd1, 0.8))[0])
    assert encode(second)[0][1]["hooks"] is hooks
    later = load_lora_for_models(None, second, sd1.clip_lora, 0.0, 0.5)[1]
    expected = load_lora_for_models(None, lora_clip(sd1, 0.8), sd1.clip_lora, 0.0, 0.5)[1]
    assert_same_encoding(encode(later)[0], encode(expected)[0])
    assert encode(later)[0][1]["hooks"] is hooks  # clones keep the hooks


def test_hooked_clips_have_their_own_cache_signatures(sd1):
    hooks = create_hook_lora(sd1.clip_lora, 1.0, 0.8)
    to_conds = set_clip_hooks(sd1.clip, hooks, True, False)
    not_to_conds = set_clip_hooks(sd1.clip, hooks, False, False)
    signatures = {sd1.clip.cache_signature(), to_conds.cache_signature(), not_to_conds.cache_signature()}
    assert None not in signatures and len(signatures) == 3
    assert to_conds.clone().cache_signature() == to_conds.cache_signature()


def test_no_hooks_returns_the_clip_itself(sd1):
    assert set_clip_hooks(sd1.clip, None, True, True) is sd1.clip


def test_a_model_as_lora_hook_patches_the_clip_by_the_other_checkpoints_difference(sd1, tmp_path):
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    other = load_checkpoint(write_tiny_checkpoint(tmp_path / "other.safetensors", "sd1", seed=2), output_vae=False)[1]
    weights = patch_weights_from_model(other.patcher.model_state_dict())
    clip = set_clip_hooks(sd1.clip, create_hook_model_as_lora(None, weights, 1.0, 0.5), True, False)
    originals = sd1.clip.patcher.model_state_dict()
    expected = sd1.clip.clone()
    expected.add_patches({k: ("diff", (w.float() - originals[k].float(),)) for k, w in weights.items()}, 0.5)
    assert_same_encoding(encode(clip)[0], encode(expected)[0])
