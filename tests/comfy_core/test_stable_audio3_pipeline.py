"""Stable Audio 3 as a family: the released single file's layout detected and loaded (the shared
AdaLN DiT, the seconds_total embedder and padding embedding, the SAME VAE as an audio VAE, flow
sampling with shift 2), T5Gemma through CLIPLoader type "stable_audio" (the file's SentencePiece
model, no BOS / EOS), the conditioning ComfyUI's `StableAudio3.extra_conds` forms, and a sampler
step."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.families.stable_audio.sa3 import FRAMES_PER_SECOND, MAX_TEXT_TOKENS, ExpoNumberConditioner
from comfy_core.loading import load_checkpoint
from comfy_core.models.model_conditions import ConditioningError
from comfy_core.models.model_sampling import FlowModelSampling
from comfy_core.patching.audio_vae import AudioVaePatcher
from comfy_core.split.text_encoder_files import load_text_encoders
from tests.fixtures.stable_audio3_files import T5GEMMA_WIDTH, write_checkpoint, write_t5gemma


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stable_audio3")
    return {"checkpoint": write_checkpoint(root / "models" / "checkpoints" / "stable_audio_3_medium.safetensors"),
            "t5gemma": write_t5gemma(root / "models" / "text_encoders" / "t5gemma_b_b_ul2.safetensors"),
            "root": root}


@pytest.fixture(scope="module")
def loaded(files):
    return load_checkpoint(files["checkpoint"])


def test_the_single_file_loads_as_stable_audio3(loaded):
    model, clip, vae = loaded
    dm = model.model
    assert dm.family.name == "stable_audio3" and clip is None
    assert isinstance(dm.model_sampling, FlowModelSampling)
    assert float(dm.model_sampling.shift) == pytest.approx(2.0) and float(dm.model_sampling.multiplier) == 1.0
    assert type(dm.model_config).__name__ == "StableAudio3"
    assert dm.model_config.unet_config["global_cond_shared_embed"] is True
    assert dm.padding_embedding.shape == (T5GEMMA_WIDTH,)
    assert isinstance(vae, AudioVaePatcher)
    assert (vae.latent_channels, vae.latent_dim, vae.downscale_ratio, vae.audio_sample_rate) == (256, 1, 4096, 44100)
    audio = vae.decode(torch.zeros(1, 256, 2))
    assert audio.shape == (1, 2 * 4096, 2)
    assert vae.encode(audio[:, :5000]).shape == (1, 256, 2)  # padded to whole frames


def test_seconds_total_embedder_matches_diffusers():
    diffusers = pytest.importorskip("diffusers")
    from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder

    assert diffusers
    ref = StableAudio3DurationEmbedder(output_dim=12, fourier_dim=8).eval()
    state = {f"embedder.embedding.1.{k}": v for k, v in ref.linear.state_dict().items()}
    ours = ExpoNumberConditioner.from_state_dict(state)
    with torch.no_grad():
        want = ref(torch.tensor([0.0, 7.5, 500.0]))
        got = ours([0.0, 7.5, 500.0])[:, 0]
    assert torch.allclose(got, want, atol=1e-5)


def test_conditioning_pads_the_text_and_appends_the_seconds(loaded):
    dm = loaded[0].model
    noise = torch.zeros(2, 256, 30)
    text = torch.randn(1, 5, T5GEMMA_WIDTH)
    out = dm.extra_inputs(noise=noise, device=noise.device, cross_attn=text)
    total = dm.seconds_total_embedder([int(30 / FRAMES_PER_SECOND)])[0]  # the latent's duration by default
    assert torch.allclose(out["global_embed"], total)
    ctx = out["c_crossattn"]
    assert ctx.shape == (1, MAX_TEXT_TOKENS + 1, T5GEMMA_WIDTH)
    assert torch.equal(ctx[:, :5], text)
    assert torch.allclose(ctx[0, 5:MAX_TEXT_TOKENS], dm.padding_embedding.expand(MAX_TEXT_TOKENS - 5, -1))
    assert torch.allclose(ctx[0, -1], total[0])
    assert out["local_add_cond"].shape == (2, 257, 30) and out["local_add_cond"].abs().max() == 0
    mask = torch.zeros(2, 1, 30)
    mask[:, :, 10:] = 1.0
    image = torch.randn(2, 256, 30)
    inpaint = dm.extra_inputs(noise=noise, device=noise.device, cross_attn=text, denoise_mask=mask,
                              concat_latent_image=image, seconds_total=9)["local_add_cond"]
    assert torch.equal(inpaint[:, :1], 1.0 - mask) and torch.allclose(inpaint[:, 1:], image)
    with pytest.raises(ConditioningError, match="wrong text encoder"):
        dm.extra_inputs(noise=noise, device=noise.device, cross_attn=torch.randn(1, 5, T5GEMMA_WIDTH + 1))


def test_t5gemma_through_cliploader_type_stable_audio(files):
    clip = load_text_encoders([files["t5gemma"]], "stable_audio")
    assert type(clip.cond_stage_model).__name__ == "SAT5GemmaModel"
    tokens = clip.tokenize("heaven church electronic dance music")
    ids = [t for t, _w in tokens["t5gemma"][0]]
    from tests.fixtures.gemma_files import tiny_spiece_model
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_proto=tiny_spiece_model())
    assert ids == sp.encode("heaven church electronic dance music")  # no BOS / EOS, no padding
    assert [t for t, _w in clip.tokenize("")["t5gemma"][0]] == [0]  # minimum length 1, pad 0
    cond = clip.encode_from_tokens_scheduled(tokens)[0][0]
    assert cond.shape == (1, len(ids), T5GEMMA_WIDTH) and cond.dtype == torch.float32
    assert "spiece_model" in clip.get_sd() or "spiece_model" in clip.tokenizer.state_dict()


def test_a_sampler_step_runs(loaded, files):
    from nodes.sampling import ksampler

    clip = load_text_encoders([files["t5gemma"]], "stable_audio")
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("rain"))
    out = ksampler(loaded[0], 0, 2, 3.0, "euler", "simple", cond, cond, {"samples": torch.zeros(1, 256, 3)}, 1.0)
    samples = out[0]["samples"]
    assert samples.shape == (1, 256, 3) and torch.isfinite(samples).all()
    audio = loaded[2].decode(samples)
    assert audio.shape == (1, 3 * 4096, 2) and torch.isfinite(audio).all()


def test_a_t5gemma_file_without_its_tokenizer_is_refused(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.text_encoders.gemma_tokenizer import MissingGemmaTokenizerError
    from tests.fixtures.stable_audio3_files import tiny_t5gemma_state_dict

    path = tmp_path / "t5gemma_no_tokenizer.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_t5gemma_state_dict().items()}, str(path))
    with pytest.raises(MissingGemmaTokenizerError):
        load_text_encoders([path], "stable_audio")


def test_a_vae_state_dict_makes_an_sa3_patcher():
    """ComfyUI's `comfy.sd.VAE(sd=...)` with the SAME VAE's names (marker
    `decoder.layers.3.transformers.0.pre_norm.alpha`)."""
    from comfy_core.patching import VaePatcher
    from comfy_core.patching.sa3_vae import SA3VaePatcher
    from tests.fixtures.stable_audio3_files import tiny_vae_state_dict

    vae = VaePatcher(sd=tiny_vae_state_dict(3))
    assert isinstance(vae, SA3VaePatcher) and vae.latent_channels == 256
    assert vae.decode(torch.zeros(1, 256, 1)).shape == (1, 4096, 2)
