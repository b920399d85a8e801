"""Gemma 4 12B's encoder-free media embedders (comfy_core/text_encoders/gemma4_media.py) against
transformers' `gemma4_unified` (the independent reference) on the same tiny random weights, mapped
from ComfyUI's names: the 48-px cells and their positions (its image processor's patch merge), the
image embedder and projector, the raw audio frames and their projector, and a whole prompt pass
with an image and an audio clip (the soft tokens at the placeholders' positions, an image's tokens
attending to each other both ways); then TextGenerate / TextGenerateLTX2Prompt on a tiny 12B file
with an image and audio: ComfyUI's tokens, the soft tokens' places, generation on tiny weights."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.text_encoders.gemma4 import FULL, SLIDING, Gemma4Config, build_gemma4_encoder
from comfy_core.text_encoders.gemma4_media import (AUDIO_FRAME, audio_frames, audio_token_count, build_unified_audio,
                                                   build_unified_vision, image_cells)
from tests.fixtures.gemma4_files import UNIFIED, WIDTH, unified_state, write_gemma4_file

transformers = pytest.importorskip("transformers")
from transformers.models.gemma4_unified import configuration_gemma4_unified as hf_config  # noqa: E402
from transformers.models.gemma4_unified import image_processing_gemma4_unified as hf_image  # noqa: E402
from transformers.models.gemma4_unified import modeling_gemma4_unified as hf_model  # noqa: E402

IMAGE_ID, AUDIO_ID = 258880, 258881  # transformers' placeholder ids (replaced before the embedding lookup)
HF_NAMES = {"vision_model.": "embed_vision.", "multi_modal_projector.": "embed_vision.multimodal_embedder.",
            "audio_projector.": "embed_audio.", "model.": "language_model."}


def _hf_name(name: str) -> str:
    prefix = next(p for p in HF_NAMES if name.startswith(p))
    return HF_NAMES[prefix] + name[len(prefix):]


def _configs(text: dict | None = None):
    vision = hf_config.Gemma4UnifiedVisionConfig(mm_embed_dim=UNIFIED["width"], mm_posemb_size=UNIFIED["table"],
                                                 output_proj_dims=UNIFIED["width"])
    audio = hf_config.Gemma4UnifiedAudioConfig(audio_embed_dim=UNIFIED["frame"])
    text_config = hf_config.Gemma4UnifiedTextConfig(hidden_size=WIDTH, **(text or {}))
    return vision, audio, text_config


def _merged(pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' image processor steps 3-5 on `[3, H, W]` in 0..1: 16-px patches, their (x, y)
    positions, merged 3 x 3 into model patches."""
    patches = hf_image.convert_image_to_patches(pixels, 16)
    rows, cols = pixels.shape[1] // 16, pixels.shape[2] // 16
    grid = torch.meshgrid(torch.arange(cols), torch.arange(rows), indexing="xy")
    positions = torch.stack(grid, dim=-1).reshape(patches.shape[0], 2)
    return hf_image.patches_merge(patches[None], positions[None], patches.shape[0] // 9)


def test_cells_are_transformers_merged_patches() -> None:
    pixels = torch.rand(1, 3, 96, 144, generator=torch.Generator().manual_seed(1))
    cells, positions = image_cells(pixels, 48)
    merged, merged_positions = _merged(pixels[0])
    assert cells.shape == (1, 6, 48 * 48 * 3)
    assert torch.equal(cells, merged) and torch.equal(positions, merged_positions)
    assert positions[0].tolist() == [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]]  # (x, y), rows of cells
    with pytest.raises(ValueError, match="48-px cells"):
        image_cells(pixels[..., :100], 48)


def test_image_soft_tokens_equal_transformers() -> None:
    state = unified_state(seed=2)
    vision = build_unified_vision(state, state.__getitem__, WIDTH, torch.float32)
    pixels = torch.rand(1, 144, 96, 3, generator=torch.Generator().manual_seed(3))  # 3 rows of 2 cells
    vision_config, _, text_config = _configs()
    reference = hf_model.Gemma4UnifiedVisionEmbedder(vision_config, text_config).eval()
    reference.load_state_dict({_hf_name(k)[len("embed_vision."):]: v for k, v in state.items()
                               if k.startswith(("vision_model.", "multi_modal_projector."))})
    with torch.no_grad():
        ours = vision(pixels)
        merged, positions = _merged(pixels[0].movedim(-1, 0))
        expected = reference(merged, positions).pooler_output
    assert ours.shape == (1, 6, WIDTH)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


