"""Gemma 4 E2B / E4B's audio conformer (comfy_core/text_encoders/gemma4_audio.py) against
transformers' `Gemma4AudioModel` + `Gemma4MultimodalEmbedder` (the independent reference) on the
same tiny random weights, with masked trailing frames; the features' frame arithmetic against the
token count ComfyUI's template uses."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.gemma4_audio import build_audio, log_mel, token_count

pytest.importorskip("transformers")
TEXT_WIDTH = 32


def _reference(seed: int = 0):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig, Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel, Gemma4MultimodalEmbedder

    config = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, output_proj_dims=24,
                               subsampling_conv_channels=(128, 4), use_clipped_linears=True)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Gemma4AudioModel(config).eval()
    embedder = Gemma4MultimodalEmbedder(config, Gemma4TextConfig(hidden_size=TEXT_WIDTH)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 0.2 if "norm" in name or "per_dim_scale" in name else 1.0 / max(param.shape[-1], 1) ** 0.5
            param.copy_(torch.randn_like(param) * scale + (1.0 if "norm" in name else 0.0))
        for name, buffer in model.named_buffers():
            if name.endswith(("_min", "_max")):
                buffer.fill_(-3.0 if name.endswith("_min") else 3.0)
    state = {"audio_model." + k: v.clone() for k, v in model.state_dict().items()}
    state["audio_projector.embedding_projection.weight"] = embedder.embedding_projection.weight.detach().clone()
    return model, embedder, state


def test_soft_tokens_equal_transformers() -> None:
    model, embedder, state = _reference()
    audio = build_audio(state, state.__getitem__, TEXT_WIDTH, torch.float32)
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(1, 61, 128, generator=generator)
    mask = torch.ones(1, 61, dtype=torch.bool)
    mask[:, 53:] = False
    features[~mask] = 0.0
    with torch.no_grad():
        ours = audio(features, mask)
        out = model(input_features=features, attention_mask=mask)
        expected = embedder(out.last_hidden_state)
    assert ours.shape == expected.shape == (1, 16, TEXT_WIDTH)
    valid = out.attention_mask[0]  # the padded tail's tokens are dropped by the caller in both
    torch.testing.assert_close(ours[0, valid], expected[0, valid], rtol=1e-4, atol=1e-4)


def test_features_give_the_template_token_count() -> None:
    waveform = 0.1 * torch.randn(2, 44100, generator=torch.Generator().manual_seed(2))  # 1 s of stereo at 44.1 kHz
    mel, mask = log_mel(waveform, 44100)
    assert mel.shape[1] == 128 and mask.dtype == torch.bool
    frames = mel.shape[0]
    for _ in range(2):
        frames = (frames + 1) // 2  # the two stride-2 convolutions
    assert frames == token_count(16000) == 25
    assert torch.all(mel[~mask] == 0)


def test_kaiser_resampling_keeps_a_band_limited_tone() -> None:
    import math

    from comfy_core.text_encoders.gemma4_audio import kaiser_resample

    t = torch.arange(44100, dtype=torch.float64) / 44100
    tone = torch.sin(2 * math.pi * 440.0 * t)[None]
    out = kaiser_resample(tone, 44100, 16000)
    assert out.shape == (1, 16000)
    expected = torch.sin(2 * math.pi * 440.0 * torch.arange(16000, dtype=torch.float64) / 16000)
    assert float((out[0, 400:-400] - expected[400:-400]).abs().max()) < 1e-3  # away from the edges


def test_text_generate_reads_image_and_audio(tmp_path) -> None:
    """TextGenerate on an E4B file with both media towers (ComfyUI's llm_gemma4_text_gen): the
    image and audio turns follow the prompt and their soft tokens are spliced where the tokenizer
    put them."""
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.text_generate import text_generate
    from tests.fixtures.gemma4_files import write_gemma4_file

    path = tmp_path / "gemma4_e4b_it_fp8_scaled.safetensors"
    write_gemma4_file(path, "e4b", seed=9, quantize="fp8_scaled", vision=True, audio=True)
    clip = load_text_encoders([path], "stable_diffusion")
    tower = clip.cond_stage_model.encoder("gemma4")
    assert tower.generation_media == ("image", "video", "audio")
    image = torch.rand(1, 48, 48, 3, generator=torch.Generator().manual_seed(3))
    audio = {"waveform": 0.1 * torch.randn(1, 2, 22050, generator=torch.Generator().manual_seed(4)),
             "sample_rate": 44100}
    tokens = clip.tokenize("describe", image=image, audio=audio, skip_template=False)
    row = [t for t, *_ in tokens["gemma4"][0]]
    kinds = [item["type"] for item in row if isinstance(item, dict)]
    assert kinds == ["image", "audio"]
    with torch.no_grad():
        embeds = tower.prompt_embeds(row)
        start = row.index(next(item for item in row if isinstance(item, dict) and item["type"] == "audio"))
        soft = tower.audio(row[start]["data"], row[start]["mask"])[0]
    image_tokens = embeds.shape[1] - (len(row) - 2) - soft.shape[0]
    offset = start - 1 + image_tokens  # the image item before it became `image_tokens` positions
    torch.testing.assert_close(embeds[0, offset:offset + soft.shape[0]], soft)
    assert soft.shape[0] == 13  # 0.5 s: 51 mel frames, twice halved
    text, reasoning = text_generate(clip, "describe", 3, {"sampling_mode": "off"}, image=image, audio=audio)
    assert isinstance(text, str) and reasoning == ""
