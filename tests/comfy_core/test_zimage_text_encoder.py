"""Z-Image's text encoder through ComfyUI's loaders: a tiny Qwen3 file with the real key names
(bf16, as ComfyUI's `qwen_3_4b.safetensors`) loaded by `CLIPLoader` type "lumina2" and encoded by
`CLIPTextEncode` gives ComfyUI's conditioning: the chat-templated prompt's states after the
next-to-last block `[1, T, width]`, `pooled_output` None and the `attention_mask` `[1, T]`; the
same numbers as transformers' Qwen3Model on the same weights and ids."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.split.text_encoder_files import ClipFilesError, load_text_encoders
from comfy_core.text_encoders.qwen3 import Qwen3TextEncoder
from comfy_core.families.zimage.clip import ZIMAGE_TEXT_ENCODERS, ZImageTEModel, ZImageTokenizer
from graph.context import NodeContext, reset_current, set_current
from nodes.conditioning import clip_text_encode
from nodes.environment import Environment
from nodes.loaders import clip_loader
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import reference_model, tiny_qwen3_state_dict, write_qwen3_file

PROMPT = "a photo of a cat (sleeping:1.2), 4k"


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3_state_dict(seed=3)


@pytest.fixture(scope="module")
def models(tmp_path_factory, state):
    root = tmp_path_factory.mktemp("zimage_te")
    write_qwen3_file(root / "models" / "text_encoders" / "qwen_3_4b.safetensors", state)
    return root


@pytest.fixture(scope="module")
def clip(models):
    return load_text_encoders([models / "models" / "text_encoders" / "qwen_3_4b.safetensors"], "lumina2")


@pytest.fixture
def env(models):
    environment = Environment.rooted_at(models, mmap=False)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def _expected(state: dict, ids: list[int]) -> torch.Tensor:
    """transformers' Qwen3Model on the bf16-stored weights: the state after block 1 of 3 (ComfyUI's -2)."""
    reference = reference_model({k: v.to(torch.bfloat16) for k, v in state.items()})
    with torch.no_grad():
        return reference(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-2]


def test_cliploader_lumina2_builds_zimages_classes(clip):
    assert isinstance(clip.cond_stage_model, ZImageTEModel) and isinstance(clip.tokenizer, ZImageTokenizer)
    tower = clip.cond_stage_model.qwen3_4b
    assert isinstance(tower, Qwen3TextEncoder) and tower.dtype == torch.bfloat16  # the file's dtype, as ComfyUI
    assert clip.cond_stage_model.clip == "qwen3_4b" and clip.tokenizer.clip == "qwen3_4b"
    names = set(clip.cond_stage_model.state_dict())
    assert "qwen3_4b.transformer.model.layers.0.self_attn.q_norm.weight" in names
    assert "qwen3_4b.transformer.model.embed_tokens.weight" in names


def test_clip_text_encode_gives_comfyuis_conditioning(clip, env, state):
    tokens = clip.tokenize(PROMPT)
    ids = [t for t, _ in tokens["qwen3_4b"][0]]
    assert ids == clip.tokenizer.qwen3_4b.encode(f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n")
    ((cond, extra),) = clip_text_encode(PROMPT, clip)[0]
    assert cond.shape == (1, len(ids), 32) and cond.dtype == torch.float32
    assert set(extra) == {"pooled_output", "attention_mask"} and extra["pooled_output"] is None
    assert extra["attention_mask"].tolist() == [[1] * len(ids)]
    torch.testing.assert_close(cond, _expected(state, ids), atol=1e-5, rtol=1e-5)


def test_the_cliploader_node_loads_the_file_from_the_text_encoders_folder(env):
    loaded = clip_loader("qwen_3_4b.safetensors", "lumina2")[0]
    assert isinstance(loaded.cond_stage_model, ZImageTEModel)
    ((cond, extra),) = clip_text_encode("", loaded)[0]
    # the template alone ("\n\n" is one token)
    assert cond.shape == (1, 8, 32) and extra["attention_mask"].shape == (1, 8)


def test_the_zimage_family_declares_the_encoder_set():
    sets = default_registry().encoder_sets()
    # "ltxv": ComfyUI builds Z-Image's Qwen3-4B encoder for that type too (the llm_qwen3_text_gen template)
    assert ZIMAGE_TEXT_ENCODERS in sets and ZIMAGE_TEXT_ENCODERS.clip_types == ("lumina2", "ltxv")
    assert default_registry().get("zimage").text_encoders is ZIMAGE_TEXT_ENCODERS


def test_a_qwen3_file_under_another_type_is_refused(models):
    with pytest.raises(ClipFilesError, match="Qwen3-4B"):
        load_text_encoders([models / "models" / "text_encoders" / "qwen_3_4b.safetensors"], "stable_diffusion")


def test_clip_set_last_layer_picks_the_qwen3_block_as_comfyui(clip, state):
    """ComfyUI's SD1ClipModel passes set_clip_options to the tower: -1 is the last block's output,
    without the final norm (layer_norm_hidden_state=False)."""
    from nodes.conditioning import clip_set_last_layer

    tokens = clip.tokenize(PROMPT)
    last = clip_set_last_layer(clip, -1)[0].encode_from_tokens(tokens)
    ids = [t for t, _ in tokens["qwen3_4b"][0]]
    reference = reference_model({k: v.to(torch.bfloat16) for k, v in state.items()})
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids])).last_hidden_state  # the final norm of block 2's output
        torch.testing.assert_close(reference.norm(last), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(last, clip.encode_from_tokens(tokens))


def test_a_single_file_tower_under_comfyuis_prefix_builds_the_same_clip(clip, state):
    """The checkpoint path (detect_text_encoders + build_clip) finds the tower under
    `text_encoders.qwen3_4b.transformer.` (ComfyUI's save layout) and encodes as CLIPLoader's."""
    from comfy_core.text_encoders.factory import build_clip, detect_text_encoders
    from tests.fixtures.t5_files import header_of

    prefixed = {f"text_encoders.qwen3_4b.transformer.{k}": v.to(torch.bfloat16) for k, v in state.items()}
    configs = detect_text_encoders(header_of(prefixed), [ZIMAGE_TEXT_ENCODERS])
    assert [(c.slot, c.prefix) for c in configs] == [("qwen3_4b", "text_encoders.qwen3_4b.transformer.")]
    built = build_clip(configs, prefixed, spec=ZIMAGE_TEXT_ENCODERS)
    tokens = built.tokenize(PROMPT)
    assert tokens == clip.tokenize(PROMPT)
    torch.testing.assert_close(built.encode_from_tokens(tokens), clip.encode_from_tokens(tokens), atol=0, rtol=0)


def test_scheduled_clip_hooks_keep_the_attention_mask(clip):
    """ComfyUI's scheduled encode keeps every key of `encode_from_tokens(return_dict=True)`."""
    from comfy_core.hooks import HookKeyframe, HookKeyframeGroup, create_hook_lora
    from comfy_core.hooks.clip import set_clip_hooks

    hooks = create_hook_lora({}, 1.0, 0.5)
    hooks.set_keyframes_on_hooks(HookKeyframeGroup([HookKeyframe(1.0, 0.0), HookKeyframe(0.5, 0.5)]))
    hooked = set_clip_hooks(clip, hooks, apply_to_conds=False, schedule_clip=True)
    conds = hooked.encode_from_tokens_scheduled(hooked.tokenize(PROMPT))
    assert len(conds) == 2
    for cond, extra in conds:
        assert extra["pooled_output"] is None and extra["attention_mask"].shape == (1, cond.shape[1])
