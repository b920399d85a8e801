"""ModelAttentionBackend (today's ComfyUI, nodes_model_advanced.py): the backend is an option of the
returned clone that reaches the attention calls of its runs; the input MODEL keeps its own."""
from __future__ import annotations

import dataclasses

import pytest

from nodes.errors import NodeInputError
from nodes.model_attention_backend import _validate, model_attention_backend
from tests.nodes.model_patch_helpers import sample, snapshot


@pytest.fixture
def kernel_calls(monkeypatch):
    """The backend name of every attention kernel call (the table the dispatcher reads, spied)."""
    import comfy_core.attention as attention

    calls: list[str] = []

    def spied(backend):
        def kernel(*args, **kwargs):
            calls.append(backend.name)
            return backend.kernel(*args, **kwargs)
        return dataclasses.replace(backend, kernel=kernel)

    monkeypatch.setattr(attention, "BACKENDS", {name: spied(b) for name, b in attention.BACKENDS.items()})
    return calls


def test_the_chosen_backend_reaches_the_attention_calls_of_the_clone_only(sd1_with_prompts, kernel_calls):
    base = sd1_with_prompts.model.clone()
    base.set_attention_backend("naive")
    before = snapshot(base)
    patched = model_attention_backend(base, "pytorch attention")[0]
    assert patched is not base and snapshot(base) == before

    sample(patched, sd1_with_prompts, steps=1, size=8)
    assert kernel_calls and set(kernel_calls) == {"sdpa"}
    kernel_calls.clear()
    sample(base, sd1_with_prompts, steps=1, size=8)
    assert kernel_calls and set(kernel_calls) == {"naive"}


def test_unknown_or_unavailable_backends_are_clear_errors(sd1_with_prompts):
    model = sd1_with_prompts.model
    with pytest.raises(NodeInputError, match="comfy-kitchen"):
        model_attention_backend(model, "comfy kitchen attention")
    with pytest.raises(NodeInputError, match="unknown attention backend 'flash'"):
        model_attention_backend(model, "flash")
    assert _validate("pytorch attention") is True
    assert "comfy-kitchen" in _validate("comfy kitchen attention")
    assert "unknown" in _validate("sage attention")
    with pytest.raises(NodeInputError, match="model"):
        model_attention_backend("not a model", "pytorch attention")


async def test_a_prompt_naming_a_backend_this_engine_cannot_run_fails_validation(tmp_path, tiny_sd1_ckpt):
    import shutil

    from graph.registry import Registry
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    env = Environment.rooted_at(tmp_path)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")

    def prompt(attention: str) -> dict:
        return {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
                "2": {"class_type": "ModelAttentionBackend", "inputs": {"model": ["1", 0], "attention": attention}},
                "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}}}

    assert (await validate_prompt(prompt("pytorch attention"), registry, env=env)).ok
    refused = await validate_prompt(prompt("comfy kitchen attention"), registry, env=env)
    assert not refused.ok and "comfy-kitchen" in repr(refused.node_errors)


def test_the_node_replaces_an_attention_override_set_before_it(sd1_with_prompts, kernel_calls):
    # ComfyUI's node writes the same transformer option a pack's attention override lives in.
    seen: list[int] = []

    def pack_override(func, *args, **kwargs):
        seen.append(1)
        return func(*args, **kwargs)

    base = sd1_with_prompts.model.clone()
    base.model_options["transformer_options"]["optimized_attention_override"] = pack_override
    patched = model_attention_backend(base, "pytorch attention")[0]
    assert "optimized_attention_override" not in patched.model_options["transformer_options"]
    assert base.model_options["transformer_options"]["optimized_attention_override"] is pack_override
    sample(patched, sd1_with_prompts, steps=1, size=8)
    assert not seen and set(kernel_calls) == {"sdpa"}
    sample(base, sd1_with_prompts, steps=1, size=8)
    assert seen
