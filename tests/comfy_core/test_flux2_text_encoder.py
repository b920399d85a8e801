"""FLUX.2 Klein's text encoder through ComfyUI's loaders: a tiny 29-block Qwen3 file with the real
key names loaded by `CLIPLoader` type "flux2" and encoded by `CLIPTextEncode` gives ComfyUI's
conditioning: the chat-templated prompt (empty thinking block) padded to 512 tokens, blocks 9 / 18 /
27 stacked per token `[1, 512, 3 * width]`, the attention mask, no pooled output; the same numbers
as transformers' Qwen3Model on the same weights and ids."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.flux2.clip import Flux2TEModel, KleinTokenizer
from comfy_core.split.text_encoder_files import load_text_encoders
from graph.context import NodeContext, reset_current, set_current
from nodes.conditioning import clip_text_encode
from nodes.environment import Environment
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3_files import reference_model, tiny_qwen3_state_dict, write_qwen3_file

PROMPT = "a red fox in the snow"
LAYERS = 29  # block 27 is not the last, so transformers gives its output before the final norm


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3_state_dict(seed=5, num_hidden_layers=LAYERS)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, state):
    path = write_qwen3_file(tmp_path_factory.mktemp("klein_te") / "qwen_3_4b.safetensors", state,
                            dtype=torch.float32)
    return load_text_encoders([path], "flux2")


@pytest.fixture
def env(tmp_path):
    token = set_current(NodeContext("p", "1", "1", None, Environment.rooted_at(tmp_path, mmap=False)))
    yield
    reset_current(token)


def test_cliploader_flux2_builds_kleins_classes(clip):
    assert isinstance(clip.cond_stage_model, Flux2TEModel) and isinstance(clip.tokenizer, KleinTokenizer)


def test_tokens_are_the_chat_template_padded_to_512(clip):
    tokens = clip.tokenize(PROMPT)["qwen3_4b"]
    ids = [t for t, _ in tokens[0]]
    text = f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    expected = clip.tokenizer.qwen3_4b.encode(text)
    assert ids[:len(expected)] == expected and len(ids) == 512
    assert set(ids[len(expected):]) == {151643}
    system = clip.tokenizer.tokenize_with_weights(PROMPT, system_prompt="be brief")["qwen3_4b"][0]
    assert [t for t, _ in system][:3] == clip.tokenizer.qwen3_4b.encode("<|im_start|>system\n")


def test_clip_text_encode_stacks_blocks_9_18_27(clip, env, state):
    tokens = clip.tokenize(PROMPT)
    ids = [t for t, _ in tokens["qwen3_4b"][0]]
    ((cond, extra),) = clip_text_encode(PROMPT, clip)[0]
    assert cond.shape == (1, 512, 96) and extra["pooled_output"] is None
    mask = extra["attention_mask"]
    real = int(mask.sum())
    assert mask[0, :real].all() and not mask[0, real:].any()
    reference = reference_model(state, num_hidden_layers=LAYERS)
    with torch.no_grad():
        hidden = reference(input_ids=torch.tensor([ids]), attention_mask=mask,
                           output_hidden_states=True).hidden_states
    # ComfyUI's intermediate layer i is the input of block i: transformers' hidden_states[i].
    expected = torch.cat([hidden[9], hidden[18], hidden[27]], dim=-1)
    torch.testing.assert_close(cond[:, :real], expected[:, :real], atol=1e-5, rtol=1e-5)
