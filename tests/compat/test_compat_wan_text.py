"""ComfyUI's `comfy.text_encoders.wan` / `spiece_tokenizer` names on our runtime: a CLIP loaded
with ComfyUI's `comfy.sd.load_text_encoder_state_dicts(clip_type=CLIPType.WAN)` from a umT5 state
dict is an instance of the classes a pack imports, its tokenizer's `.tokenizer` ComfyUI's
`SPieceTokenizer` surface."""
from __future__ import annotations

import torch

from tests.fixtures.umt5_files import SPIECE_KEY, spiece_tensor, tiny_umt5_state_dict


def test_wan_state_dict_loads_as_the_classes_packs_import(session) -> None:  # noqa: ANN001
    import comfy.sd
    import comfy.text_encoders.spiece_tokenizer as spiece
    import comfy.text_encoders.wan as wan
    state = {**tiny_umt5_state_dict(), SPIECE_KEY: spiece_tensor()}
    clip = comfy.sd.load_text_encoder_state_dicts([state], clip_type=comfy.sd.CLIPType.WAN)
    assert isinstance(clip.cond_stage_model, wan.WanT5Model)
    assert isinstance(clip.cond_stage_model.umt5xxl, wan.UMT5XXlModel)
    assert isinstance(clip.tokenizer, wan.WanT5Tokenizer)
    tower_tokenizer = clip.tokenizer.clip_umt5xxl
    assert isinstance(tower_tokenizer, wan.UMT5XXlTokenizer)
    assert isinstance(tower_tokenizer.tokenizer, spiece.SPieceTokenizer)
    ids = tower_tokenizer.tokenizer("a cat")["input_ids"]
    assert ids[-1] == 1 and len(ids) > 1
    assert torch.equal(tower_tokenizer.tokenizer.serialize_model(), spiece_tensor())
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    assert cond[0][0].shape == (1, 512, 32)
