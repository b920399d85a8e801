"""Prompt engines that reach into a CLIP the way smZNodes does (tests/compat/api_packs/prompt_pack):
our CLIP's tokenizers carry ComfyUI's SDTokenizer attributes (`tokenizer`, `tokens_start`,
`_try_get_embedding`, ...), its towers run ComfyUI's `forward(tokens)` through a replaceable
`transformer.get_input_embeddings()` called as `(ids, out_dtype)`, the encoder set calls each
tower's own `encode_token_weights` (so a replacement runs), and `clip.tokenizer` is one object a
pack can patch. Numbers: a replacement computing what ours computes gives our output bit for bit;
its weighting and spliced vectors change the output exactly as it says."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "prompt_pack" / "__init__.py"


@pytest.fixture
def pack(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    """The tiny SD1 checkpoint and a 2-vector embedding in the session's folders; returns the
    imported fixture pack."""
    from safetensors.torch import save_file

    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    for kind in ("checkpoints", "embeddings"):
        (models / kind).mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, models / "checkpoints" / "tiny.safetensors")
    vectors = torch.randn(2, 64, generator=torch.Generator().manual_seed(3))
    save_file({"emb_params": vectors}, str(models / "embeddings" / "tinyemb.safetensors"))
    spec = importlib.util.spec_from_file_location("prompt_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.embedding_vectors = vectors
    yield module
    sys.modules.pop("prompt_pack_under_test", None)


@pytest.fixture
def clip(pack):
    from nodes.loaders import checkpoint_loader_simple

    return checkpoint_loader_simple("tiny.safetensors")[1]


def _encode(text, clip):
    from nodes.conditioning import clip_text_encode

    (cond,) = clip_text_encode(text, clip)
    return cond[0][0], cond[0][1]["pooled_output"]


def test_the_tokenizer_is_one_object_with_comfyuis_sdtokenizer_attributes(clip, tmp_path):
    from comfy_core.text_encoders.encoder import TokenEmbedding

    assert clip.tokenizer is clip.tokenizer  # an embedding lookup is set: still one object
    assert clip.clone().tokenizer is clip.tokenizer  # clones share it, as ComfyUI's
    t = clip.tokenizer.clip_l
    attrs = vars(t)  # smZNodes copies the instance's variables
    for name in ("tokenizer", "start_token", "end_token", "pad_token", "max_length", "min_length",
                 "tokens_start", "tokenizer_adds_end_token", "pad_to_max_length", "max_word_length",
                 "embedding_identifier", "embedding_key", "embedding_size", "embedding_directory", "min_padding"):
        assert name in attrs, name
    assert (t.start_token, t.end_token, t.pad_token, t.tokens_start, t.embedding_size) == (49406, 49407, 49407, 1, 64)
    assert t.embedding_directory == [str(tmp_path / "models" / "embeddings")]
    assert t.tokenizer.get_vocab()[",</w>"] == t.tokenizer(",", add_special_tokens=False)["input_ids"][0]
    assert t.tokenizer("a cat")["input_ids"] == [49406, *t.clip_tokenizer.encode("a cat"), 49407]
    embed, leftover = t._try_get_embedding("tinyemb, detailed")
    assert leftover == ", detailed" and embed.shape == (2, 64)
    assert t._try_get_embedding("nosuch rest") == (None, "rest")
    tower = clip.cond_stage_model.clip_l
    assert isinstance(tower.transformer.get_input_embeddings(), TokenEmbedding)


def test_a_replaced_encode_token_weights_runs_and_reproduces_ours_bit_for_bit(pack, clip):
    ref_cond, ref_pooled = _encode("a photo of a cat", clip)
    (cond,), names = pack.PromptHijackEncode().encode(clip, "a photo of a cat")
    assert names == "clip_l"  # found by walking __dict__ as smZNodes does
    torch.testing.assert_close(cond[0], ref_cond, rtol=0, atol=0)
    torch.testing.assert_close(cond[1]["pooled_output"], ref_pooled, rtol=0, atol=0)
    # unhooked: our own methods and embedding table again
    tower = clip.cond_stage_model.clip_l
    assert "encode_token_weights" not in vars(tower)
    assert "tokenize_with_weights" not in vars(clip.tokenizer.clip_l)
    assert type(tower.transformer.get_input_embeddings()).__name__ == "TokenEmbedding"
    again, _ = _encode("a photo of a cat", clip)
    torch.testing.assert_close(again, ref_cond, rtol=0, atol=0)


def test_the_replacements_weighting_is_what_reaches_the_conditioning(pack, clip):
    plain, _ = _encode("a photo of a cat", clip)  # same ids: the parentheses are parsed away
    (cond,), _ = pack.PromptHijackEncode().encode(clip, "a photo of a (cat:1.3)")
    multipliers = torch.ones(77)
    multipliers[5] = 1.3  # BOS a photo of a [cat]
    weighted = plain * multipliers[None, :, None]
    expected = weighted * (plain.mean() / weighted.mean())
    torch.testing.assert_close(cond[0], expected, rtol=0, atol=0)
    assert not torch.equal(cond[0], plain)


def test_a_wrapped_token_embedding_called_as_ids_out_dtype_is_what_encodes(pack, clip):
    # The wrapper writes "dog"'s table row where "cat" is: the output is that of "a photo of a dog".
    dog, dog_pooled = _encode("a photo of a dog", clip)
    (cond,), _ = pack.PromptHijackEncode().encode(clip, "a photo of a cat", splice_at=5)
    torch.testing.assert_close(cond[0], dog, rtol=0, atol=0)
    torch.testing.assert_close(cond[1]["pooled_output"], dog_pooled, rtol=0, atol=0)


def test_a_patched_tokenize_with_weights_is_seen_through_clip_tokenizer(pack, clip):
    text = "a photo of a (cat:1.3), embedding:tinyemb, [detailed]"
    ref, ref_pooled = _encode(text, clip)
    cond, seen = pack.PromptComfyTokenize().encode(clip, text)
    assert seen  # the patch on clip.tokenizer.clip_l held for the next reads of clip.tokenizer
    torch.testing.assert_close(cond[0][0], ref, rtol=0, atol=0)
    torch.testing.assert_close(cond[0][1]["pooled_output"], ref_pooled, rtol=0, atol=0)
    assert "tokenize_with_weights" not in vars(clip.tokenizer.clip_l)


def test_a_pack_tokenizer_patch_changes_what_clip_tokenize_returns(clip):
    # The failure smZNodes met: each read of clip.tokenizer was a fresh object, so a patch was lost.
    calls = []
    tokenizer = clip.tokenizer.clip_l
    original = tokenizer.tokenize_with_weights
    tokenizer.tokenize_with_weights = lambda text, return_word_ids=False, **kw: calls.append(text) or original(
        text, return_word_ids, **kw)
    try:
        tokens = clip.tokenize("a cat")
    finally:
        del tokenizer.tokenize_with_weights
    assert calls == ["a cat"] and len(tokens["l"][0]) == 77


def test_the_towers_forward_is_comfyuis(clip):
    """`tower(tokens)`: `[B, T]` ids or lists with embedding vectors -> (layer states, pooled),
    with the layer the set has in force (clip skip)."""
    from comfy_core.text_encoders.encoder_set import with_clip_layer

    bpe = clip.tokenizer.clip_l.clip_tokenizer
    ids = [49406, *bpe.encode("a photo of a cat"), 49407]
    ids += [49407] * (77 - len(ids))
    expected = clip.encode_from_tokens({"l": [[(t, 1.0) for t in ids]]}, return_pooled=True)
    tower = clip.cond_stage_model.clip_l
    with clip.patcher.applied(), torch.no_grad():
        z, pooled = tower(torch.tensor([ids]))
        vector = tower.transformer.get_input_embeddings().weight[ids[5]].float()
        z_list, _ = tower([ids[:5] + [vector] + ids[6:]])
        with tower.using_options(with_clip_layer(tower.options, -2)):
            skipped, _ = tower(torch.tensor([ids]))
    torch.testing.assert_close(z, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(pooled, expected[1], rtol=0, atol=0)
    torch.testing.assert_close(z_list, z, rtol=0, atol=0)
    skip = clip.clone()
    skip.clip_layer(-2)
    torch.testing.assert_close(skipped, skip.encode_from_tokens({"l": [[(t, 1.0) for t in ids]]}), rtol=0, atol=0)
    assert not torch.equal(skipped, z)
