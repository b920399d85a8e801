"""Patcher signatures as the executor's value keys (`cache_signature()`): equal exactly when the
patched models are interchangeable, stable across re-reading the same LoRA file, never shared by
a later object that happens to get a dead object's id."""
from __future__ import annotations

import os

import torch
from safetensors.torch import save_file
from torch import nn

from comfy_core.lora import load_lora_for_models
from comfy_core.patching import ModelPatcher
from comfy_core.patching.signature import fingerprint, identity_token
from graph.value_keys import element_token
from nodes.patching import load_lora_file
from tests.fixtures.clips import sd1  # noqa: F401 -- fixture


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.diffusion_model = nn.Module()
        self.diffusion_model.proj = nn.Linear(4, 4, bias=False)


KEY = "diffusion_model.proj.weight"


def make_lora(path, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    save_file({"lora_unet_proj.lora_up.weight": torch.randn(4, 2, generator=g),
               "lora_unet_proj.lora_down.weight": torch.randn(2, 4, generator=g)}, str(path))


def with_lora(model: ModelPatcher, path, strength: float = 1.0) -> ModelPatcher:
    stat = os.stat(path)
    source = ("lora-file", str(path), stat.st_mtime_ns, stat.st_size)
    patched, _, report = load_lora_for_models(model, None, load_lora_file(path), strength, 0.0,
                                              path.name, source)
    assert report.model_keys == 1
    return patched


def test_identity_tokens_are_never_reused_for_a_new_object():
    seen = {}
    tokens = []
    for _ in range(200):
        obj = torch.zeros(1)
        tokens.append(identity_token(obj))
        seen.setdefault(id(obj), 0)
        del obj  # freed at once (reference counting): its id is free for the next tensor
    # CPython reused the same few addresses; tokens were never reused.
    assert len(seen) < len(tokens) and len(set(tokens)) == len(tokens)
    kept = torch.zeros(1)
    assert identity_token(kept) == identity_token(kept)


def test_fingerprint_marks_objects_without_lasting_identity_unstable():
    class Slotted:
        __slots__ = ("x",)

    assert fingerprint({"a": [1, 2.0, "s", None]})[1]
    assert fingerprint(torch.zeros(1))[1]
    assert not fingerprint([Slotted()])[1]


def test_clones_share_a_signature_until_their_patches_differ():
    base = ModelPatcher(Net())
    a, b = base.clone(), base.clone()
    assert a.cache_signature() == b.cache_signature() == base.cache_signature()
    delta = torch.ones(4, 4)
    a.add_patches({KEY: delta})
    assert a.cache_signature() != b.cache_signature()
    b.add_patches({KEY: delta})  # the very same patch data: interchangeable
    assert a.cache_signature() == b.cache_signature()
    c = base.clone()
    c.add_patches({KEY: torch.ones(4, 4)})  # equal content, another tensor: identity differs
    assert c.cache_signature() != a.cache_signature()
    for change in (lambda p: p.set_attention_backend("naive"), lambda p: p.set_option("x", 1),
                   lambda p: p.add_object_patch("diffusion_model.proj", nn.Identity()),
                   lambda p: setattr(p, "pack_state", {"scale": 2})):
        changed = base.clone()
        change(changed)
        assert changed.cache_signature() != base.cache_signature()
    assert ModelPatcher(Net()).cache_signature() != base.cache_signature()


def test_a_patch_without_lasting_identity_gives_no_signature():
    class Slotted:
        __slots__ = ("t",)

    clone = ModelPatcher(Net()).clone()
    clone.set_option("hook", Slotted())
    assert clone.cache_signature() is None and element_token(clone) is None


def test_the_same_lora_file_read_twice_gives_the_same_signature(tmp_path):
    path = tmp_path / "style.safetensors"
    make_lora(path, seed=1)
    base = ModelPatcher(Net())
    first, second = with_lora(base, path), with_lora(base, path)
    assert first.patches[KEY][0].data is not second.patches[KEY][0].data
    assert first.cache_signature() == second.cache_signature()
    assert with_lora(base, path, strength=0.5).cache_signature() != first.cache_signature()
    # The patched weights of the first are reused for the second: same content by construction.
    with first.applied() as module:
        w1 = module.diffusion_model.proj.weight.detach().clone()
    with second.applied() as module:
        assert torch.equal(module.diffusion_model.proj.weight, w1)
    assert base.patch_stats.weights_from_cache == 1


def test_a_rewritten_lora_file_gives_a_new_signature(tmp_path):
    path = tmp_path / "style.safetensors"
    make_lora(path, seed=1)
    base = ModelPatcher(Net())
    before = with_lora(base, path)
    make_lora(path, seed=2)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    after = with_lora(base, path)
    assert after.cache_signature() != before.cache_signature()
    with before.applied() as module:
        w_before = module.diffusion_model.proj.weight.detach().clone()
    with after.applied() as module:
        assert not torch.equal(module.diffusion_model.proj.weight, w_before)


def test_clip_signature_follows_clip_skip_lora_and_embedding_content(sd1):
    from comfy_core.prompt.conditioning import with_embedding
    from comfy_core.prompt.embedding import embedding_from_data

    clip = sd1
    assert clip.clone().cache_signature() == clip.cache_signature() is not None
    skipped = clip.clone()
    skipped.clip_layer(-2)
    assert skipped.cache_signature() != clip.cache_signature()
    patched = clip.clone()
    patched.add_patches({"clip_l.transformer.text_model.final_layer_norm.weight": torch.ones(1)})
    assert patched.cache_signature() != clip.cache_signature()
    width = sum(int(getattr(clip.patcher.model, s).width) for s in clip.patcher.encoder_slots())
    vectors = torch.randn(2, width, generator=torch.Generator().manual_seed(0))
    # The same embedding read twice (equal content, other tensors) gives equal signatures.
    first = with_embedding(clip, embedding_from_data({"emb_params": vectors.clone()}, "style"))
    again = with_embedding(clip, embedding_from_data({"emb_params": vectors.clone()}, "style"))
    other = with_embedding(clip, embedding_from_data({"emb_params": vectors + 1}, "style"))
    assert first.cache_signature() == again.cache_signature() != clip.cache_signature()
    assert other.cache_signature() != first.cache_signature()