def test_audio_frames_and_soft_tokens_equal_transformers() -> None:
    waveform = torch.randn(1, 1500, generator=torch.Generator().manual_seed(4))  # 16 kHz, 2.3 frames
    frames, mask = audio_frames(waveform, 16000)
    from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import Gemma4UnifiedAudioFeatureExtractor

    extractor = Gemma4UnifiedAudioFeatureExtractor()
    expected_frames, expected_mask = extractor._extract_waveform_features(waveform[0].numpy())
    assert frames.shape == (3, AUDIO_FRAME) and torch.equal(frames, torch.from_numpy(expected_frames))
    assert mask.tolist() == expected_mask.tolist() == [True] * 3
    assert audio_token_count(1500) == 3 and audio_token_count(16000 * 60) == 750  # at most 30 s
    assert audio_frames(torch.zeros(2, 16000 * 40), 16000)[0].shape == (750, AUDIO_FRAME)  # stereo: mixed, capped
    state = unified_state(seed=5)
    audio = build_unified_audio(state, state.__getitem__, WIDTH, torch.float32)
    _, audio_config, text_config = _configs()
    reference = hf_model.Gemma4UnifiedMultimodalEmbedder(audio_config, text_config).eval()
    reference.embedding_projection.weight.data.copy_(state["audio_projector.embedding_projection.weight"])
    with torch.no_grad():
        torch.testing.assert_close(audio(frames[None], mask[None]), reference(frames[None]), rtol=1e-4, atol=1e-4)


def _unified_reference() -> hf_model.Gemma4UnifiedModel:
    """A tiny transformers Gemma 4 unified model (the 12B's layout: k = v global block with one key
    head, sliding window 8) with random weights. The window is longer than the image's block: for a
    block longer than its window transformers lets the block's tokens see all of it in the sliding
    blocks, ComfyUI (followed here) only within the window, which 280 soft tokens under the 12B's
    1024 never reach."""
    text = dict(vocab_size=96, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
                attention_k_eq_v=True, sliding_window=8, layer_types=[SLIDING] * 5 + [FULL], rms_norm_eps=1e-6,
                final_logit_softcapping=30.0, use_cache=False,
                rope_parameters={SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                                 FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                        "rope_theta": 1_000_000.0}})
    vision, audio, text_config = _configs(text)
    config = hf_config.Gemma4UnifiedConfig(text_config=text_config, vision_config=vision, audio_config=audio)
    config._attn_implementation = "eager"
    torch.manual_seed(7)
    model = hf_model.Gemma4UnifiedModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "_ln" in name:
                scale = 1.0 if name.endswith("weight") else 0.0
                param.copy_(scale + (0.2 if scale else 0.1) * torch.randn_like(param))
            elif "pos_embedding" in name:
                param.copy_(0.5 * torch.randn_like(param))
            else:
                param.copy_(torch.randn_like(param) / param.shape[-1] ** 0.5)
        for layer in model.language_model.layers:
            layer.layer_scalar.copy_(torch.rand(1) + 0.5)
    return model


