"""QuadrupleCLIPLoader and CLIPTextEncodeHiDream: object_info entries (CLIPTextEncodeHiDream 0.3.64's,
QuadrupleCLIPLoader today's, with its `device`), the four files in any order forming HiDream's
encoder set, each encoder getting its own text, typed errors."""
from __future__ import annotations

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.hidream_nodes import clip_text_encode_hidream, quadruple_clip_loader
from tests.fixtures.object_info_parity import comfyui_object_info, differences


def test_object_info_is_comfyuis(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    # QuadrupleCLIPLoader follows today's declaration (tests/data/object_info_2026/QuadrupleCLIPLoader.json:
    # "Load CLIP (Quadruple)", model/loaders, the optional `device`), CLIPTextEncodeHiDream still 0.3.64's.
    assert differences({"CLIPTextEncodeHiDream": ours["CLIPTextEncodeHiDream"]}, theirs) == {}
    # ComfyUI 0.3.64's whole entry (a V3 node) is contained in ours, which adds today's V3 fields.
    name = "CLIPTextEncodeHiDream"
    assert {k: v for k, v in ours[name].items() if k in theirs[name]} == theirs[name], name
    assert ours["QuadrupleCLIPLoader"]["search_aliases"] is None and ours["CLIPTextEncodeHiDream"]["api_node"] is False
    loader, old = ours["QuadrupleCLIPLoader"], theirs["QuadrupleCLIPLoader"]
    assert loader["input"]["required"] == old["input"]["required"]   # the four files as 0.3.64's
    assert loader["input_order"]["optional"] == ["device"] and loader["category"] == "model/loaders"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    pytest.importorskip("llama_models")
    from tests.fixtures.hidream_files import write_hidream_text_encoders

    root = tmp_path_factory.mktemp("hidream_nodes")
    write_hidream_text_encoders(root / "models")
    return root


@pytest.fixture
def env(root):
    environment = Environment.rooted_at(root, mmap=False)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_quadruple_loader_and_per_encoder_texts(env):
    names = ["t5xxl.safetensors", "llama_3.1_8b_instruct.safetensors", "clip_l.safetensors", "clip_g.safetensors"]
    (clip,) = quadruple_clip_loader(*names)
    (same,) = clip_text_encode_hidream(clip, "a cat", "a cat", "a cat", "a cat")
    (mixed,) = clip_text_encode_hidream(clip, "a cat", "a cat", "a cat", "a dog")
    [[cond, extra]], [[cond2, extra2]] = same, mixed
    assert cond.shape == (1, 128, 64) and extra["conditioning_llama3"].shape == (1, 4, 128, 32)
    assert torch.equal(cond, cond2) and torch.equal(extra["pooled_output"], extra2["pooled_output"])
    assert not torch.equal(extra["conditioning_llama3"], extra2["conditioning_llama3"])  # only Llama's text changed
    (pooled_only,) = clip_text_encode_hidream(clip, "a dog", "a cat", "a cat", "a cat")
    assert torch.equal(pooled_only[0][0], cond)
    assert not torch.equal(pooled_only[0][1]["pooled_output"], extra["pooled_output"])


def test_bad_inputs_are_input_errors(env, tmp_path):
    with pytest.raises(NodeInputError, match="clip_name3"):
        quadruple_clip_loader("clip_l.safetensors", "clip_g.safetensors", "missing.safetensors",
                              "llama_3.1_8b_instruct.safetensors")
    with pytest.raises(NodeInputError, match="clip"):
        clip_text_encode_hidream(object(), "a", "b", "c", "d")
