"""Gemma 4 E2B / E4B's vision encoder (comfy_core/text_encoders/gemma4_vision.py) against transformers'
`Gemma4VisionModel` + `Gemma4MultimodalEmbedder` (the independent reference) on the same tiny
weights, with and without padding patches; the image preparation; TextGenerate with an image on
an E2B file carrying the vision tower."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.text_encoders.gemma4_vision import MARKER, build_vision, patchify, target_size
from tests.fixtures.gemma4_files import VISION, WIDTH, vision_state, write_gemma4_file

pytest.importorskip("transformers")


def _reference(state: dict[str, torch.Tensor]):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig, Gemma4VisionConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4MultimodalEmbedder, Gemma4VisionModel

    config = Gemma4VisionConfig(hidden_size=VISION["width"], intermediate_size=VISION["inner"],
                                num_hidden_layers=VISION["depth"], num_attention_heads=VISION["heads"],
                                num_key_value_heads=VISION["heads"], head_dim=VISION["head_dim"], patch_size=16,
                                position_embedding_size=VISION["table"], pooling_kernel_size=3,
                                use_clipped_linears=True, rms_norm_eps=1e-6)
    config._attn_implementation = "eager"
    model = Gemma4VisionModel(config).eval()
    model.load_state_dict({k[len("vision_model."):]: v for k, v in state.items() if k.startswith("vision_model.")})
    embedder = Gemma4MultimodalEmbedder(config, Gemma4TextConfig(hidden_size=WIDTH)).eval()
    embedder.embedding_projection.weight.data.copy_(state["multi_modal_projector.embedding_projection.weight"])
    return model, embedder


@pytest.mark.parametrize("size", [(96, 96), (48, 96)])  # 36 patches, and 18 with 18 padding patches
def test_soft_tokens_equal_transformers(size: tuple[int, int]) -> None:
    state = vision_state(seed=2)
    vision = build_vision(state, state.__getitem__, WIDTH, torch.float32)
    pixels = torch.rand(1, *size, 3, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = vision(pixels, max_soft_tokens=4)
        model, embedder = _reference(state)
        patches, positions = patchify(pixels.movedim(-1, 1), 4)
        expected = embedder(model(pixel_values=patches, pixel_position_ids=positions).last_hidden_state)
    assert ours.shape == (1, expected.shape[0], WIDTH)
    torch.testing.assert_close(ours[0], expected, rtol=1e-4, atol=1e-4)


def test_files_without_clipping_scalars_are_unbounded() -> None:
    state = {k: v for k, v in vision_state(seed=4).items() if not k.endswith(("_min", "_max"))}
    vision = build_vision(state, state.__getitem__, WIDTH, torch.float32)
    assert float(vision.vision_model.encoder.layers[0].self_attn.q_proj.input_max) == float("inf")
    del state[MARKER]
    from comfy_core.text_encoders.gemma4_vision import Gemma4VisionError

    with pytest.raises(Gemma4VisionError, match="input_proj"):
        build_vision(state, state.__getitem__, WIDTH, torch.float32)


def test_image_sizes_follow_comfyuis_patch_budget() -> None:
    assert target_size(896, 896) == (768, 768)  # 280 soft tokens: at most 2520 patches of 16 px, sides of 48
    assert target_size(480, 640) == (672, 912)
    assert target_size(96, 96, 4) == (96, 96)


def test_text_generate_reads_an_image(tmp_path: Path) -> None:
    """TextGenerate on an E2B file with its vision tower: the image turn and soft tokens reach
    the tower (greedy generation equals the tower run on the spliced embeddings by hand)."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens
    from nodes.text_generate import text_generate

    path = tmp_path / "gemma4_e2b_it_bf16.safetensors"
    write_gemma4_file(path, "e2b", seed=8, vision=True)
    clip = load_text_encoders([path], "stable_diffusion")
    tower = clip.cond_stage_model.encoder("gemma4")
    assert tower.generation_media == ("image", "video")
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(1))
    tokens = clip.tokenize("describe the dog", image=image, skip_template=False, min_length=1)
    row = [t for t, *_ in tokens["gemma4"][0]]
    items = [t for t in row if isinstance(t, dict)]
    assert len(items) == 1 and items[0]["data"].shape == (1, 672, 912, 3)  # scaled up to the patch budget
    text, _ = text_generate(clip, "describe the dog", 4, {"sampling_mode": "off"}, image=image)
    with torch.no_grad():
        embeds = tower.prompt_embeds(row)
        soft = tower.vision(items[0]["data"], 280)[0]
        start = row.index(items[0])
        torch.testing.assert_close(embeds[0, start:start + soft.shape[0]], soft)
        ids = generate_tokens(tower, embeds, 4, SamplingOptions(do_sample=False), tower.stop_tokens)
    from nodes.text_generate import split_reasoning

    assert (text, "") == split_reasoning(clip.tokenizer.decode(ids))


def test_text_generate_ltx2_prompt_places_the_image_in_gemma4s_chat(tmp_path: Path) -> None:
    """TextGenerateLTX2Prompt with an image on Gemma 4 E2B (the LTX-2.5 i2v prompt writer): the raw
    `<|turn>` chat spells the image turn, whose `<|image|>` takes the soft tokens."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.text_generate_ltx2 import ltx24_chat, text_generate_ltx2_prompt

    path = tmp_path / "gemma4_e2b_it_int8_convrot.safetensors"
    write_gemma4_file(path, "e2b", seed=10, vision=True, quantize="int8_convrot")
    clip = load_text_encoders([path], "ltxv")
    image = torch.rand(1, 48, 48, 3, generator=torch.Generator().manual_seed(5))
    chat = ltx24_chat("a robot", image=True)
    assert "<|turn>user\n<|image><|image|><image|>\n\nUser Raw Input Prompt: a robot.<turn|>" in chat
    tokens = clip.tokenize(chat, image=image, skip_template=False, min_length=1)
    items = [t for t, *_ in tokens["gemma4"][0] if isinstance(t, dict)]
    assert [item["type"] for item in items] == ["image"]
    text, _ = text_generate_ltx2_prompt(clip, "a robot", 3, {"sampling_mode": "off"}, image=image)
    assert isinstance(text, str) and text


def test_video_frames_become_one_image_a_second(tmp_path: Path) -> None:
    """TextGenerate's video input (24 fps frames): one frame a second, each after its mm:ss and at
    70 soft tokens, instead of the images (ComfyUI's)."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.text_generate import text_generate

    path = tmp_path / "gemma4_e2b_it_bf16.safetensors"
    write_gemma4_file(path, "e2b", seed=11, vision=True)
    clip = load_text_encoders([path], "stable_diffusion")
    video = torch.rand(30, 48, 64, 3, generator=torch.Generator().manual_seed(6))
    tokens = clip.tokenize("what happens", video=video, image=torch.rand(1, 48, 48, 3), skip_template=False)
    items = [t for t, *_ in tokens["gemma4"][0] if isinstance(t, dict)]
    assert [item["max_soft_tokens"] for item in items] == [70, 70]  # frames 0 and 24; the image is not read
    assert items[0]["data"].shape == (1, 336, 432, 3)  # 70 x 9 patches at most, sides of 48
    text, _ = text_generate(clip, "what happens", 2, {"sampling_mode": "off"}, video=video)
    assert isinstance(text, str)