def test_a_prompt_with_an_image_and_audio_equals_transformers() -> None:
    """The soft tokens replace the placeholders at their positions; the image's tokens see each
    other both ways (in every block, the sliding ones within their window), the audio's causally."""
    reference = _unified_reference()
    inverse = {v: k for k, v in HF_NAMES.items()}
    state = {}
    for name, tensor in reference.state_dict().items():
        prefix = next(p for p in inverse if name.startswith(p) and not (p == "embed_vision." and "multimodal" in name))
        state[inverse[prefix] + name[len(prefix):]] = tensor.clone()
    config = Gemma4Config.detect_from_weights(state, "", sliding_window=8)
    assert config.vision_bidirectional  # the file holds the encoder-free image embedder
    tower = build_gemma4_encoder(config, state, torch.float32)
    tower.vision = build_unified_vision(state, state.__getitem__, WIDTH, torch.float32)
    tower.audio = build_unified_audio(state, state.__getitem__, WIDTH, torch.float32)
    assert tower.generation_media == ("image", "video", "audio")

    pixels = torch.rand(1, 96, 144, 3, generator=torch.Generator().manual_seed(8))  # 6 soft tokens
    frames, mask = audio_frames(torch.randn(1, 2000, generator=torch.Generator().manual_seed(9)), 16000)  # 4
    row = [2, 5, 6, {"type": "image", "data": pixels, "max_soft_tokens": 280}, 7,
           {"type": "audio", "data": frames[None], "mask": mask[None]}, 8, 9]
    ids = [2, 5, 6] + [IMAGE_ID] * 6 + [7] + [AUDIO_ID] * 4 + [8, 9]
    kinds = [0, 0, 0] + [1] * 6 + [0] + [3] * 4 + [0, 0]
    merged, positions = _merged(pixels[0].movedim(-1, 0))
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids]), pixel_values=merged, image_position_ids=positions,
                             input_features=frames[None], input_features_mask=mask[None],
                             mm_token_type_ids=torch.tensor([kinds])).last_hidden_state
        embeds = tower.prompt_embeds(row)
        assert embeds.shape == (1, len(ids), WIDTH)
        torch.testing.assert_close(embeds[0, 3:9], tower.vision(pixels)[0])  # the image's place
        torch.testing.assert_close(embeds[0, 10:14], tower.audio(frames[None], mask[None])[0])  # the audio's
        positions_run = torch.arange(len(ids))
        ours = tower._run(embeds, None, positions_run, None, blocks=[(3, 6)])
        ours = tower.transformer.model.norm(ours)
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)
        causal = tower.transformer.model.norm(tower._run(embeds, None, positions_run, None))
        assert not torch.allclose(causal[0, 3:9], expected[0, 3:9], atol=1e-3)  # the image block matters
        torch.testing.assert_close(causal[0, :3], expected[0, :3], rtol=1e-4, atol=1e-4)  # not before it
        # generation's prompt pass is the same run (its last position), with the spans prompt_embeds kept
        from comfy_core.text_encoders.gemma4 import Gemma4Cache

        last = tower.decode_step(embeds, Gemma4Cache())
        torch.testing.assert_close(last, expected[:, -1], rtol=1e-4, atol=1e-4)


def _load(path: Path, **overrides):
    from comfy_core.text_encoders.gemma4_load import load_gemma4_clip

    return load_gemma4_clip(path, **overrides)


def test_the_12b_tokenizer_frames_audio_raw_after_the_image(tmp_path: Path) -> None:
    """ComfyUI's unified tokenizer: the image turn, then `<|audio>` + one `<|audio|>` per 640
    16 kHz samples + `<audio|>` after the prompt, the 12B's closed empty thought; each run one item."""
    path = tmp_path / "gemma4_12b_it_bf16.safetensors"
    write_gemma4_file(path, "12b", seed=1, unified=True)
    clip = _load(path, name="gemma4_12b")  # what the tiny shapes cannot show: the 12B's name (its chat)
    tokenizer = clip.tokenizer.gemma4
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(2))
    audio = {"waveform": torch.randn(1, 2, 22050, generator=torch.Generator().manual_seed(3)), "sample_rate": 44100}
    tokens = clip.tokenize("describe the dog", image=image, audio=audio, skip_template=False)
    row = [t for t, *_ in tokens["gemma4"][0]]
    text = ("<|turn>user\ndescribe the dog\n\n<|image><|image|><image|>\n\n<|audio>" + "<|audio|>" * 13
            + "<audio|><turn|>\n<|turn>model\n<|channel>thought\n<channel|>")  # 8000 samples at 16 kHz: 13
    expected = [2] + tokenizer.encode(text)
    image_id, audio_id = tokenizer.backend.token_to_id("<|image|>"), tokenizer.backend.token_to_id("<|audio|>")
    collapsed = [t for i, t in enumerate(expected) if not (t == audio_id and expected[i - 1] == audio_id)]
    assert [t if isinstance(t, int) else {"image": image_id, "audio": audio_id}[t["type"]] for t in row] == collapsed
    items = [t for t in row if isinstance(t, dict)]
    assert items[0]["data"].shape == (1, 672, 912, 3)  # the E2B / E4B preparation: 14 x 19 cells of 48 px
    assert items[1]["data"].shape == (1, 13, AUDIO_FRAME) and items[1]["mask"].all()
    from comfy_core.text_encoders.gemma4_audio import resample_16k

    torch.testing.assert_close(items[1]["data"][0].flatten()[:8000], resample_16k(audio["waveform"][0], 44100))


