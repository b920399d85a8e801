"""CLIPTextEncodeSD3 (ComfyUI's empty-padding rule, on a recording CLIP), EmptySD3LatentImage and
T5TokenizerOptions: ComfyUI 0.3.64's semantics and /object_info entries."""
from __future__ import annotations

import pytest
import torch

from graph.native import spec_of
from graph.object_info import node_info
from nodes import sd3_nodes as sd3
from nodes.errors import NodeInputError
from nodes.t5_options import T5_TYPES, t5_tokenizer_options
from tests.fixtures.clips import one_thread, sd1  # noqa: F401 (fixtures)
from tests.fixtures.object_info_parity import comfyui_object_info, node_differences


class RecordingClip:
    """Tokens name their encoder and text, one chunk per 3 words (at least one, the empty prompt's);
    records what it is asked to encode and the tokenizer options it is given."""

    def __init__(self, keys=("l", "g", "t5xxl")) -> None:
        self.keys = keys
        self.encoded: list = []
        self.options: dict = {}
        self.clones: list = []

    def tokenize(self, text: str) -> dict:
        n = max(1, -(-len(text.split()) // 3))
        return {key: [[(f"{key}:{text}#{i}", 1.0)] for i in range(n)] for key in self.keys}

    def encode_from_tokens(self, tokens, return_pooled=False):  # noqa: ANN001, ANN201
        raise AssertionError("CLIPTextEncodeSD3 encodes scheduled")

    def encode_from_tokens_scheduled(self, tokens, add_dict=None):  # noqa: ANN001, ANN201
        self.encoded.append((tokens, add_dict))
        return [[torch.zeros(1, 4, 8), {"pooled_output": torch.zeros(1, 8)}]]

    def clone(self) -> "RecordingClip":
        n = RecordingClip(self.keys)
        n.options = dict(self.options)
        if hasattr(self, "tokenizer"):
            n.tokenizer = self.tokenizer
        self.clones.append(n)
        return n

    def set_tokenizer_option(self, name: str, value: object) -> None:
        self.options[name] = value


def _encode(clip_l: str, clip_g: str, t5xxl: str, padding: str, keys=("l", "g", "t5xxl")) -> dict:
    clip = RecordingClip(keys)
    (out,) = sd3.clip_text_encode_sd3(clip, clip_l, clip_g, t5xxl, padding)
    ((tokens, add),) = clip.encoded
    assert add is None and len(out) == 1
    return tokens


def _chunks(key: str, text: str, n: int) -> list:
    return [[(f"{key}:{text}#{i}", 1.0)] for i in range(n)]


def test_each_encoder_gets_its_own_text():
    tokens = _encode("one two", "three four", "five six seven", "none")
    assert tokens == {"l": _chunks("l", "one two", 1), "g": _chunks("g", "three four", 1),
                      "t5xxl": _chunks("t5xxl", "five six seven", 1)}


def test_without_padding_an_empty_text_gives_no_tokens():
    assert _encode("", "", "", "none") == {"l": [], "g": [], "t5xxl": []}
    # An empty CLIP-L beside a CLIP-G text: L becomes empty-prompt chunks to match G's count.
    tokens = _encode("", "a b c d e f g", "", "none")
    assert tokens == {"l": _chunks("l", "", 1) * 3, "g": _chunks("g", "a b c d e f g", 3), "t5xxl": []}
    tokens = _encode("a b c d", "", "t", "none")
    assert tokens["g"] == _chunks("g", "", 1) * 2 and tokens["l"] == _chunks("l", "a b c d", 2)


def test_with_empty_prompt_padding_empty_texts_are_the_empty_prompts_tokens():
    assert _encode("", "", "", "empty_prompt") == {"l": _chunks("l", "", 1), "g": _chunks("g", "", 1),
                                                   "t5xxl": _chunks("t5xxl", "", 1)}


def test_the_shorter_clip_is_padded_with_empty_prompt_chunks():
    tokens = _encode("a", "a b c d e f g", "x", "empty_prompt")
    assert tokens["l"] == _chunks("l", "a", 1) + _chunks("l", "", 1) * 2
    assert tokens["g"] == _chunks("g", "a b c d e f g", 3)
    tokens = _encode("a b c d e f g", "a", "x", "none")
    assert tokens["g"] == _chunks("g", "a", 1) + _chunks("g", "", 1) * 2 and len(tokens["l"]) == 3


def test_a_clip_without_t5_or_without_clip_g():
    assert _encode("a", "b", "c", "none", keys=("l", "g")) == {"l": _chunks("l", "a", 1), "g": _chunks("g", "b", 1)}
    with pytest.raises(NodeInputError, match="CLIP-G"):
        sd3.clip_text_encode_sd3(RecordingClip(("l", "t5xxl")), "a", "b", "c", "none")
    with pytest.raises(NodeInputError, match="empty_padding"):
        sd3.clip_text_encode_sd3(RecordingClip(), "a", "b", "c", "empty")


def test_empty_sd3_latent_is_16_channel_zeros():
    (latent,) = sd3.empty_sd3_latent_image(1024, 520, 2)
    samples = latent["samples"]
    assert samples.shape == (2, 16, 65, 128) and samples.dtype == torch.float32 and not samples.any()
    assert sd3.empty_sd3_latent_image(100, 16)[0]["samples"].shape == (1, 16, 2, 12)
    with pytest.raises(NodeInputError, match="batch_size"):
        sd3.empty_sd3_latent_image(64, 64, 0)


def test_t5_tokenizer_options_are_set_on_a_clone_only():
    clip = RecordingClip()
    (out,) = t5_tokenizer_options(clip, 3, 256)
    assert out is not clip and clip.options == {} and clip.clones == [out]
    assert out.options == {**{f"{kind}_min_padding": 3 for kind in T5_TYPES},
                           **{f"{kind}_min_length": 256 for kind in T5_TYPES}}
    with pytest.raises(NodeInputError, match="min_length"):
        t5_tokenizer_options(clip, 0, -1)


def test_t5_tokenizer_options_on_this_engines_clip_name_only_its_t5_slots():
    """Our CLIP refuses options no tokenizer of it reads: only its T5 slots get them."""
    from types import SimpleNamespace

    clip = RecordingClip()
    clip.tokenizer = SimpleNamespace(slots=("clip_l", "t5xxl"))
    (out,) = t5_tokenizer_options(clip, 1, 2)
    assert out.options == {"t5xxl_min_padding": 1, "t5xxl_min_length": 2} and clip.options == {}
    clip.tokenizer = SimpleNamespace(slots=("clip_l", "clip_g"))
    assert t5_tokenizer_options(clip, 1, 2)[0].options == {}


def test_t5_tokenizer_options_on_a_clip_without_t5_is_a_plain_clone(sd1):
    (out,) = t5_tokenizer_options(sd1, 4, 8)
    assert out is not sd1 and out.tokenizer_options == {} and sd1.tokenizer_options == {}
    assert torch.equal(out.encode("a cat"), sd1.encode("a cat"))


@pytest.mark.parametrize("fn", [sd3.clip_text_encode_sd3, sd3.empty_sd3_latent_image, t5_tokenizer_options])
def test_object_info_is_comfyuis(fn):
    spec = spec_of(fn)
    theirs = comfyui_object_info()[spec.node_id]
    ours = node_info(spec)
    assert node_differences(spec.node_id, ours, theirs) == []
    assert bool(ours.get("experimental")) == theirs["experimental"] and ours["description"] == theirs["description"]
