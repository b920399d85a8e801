"""Qwen-Image's text encoder through ComfyUI's loaders: a tiny Qwen2.5-VL file with ComfyUI's key
names (bf16, as `qwen_2.5_vl_7b.safetensors`: `model.*` and `visual.*`) loaded by `CLIPLoader` type
"qwen_image" and encoded by `CLIPTextEncode` gives ComfyUI's conditioning: the chat-templated
prompt's final normed states with the system prompt and `<|im_start|>user\\n` dropped, `[1, T', width]`,
`pooled_output` None and no attention mask (it would mask nothing); the same numbers as transformers'
Qwen2.5-VL on the same weights and ids. Also ComfyUI's templates, placeholders and token dropping rules."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.qwen_image.clip import (
    LLAMA_TEMPLATE,
    LLAMA_TEMPLATE_IMAGES,
    QWEN_IMAGE_TEXT_ENCODERS,
    QwenImagePromptError,
    QwenImageTEModel,
    QwenImageTokenizer,
    ensure_image_placeholders,
    find_template_end,
)
from comfy_core.split.text_encoder_files import ClipFilesError, load_text_encoders
from comfy_core.text_encoders.qwen25vl import Qwen25VLTextEncoder
from graph.context import NodeContext, reset_current, set_current
from nodes.conditioning import clip_text_encode
from nodes.environment import Environment
from nodes.loaders import clip_loader
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen25vl_files import reference_model, tiny_qwen25vl_state_dict, write_qwen25vl_file

PROMPT = "a photo of a cat (sleeping:1.2), 4k"
FILE = "qwen_2.5_vl_7b.safetensors"


@pytest.fixture(scope="module")
def state():
    return tiny_qwen25vl_state_dict(seed=3)


@pytest.fixture(scope="module")
def models(tmp_path_factory, state):
    root = tmp_path_factory.mktemp("qwen_image_te")
    write_qwen25vl_file(root / "models" / "text_encoders" / FILE, state)
    return root


@pytest.fixture(scope="module")
def clip(models):
    return load_text_encoders([models / "models" / "text_encoders" / FILE], "qwen_image")


@pytest.fixture(scope="module")
def reference(state):
    return reference_model({k: v.to(torch.bfloat16) for k, v in state.items()})


@pytest.fixture
def env(models):
    environment = Environment.rooted_at(models, mmap=False)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def _final_states(reference, ids: list[int]) -> torch.Tensor:
    """transformers' Qwen2.5-VL on the bf16-stored weights: the final normed states [1, T, W]."""
    with torch.no_grad():
        return reference(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]


def test_cliploader_qwen_image_builds_comfyuis_classes(clip):
    assert isinstance(clip.cond_stage_model, QwenImageTEModel) and isinstance(clip.tokenizer, QwenImageTokenizer)
    tower = clip.cond_stage_model.qwen25_7b
    assert isinstance(tower, Qwen25VLTextEncoder) and tower.dtype == torch.bfloat16  # the file's dtype, as ComfyUI
    assert clip.cond_stage_model.clip == "qwen25_7b" and clip.tokenizer.clip == "qwen25_7b"
    names = set(clip.cond_stage_model.state_dict())
    assert "qwen25_7b.transformer.model.layers.0.self_attn.k_proj.bias" in names
    assert "qwen25_7b.transformer.visual.blocks.0.attn.qkv.weight" in names
    assert "qwen25_7b.transformer.visual.merger.mlp.2.weight" in names


def test_the_prompt_goes_into_qwen_images_template_with_weights_disabled(clip):
    tokens = clip.tokenize(PROMPT)
    ids = [t for t, _ in tokens["qwen25_7b"][0]]
    assert ids == clip.tokenizer.qwen25_7b.encode(LLAMA_TEMPLATE.format(PROMPT))
    assert {w for _, w in tokens["qwen25_7b"][0]} == {1.0}
    assert "(sleeping:1.2)" in clip.tokenizer.decode(ids)
    custom = clip.tokenize(PROMPT, llama_template="<|im_start|>user\n{}<|im_end|>\n")
    assert [t for t, _ in custom["qwen25_7b"][0]] == clip.tokenizer.qwen25_7b.encode(
        f"<|im_start|>user\n{PROMPT}<|im_end|>\n")
    raw = "<|im_start|>user\nhello<|im_end|>\n"
    assert [t for t, _ in clip.tokenize(raw)["qwen25_7b"][0]] == clip.tokenizer.qwen25_7b.encode(raw)