def test_text_generate_reads_the_12bs_image_and_audio(tmp_path: Path) -> None:
    """TextGenerate on the 12B (CLIPLoader's Gemma 4 file): the image's 266 and the audio's 13 soft
    tokens at the placeholders' places, greedy generation equal to the tower run on them by hand."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens
    from nodes.text_generate import split_reasoning, text_generate

    path = tmp_path / "gemma4_12b_it_bf16.safetensors"
    write_gemma4_file(path, "12b", seed=4, unified=True)
    clip = load_text_encoders([path], "stable_diffusion")
    tower = clip.cond_stage_model.encoder("gemma4")
    assert tower.generation_media == ("image", "video", "audio") and tower.config.vision_bidirectional
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(5))
    audio = {"waveform": torch.randn(1, 1, 8000, generator=torch.Generator().manual_seed(6)), "sample_rate": 16000}
    text, _ = text_generate(clip, "describe the dog", 4, {"sampling_mode": "off"}, image=image, audio=audio)
    tokens = clip.tokenize("describe the dog", image=image, audio=audio, skip_template=False)
    row = [t for t, *_ in tokens["gemma4"][0]]
    with torch.no_grad():
        embeds = tower.prompt_embeds(row)
        start = next(i for i, t in enumerate(row) if isinstance(t, dict))
        soft = tower.vision(row[start]["data"], 280)[0]
        assert soft.shape[0] == 14 * 19
        torch.testing.assert_close(embeds[0, start:start + soft.shape[0]], soft)
        assert tower._image_blocks == [(start, soft.shape[0])]
        audio_item = next(t for t in row if isinstance(t, dict) and t["type"] == "audio")
        at = row.index(audio_item) - 1 + soft.shape[0]  # the row's place, the image counted in soft tokens
        torch.testing.assert_close(embeds[0, at:at + 13], tower.audio(audio_item["data"], audio_item["mask"])[0])
        assert embeds.shape[1] == len(row) - 2 + soft.shape[0] + 13
        ids = generate_tokens(tower, embeds, 4, SamplingOptions(do_sample=False), tower.stop_tokens)
    assert (text, "") == split_reasoning(clip.tokenizer.decode(ids))


def test_text_generate_ltx2_prompt_reads_an_image_on_the_ltx25_encoder(tmp_path: Path) -> None:
    """TextGenerateLTX2Prompt on LTX-2.5's own text encoder file (the 12B with LTX's projection and
    its media embedders): the raw chat's `<|image|>` takes the image's soft tokens."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.text_generate_ltx2 import ltx24_chat, text_generate_ltx2_prompt

    path = tmp_path / "gemma4-12b-with-proj-ltx-2.5-comfy-bf16.safetensors"
    write_gemma4_file(path, "12b", seed=6, projection=True, unified=True)
    clip = load_text_encoders([path], "ltxv")
    image = torch.rand(1, 48, 48, 3, generator=torch.Generator().manual_seed(7))
    tokens = clip.tokenize(ltx24_chat("a robot", image=True), image=image, skip_template=False, min_length=1)
    assert [t["type"] for t, *_ in tokens["gemma4"][0] if isinstance(t, dict)] == ["image"]
    text, _ = text_generate_ltx2_prompt(clip, "a robot", 3, {"sampling_mode": "off"}, image=image)
    assert isinstance(text, str) and text


def test_a_12b_file_without_its_embedders_refuses_media(tmp_path: Path) -> None:
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.errors import NodeInputError
    from nodes.text_generate import text_generate

    path = tmp_path / "gemma4_12b_it_bf16.safetensors"
    write_gemma4_file(path, "12b", seed=2)
    clip = load_text_encoders([path], "stable_diffusion")
    assert clip.cond_stage_model.encoder("gemma4").generation_media == ()
    with pytest.raises(NodeInputError, match="image"):
        text_generate(clip, "a dog", 2, {"sampling_mode": "off"}, image=torch.rand(1, 48, 48, 3))


def test_an_incomplete_image_embedder_is_refused() -> None:
    from comfy_core.text_encoders.gemma4_vision import Gemma4VisionError

    state = unified_state(seed=3)
    del state["vision_model.pos_norm.bias"]
    with pytest.raises(Gemma4VisionError, match="pos_norm.bias"):
        build_unified_vision(state, state.__getitem__, WIDTH, torch.float32)
    with pytest.raises(Gemma4VisionError, match="expected shape"):
        build_unified_vision(unified_state(seed=3), unified_state(seed=3).__getitem__, WIDTH + 8, torch.float32)
