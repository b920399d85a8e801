"""HunyuanVideo 1.0's text encoders (comfy_core/families/hunyuan_video/clip.py) as ComfyUI's
`comfy/text_encoders/hunyuan_video.py` runs them: DualCLIPLoader type "hunyuan_video" with CLIP-L and
LLaVA-Llama-3's text part; the Llama template, its crop to the user turn, block -3 without the final
norm (against transformers' `LlamaModel`), CLIP-L's pooled output."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.hunyuan_video.clip import LLAMA_TEMPLATE, user_turn

BEGIN, START_HEADER, END_HEADER, EOT, USER, NEWLINES = 128000, 128006, 128007, 128009, 882, 271


def test_user_turn_follows_comfyuis_rule():
    ids = [BEGIN, START_HEADER, 9125, END_HEADER, NEWLINES, 5, 6, EOT, START_HEADER, USER, END_HEADER, NEWLINES,
           64, 8415, EOT]
    pairs = [(i, 1.0) for i in ids]
    assert user_turn(pairs) == (12, 15, [])  # from the prompt's first token through its <|eot_id|>
    assert user_turn(pairs[:-1]) == (12, 13, [])  # an unclosed user turn: ComfyUI's slice drops the last token
    assert user_turn([(BEGIN, 1.0), (NEWLINES, 1.0), (64, 1.0)]) == (2, 3, [])  # no user header
    image = {"type": "embedding", "data": torch.zeros(5, 8), "original_type": "image", "image_interleave": 2}
    with_image = pairs[:5] + [(image, 1.0)] + pairs[5:]  # an image of 5 states in the system turn
    assert user_turn(with_image) == (17, 20, [(5, 10, 2)])


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.template_models import WRITERS
    from tests.fixtures.template_models_hunyuan_video import WRITERS_HUNYUAN_VIDEO

    folder = tmp_path_factory.mktemp("hunyuan_video_text")
    clip_l, llama = folder / "clip_l.safetensors", folder / "llava_llama3_fp16.safetensors"
    WRITERS["clip_l"](clip_l)
    WRITERS_HUNYUAN_VIDEO["llava_llama3"](llama)
    return load_text_encoders([str(clip_l), str(llama)], clip_type="hunyuan_video")


def test_tokens_are_comfyuis(clip):
    tokens = clip.tokenize("a cat")
    assert set(tokens) == {"l", "llama"}
    ids = [pair[0] for pair in tokens["llama"][0]]
    llama = clip.tokenizer.llama
    assert ids[0] == BEGIN and ids[1:] == llama.encode(LLAMA_TEMPLATE.format("a cat"))
    assert len(ids) == 95 + len(llama.encode("a cat")) + 1  # ComfyUI: "95 tokens" of template, plus the start
    assert ids[-1] == EOT and 128258 not in ids  # min_length 1: no padding
    assert tokens["l"] == clip.tokenizer.clip_l.tokenize_with_weights("a cat")  # the prompt itself, no template
    assert tokens["l"][0][0][0] == 49406


def test_context_is_block_minus_3_of_the_user_turn(clip):
    from tests.fixtures.llama_files import reference_model, tiny_llama_state_dict

    tokens = clip.tokenize("a cat")
    ids = [pair[0] for pair in tokens["llama"][0]]
    out = clip.encode_from_tokens(tokens, return_dict=True)
    from tests.fixtures.template_models_hunyuan_video import LLAVA_VOCAB

    state = tiny_llama_state_dict(seed=len("llava_llama3_fp16.safetensors"), num_hidden_layers=3,
                                  vocab_size=LLAVA_VOCAB)
    reference = reference_model({k: v.to(torch.bfloat16) for k, v in state.items()}, num_hidden_layers=3,
                                vocab_size=LLAVA_VOCAB)
    with torch.no_grad():
        hidden = reference(torch.tensor([ids]), output_hidden_states=True).hidden_states[-3]  # block -3, no norm
    start = ids.index(END_HEADER, ids.index(USER)) + 2
    assert out["cond"].shape == (1, len(ids) - start, 32)
    assert torch.allclose(out["cond"], hidden[:, start:], atol=1e-3, rtol=1e-3)
    assert "attention_mask" not in out  # it masks nothing
    with torch.no_grad():
        pooled = clip.cond_stage_model.clip_l.encode_token_weights(tokens["l"])[1]
    assert out["pooled_output"].shape == (1, 32) and torch.allclose(out["pooled_output"], pooled)


def test_a_custom_template_and_prompt_weights(clip):
    tokens = clip.tokenize("a (cat:1.5)")
    assert 1.5 in [pair[1] for pair in tokens["llama"][0]]  # ComfyUI parses the weights in the templated text
    unweighted = {"l": tokens["l"], "llama": [[(pair[0], 1.0, *pair[2:]) for pair in tokens["llama"][0]]]}
    weighted = clip.encode_from_tokens(tokens, return_dict=True)["cond"]
    plain = clip.encode_from_tokens(unweighted, return_dict=True)["cond"]
    assert weighted.shape == plain.shape and not torch.allclose(weighted, plain)
    plain = clip.encode_from_tokens(clip.tokenize("a cat"), return_dict=True)["cond"]
    custom = "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    tokens = clip.tokenize("a cat", llama_template=custom)
    assert clip.encode_from_tokens(tokens, return_dict=True)["cond"].shape[1] == plain.shape[1]


def test_the_loader_type_and_what_it_refuses(clip, tmp_path):
    from comfy_core.split.clip_types import ClipFilesError
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.template_models import WRITERS

    assert type(clip.cond_stage_model).__name__ == "HunyuanVideoClipModel"
    assert type(clip.tokenizer).__name__ == "HunyuanVideoTokenizer"
    clip_l = tmp_path / "clip_l.safetensors"
    WRITERS["clip_l"](clip_l)
    with pytest.raises(ClipFilesError, match="hunyuan_video"):
        load_text_encoders([str(clip_l)], clip_type="hunyuan_video")


def test_image_to_video_prompt_leads_with_every_other_image_state(clip):
    """TextEncodeHunyuanVideo_ImageToVideo: `<image>` becomes the LLaVA projector's states; the
    conditioning is every `image_interleave`-th of their outputs, then the user turn."""
    from nodes.hunyuan_video_nodes import I2V_TEMPLATE, text_encode_hunyuan_video_image_to_video
    from tests.fixtures.llama_files import reference_model, tiny_llama_state_dict
    from tests.fixtures.template_models_hunyuan_video import LLAVA_VOCAB

    class Vision:
        mm_projected = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(3))

    tokens = clip.tokenize("a cat", llama_template=I2V_TEMPLATE, image_embeds=Vision.mm_projected, image_interleave=2)
    pairs = tokens["llama"][0]
    images = [i for i, pair in enumerate(pairs) if isinstance(pair[0], dict)]
    assert len(images) == 1 and torch.equal(pairs[images[0]][0]["data"], Vision.mm_projected[0])
    (conditioning,) = text_encode_hunyuan_video_image_to_video(clip, Vision(), "a cat", 2)
    cond = conditioning[0][0]

    state = tiny_llama_state_dict(seed=len("llava_llama3_fp16.safetensors"), num_hidden_layers=3,
                                  vocab_size=LLAVA_VOCAB)
    reference = reference_model({k: v.to(torch.bfloat16) for k, v in state.items()}, num_hidden_layers=3,
                                vocab_size=LLAVA_VOCAB)
    at = images[0]
    ids = [pair[0] for pair in pairs]
    with torch.no_grad():
        embeds = reference.embed_tokens(torch.tensor([ids[:at] + [0] + ids[at + 1:]]))
        embeds = torch.cat((embeds[:, :at], Vision.mm_projected, embeds[:, at + 1:]), dim=1)
        hidden = reference(inputs_embeds=embeds, output_hidden_states=True).hidden_states[-3]
    user = ids.index(END_HEADER, ids.index(USER)) + 2 + 4  # the 5 image states take 4 more positions
    eot = ids.index(EOT, ids.index(USER)) + 1 + 4
    want = torch.cat((hidden[:, at:at + 5:2], hidden[:, user:eot]), dim=1)
    assert cond.shape == want.shape == (1, 3 + len(clip.tokenizer.llama.encode("a cat")) + 1, 32)
    assert torch.allclose(cond, want, atol=1e-3, rtol=1e-3)
    assert conditioning[0][1]["pooled_output"].shape == (1, 32)


def test_a_single_file_with_the_towers_under_comfyuis_prefixes(tmp_path):
    """A checkpoint holding the DiT and both towers (`text_encoders.clip_l.` / `text_encoders.llama.`,
    ComfyUI's save layout) loads as this family with its encoder set."""
    from comfy_core import load_checkpoint
    from tests.fixtures import dit_checkpoints as dit
    from tests.fixtures.llama_files import tiny_llama_state_dict
    from tests.fixtures.template_models_hunyuan_video import LLAVA_VOCAB, tiny_hunyuan_video_state_dict

    state = tiny_hunyuan_video_state_dict(prefix="model.diffusion_model.")
    state.update(dit.clip_tower("text_encoders.clip_l.transformer.", 2, 1, projection=True))
    llama = tiny_llama_state_dict(num_hidden_layers=3, vocab_size=LLAVA_VOCAB)
    state.update({"text_encoders.llama.transformer." + k: v for k, v in llama.items()})
    model, clip, _ = load_checkpoint(dit.save(state, tmp_path / "hunyuan_video.safetensors"), output_vae=False)
    assert model.model.family.name == "hunyuan_video"
    out = clip.encode_from_tokens(clip.tokenize("a cat"), return_dict=True)
    assert out["cond"].shape == (1, 3, 32) and out["pooled_output"].shape == (1, 32)  # "a", " cat", <|eot_id|>