def test_clip_text_encode_gives_comfyuis_conditioning(clip, env, reference):
    tokens = clip.tokenize(PROMPT)
    ids = [t for t, _ in tokens["qwen25_7b"][0]]
    second = [i for i, t in enumerate(ids) if t == 151644][1]
    assert ids[second + 1:second + 3] == [872, 198]  # "user", "\n"
    ((cond, extra),) = clip_text_encode(PROMPT, clip)[0]
    kept = len(ids) - (second + 3)
    assert cond.shape == (1, kept, 256) and cond.dtype == torch.float32
    assert extra == {"pooled_output": None}  # the attention mask masks nothing: left out, as ComfyUI
    torch.testing.assert_close(cond, _final_states(reference, ids)[:, second + 3:], atol=1e-5, rtol=1e-5)
    prompt_ids = clip.tokenizer.qwen25_7b.encode(PROMPT)
    assert ids[second + 3:second + 3 + len(prompt_ids)] == prompt_ids  # the conditioning starts at the prompt


def test_the_cliploader_node_loads_the_file_from_the_text_encoders_folder(env):
    loaded = clip_loader(FILE, "qwen_image")[0]
    assert isinstance(loaded.cond_stage_model, QwenImageTEModel)
    ((cond, extra),) = clip_text_encode("", loaded)[0]
    # "<|im_end|>", "\n", "<|im_start|>", "assistant", "\n" after the dropped prefix
    assert cond.shape == (1, 5, 256) and "attention_mask" not in extra


def test_template_dropping_rules_are_comfyuis(clip, reference):
    """Without `user\\n` after the second <|im_start|>, the output starts at it; with one
    <|im_start|>, at it; with none, only the last position is kept (ComfyUI's index -1). An
    explicit `template_end` is used as given."""
    model = clip.cond_stage_model
    no_user = clip.tokenize("<|im_start|>system\nx<|im_end|>\n<|im_start|>assistant\nhi")
    ids = [t for t, _ in no_user["qwen25_7b"][0]]
    second = [i for i, t in enumerate(ids) if t == 151644][1]
    assert ids[second + 1] != 872 and find_template_end(no_user["qwen25_7b"][0]) == second
    one_turn = clip.tokenize("<|im_start|>user\nhello there")
    assert find_template_end(one_turn["qwen25_7b"][0]) == 0
    for tokens, start in ((no_user, second), (one_turn, 3)):
        ids = [t for t, _ in tokens["qwen25_7b"][0]]
        cond, pooled, extra = model.encode_token_weights(tokens)
        torch.testing.assert_close(cond, _final_states(reference, ids)[:, start:], atol=1e-5, rtol=1e-5)
        assert pooled is None and extra == {}
    tokens = clip.tokenize("plain words", llama_template="{}")
    ids = [t for t, _ in tokens["qwen25_7b"][0]]
    assert 151644 not in ids and find_template_end(tokens["qwen25_7b"][0]) == -1
    cond, _, _ = model.encode_token_weights(tokens)
    torch.testing.assert_close(cond, _final_states(reference, ids)[:, -1:], atol=1e-5, rtol=1e-5)
    tokens = clip.tokenize(PROMPT)
    cond, _, _ = model.encode_token_weights(tokens, template_end=2)
    assert cond.shape[1] == len(tokens["qwen25_7b"][0]) - 2


def test_a_padded_prompt_keeps_its_cut_attention_mask(clip, reference):
    tokens = clip.tokenize(PROMPT, min_length=60)
    pairs = tokens["qwen25_7b"][0]
    ids = [t for t, _ in pairs]
    assert ids[-1] == 151643 and len(ids) == 60
    cond, _, extra = clip.cond_stage_model.encode_token_weights(tokens)
    second = [i for i, t in enumerate(ids) if t == 151644][1]
    real = ids.index(151643)
    assert extra["attention_mask"].tolist() == [[1] * (real - second - 3) + [0] * (60 - real)]
    assert cond.shape[1] == 60 - second - 3


def test_image_placeholders_follow_comfyuis_rules(clip):
    block = "<|vision_start|><|image_pad|><|vision_end|>"
    assert ensure_image_placeholders("x", 0) == "x"
    assert ensure_image_placeholders(f"a{block}b", 2) == f"a{block}{block}b"
    assert ensure_image_placeholders("<|im_start|>user\nhi", 1) == f"<|im_start|>user\n{block}hi"
    assert ensure_image_placeholders("hi", 2) == f"{block}{block}hi"
    with pytest.raises(QwenImagePromptError, match="2 image placeholders but 1"):
        ensure_image_placeholders(block * 2, 1)
    image = torch.rand(1, 28, 28, 3)
    tokens = clip.tokenize("make it red", images=[image])
    pairs = tokens["qwen25_7b"][0]
    entries = [p[0] for p in pairs if isinstance(p[0], dict)]
    assert len(entries) == 1 and entries[0]["type"] == "image" and entries[0]["data"] is image
    ids = [p[0] for p in pairs if not isinstance(p[0], dict)]
    expected = clip.tokenizer.qwen25_7b.encode(LLAMA_TEMPLATE_IMAGES.format("make it red"))
    assert ids == [t for t in expected if t != 151655]
    with pytest.raises(QwenImagePromptError, match="video or audio"):
        clip.tokenize("x", video=torch.zeros(1))


def test_the_qwen_image_family_declares_the_encoder_set():
    sets = default_registry().encoder_sets()
    assert QWEN_IMAGE_TEXT_ENCODERS in sets and QWEN_IMAGE_TEXT_ENCODERS.clip_types == ("qwen_image",)
    assert default_registry().get("qwen_image").text_encoders is QWEN_IMAGE_TEXT_ENCODERS


def test_a_qwen25_file_under_another_type_is_refused(models):
    with pytest.raises(ClipFilesError, match="Qwen2.5-VL-7B"):
        load_text_encoders([models / "models" / "text_encoders" / FILE], "stable_diffusion")


def test_clip_set_last_layer_picks_the_block_as_comfyui(clip, reference):
    """ComfyUI's SD1ClipModel passes set_clip_options to the tower: -2 is the next-to-last block's
    output without the final norm (layer_norm_hidden_state=False), cut the same way."""
    from nodes.conditioning import clip_set_last_layer

    tokens = clip.tokenize(PROMPT)
    ids = [t for t, _ in tokens["qwen25_7b"][0]]
    start = [i for i, t in enumerate(ids) if t == 151644][1] + 3
    cond = clip_set_last_layer(clip, -2)[0].encode_from_tokens(tokens)
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-2]  # [emb, b0, b1, normed b2]
    torch.testing.assert_close(cond, expected[:, start:], atol=1e-5, rtol=1e-5)


def test_a_single_file_tower_under_comfyuis_prefix_builds_the_same_clip(clip, state):
    from comfy_core.text_encoders.factory import build_clip, detect_text_encoders
    from tests.fixtures.t5_files import header_of

    prefixed = {f"text_encoders.qwen25_7b.transformer.{k}": v.to(torch.bfloat16) for k, v in state.items()}
    configs = detect_text_encoders(header_of(prefixed), [QWEN_IMAGE_TEXT_ENCODERS])
    assert [(c.slot, c.prefix) for c in configs] == [("qwen25_7b", "text_encoders.qwen25_7b.transformer.")]
    built = build_clip(configs, prefixed, torch.float32, spec=QWEN_IMAGE_TEXT_ENCODERS)
    tokens = clip.tokenize(PROMPT)
    assert torch.equal(built.encode_from_tokens(tokens), clip.encode_from_tokens(tokens))
