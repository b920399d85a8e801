"""LTX-2 / 2.3's nodes on the template fixtures' tiny LTX-2.3 checkpoint (tests/fixtures/
template_models_ltx2.py): GetICLoRAParameters (the LoRA loaders attach the file's metadata),
LTXVDualCFGGuider (video and audio parts of one Euler step at their own CFG scale),
LTXVReferenceAudio (ID-LoRA reference tokens in the conditioning, at negative times and timestep 0
in the DiT), SaveAudioAdvanced (the three formats written and read back) and
TextGenerateLTX2Prompt's chat."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from nodes.errors import NodeInputError
from nodes.ltx2_nodes import get_ic_lora_parameters, ic_lora_parameters, ltxv_dual_cfg_guider, ltxv_reference_audio
from tests.fixtures.template_models_ltx2 import WRITERS_LTX2, write_input_audio
from tests.nodes.node_context import folders_env, running_node

CHECKPOINT = "ltx-2.3-22b-distilled.safetensors"
VIDEO, AUDIO = 128, 64


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2_nodes")
    environment = folders_env(root)
    models = root / "base" / "models"
    WRITERS_LTX2["ltx23_checkpoint"](models / "checkpoints" / CHECKPOINT)
    WRITERS_LTX2["lora_ltx2_ic"](models / "loras" / "ltx-2.3-22b-ic-lora-union.safetensors")
    WRITERS_LTX2["lora_ltx2"](models / "loras" / "ltx2-plain.safetensors")
    tensors = load_file(str(models / "loras" / "ltx2-plain.safetensors"))
    save_file(tensors, str(models / "loras" / "ltx2-ic-half.safetensors"),
              metadata={"ss_reference_downscale_factor": "2.4"})
    return environment


@pytest.fixture(scope="module")
def model(env):
    from comfy_core.loading import load_checkpoint

    patcher, _clip, _vae = load_checkpoint(env.folders.full_path("checkpoints", CHECKPOINT))
    return patcher


@pytest.fixture(scope="module")
def audio_vae(env):
    from nodes.ltx_audio_nodes import ltxv_audio_vae_loader

    with running_node("LTXVAudioVAELoader", "1", env):
        return ltxv_audio_vae_loader(CHECKPOINT)[0]


def _conditioning(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, 5, VIDEO + AUDIO, generator=g), {"unprocessed_ltxav_embeds": True, "frame_rate": 8.0}]]


def _nested(seed: int):
    from comfy_core.latent.nested import NestedTensor

    g = torch.Generator().manual_seed(seed)
    return NestedTensor([torch.randn(1, 128, 2, 2, 2, generator=g), torch.randn(1, 8, 5, 16, generator=g)])


def test_get_ic_lora_parameters_reads_what_the_lora_loader_attached(env, model):
    from nodes.patching import lora_loader_model_only

    with running_node("LoraLoaderModelOnly", "1", env):
        ic = lora_loader_model_only(model, "ltx-2.3-22b-ic-lora-union.safetensors", 1.0)[0]
        half = lora_loader_model_only(model, "ltx2-ic-half.safetensors", 1.0)[0]
        plain = lora_loader_model_only(model, "ltx2-plain.safetensors", 1.0)[0]
    assert ic.attachments["lora_metadata"]["reference_downscale_factor"] == "1"
    assert get_ic_lora_parameters(half) == ({"reference_downscale_factor": 2},)  # a key ending in the name, rounded
    assert get_ic_lora_parameters(plain) == ({"reference_downscale_factor": 1},)
    assert "lora_metadata" not in model.attachments  # the loaders clone
    assert ic_lora_parameters({"reference_downscale_factor": "x"}) == {"reference_downscale_factor": 1}
    assert ic_lora_parameters({"reference_downscale_factor": "0.2"}) == {"reference_downscale_factor": 1}
    with pytest.raises(NodeInputError, match="iclora_model"):
        get_ic_lora_parameters("not a model")


def test_dual_cfg_guider_guides_video_and_audio_at_their_own_scales(model):
    from comfy_core.sampling.guider import cfg_guider, sampler_object

    positive, negative = _conditioning(1), _conditioning(2)
    latent, noise = _nested(3), _nested(4)
    sigmas = torch.tensor([0.9, 0.6])

    def run(guider):
        return guider.sample(noise, latent, sampler_object("euler"), sigmas, seed=0).unbind()

    (dual,) = ltxv_dual_cfg_guider(model, positive, negative, 3.0, 7.0)
    video, audio = run(dual)
    video_3, audio_3 = run(cfg_guider(model, positive, negative, 3.0))
    video_7, audio_7 = run(cfg_guider(model, positive, negative, 7.0))
    assert torch.allclose(video, video_3, atol=1e-5) and torch.allclose(audio, audio_7, atol=1e-5)
    assert not torch.allclose(audio, audio_3, atol=1e-3)
    (same,) = ltxv_dual_cfg_guider(model, positive, negative, 3.0, 3.0)  # equal scales: plain CFG
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(run(same), (video_3, audio_3)))


def test_reference_audio_goes_first_in_the_audio_stream_at_negative_times(env, model, audio_vae, tmp_path):
    from comfy_core.video.audio_files import read_audio
    from nodes.ltx_audio_nodes import encode_audio

    path = write_input_audio(tmp_path / "voice.flac", seed=3)
    waveform, rate = read_audio(path)
    reference = {"waveform": waveform[None], "sample_rate": rate}
    positive, negative = _conditioning(1), _conditioning(2)
    patched, pos, neg = ltxv_reference_audio(model, positive, negative, reference, audio_vae, 3.0, 0.0, 1.0)
    latent = encode_audio(audio_vae, reference)["samples"]  # [1, 8, T, 16]
    tokens = pos[0][1]["ref_audio"]["tokens"]
    assert torch.equal(tokens, latent.permute(0, 2, 1, 3).reshape(1, latent.shape[2], -1))
    assert neg[0][1]["ref_audio"] is pos[0][1]["ref_audio"] and "ref_audio" not in positive[0][1]
    assert len(patched.model_options["sampler_post_cfg_function"]) == 1 and patched is not model
    conds = model.model.extra_inputs(cross_attn=pos[0][0], device=torch.device("cpu"), **{
        k: v for k, v in pos[0][1].items()})
    assert conds["ref_audio"] is pos[0][1]["ref_audio"]  # handed to the network as it is

    network = model.model.diffusion_model
    a_in = torch.randn(1, 5, 128)
    from comfy_core.families.ltx2.latent import audio_positions

    joined, positions, times, count = network._with_reference_audio(
        {"tokens": tokens}, a_in, audio_positions(5, 1, "cpu"), torch.full((1, 1), 0.7), 1)
    assert count == tokens.shape[1] and torch.equal(joined[:, count:], a_in)
    assert torch.equal(times[0, :count], torch.zeros(count)) and torch.allclose(times[0, count:], torch.full((5,), 0.7))
    assert abs(float(positions[0, 0, count - 1, 1]) + 0.04) < 1e-6  # ends one latent frame (4 x 160 / 16 kHz) before 0
    assert torch.equal(positions[:, :, count:], audio_positions(5, 1, "cpu"))

    x, context = _nested(5).unbind(), pos[0][0]
    with torch.no_grad():
        plain = network(list(x), torch.tensor([0.7]), network.preprocess_text_embeds(context, True))
        with_ref = network(list(x), torch.tensor([0.7]), network.preprocess_text_embeds(context, True),
                           ref_audio=pos[0][1]["ref_audio"])
    assert [t.shape for t in with_ref] == [t.shape for t in plain]
    assert not torch.allclose(with_ref[1], plain[1])
    with pytest.raises(Exception, match="ref_audio"):
        network(list(x), torch.tensor([0.7]), network.preprocess_text_embeds(context, True), ref_audio={"x": 1})


@pytest.mark.parametrize("fmt, quality", [("flac", None), ("mp3", "V0"), ("opus", "64k")])
def test_save_audio_advanced_writes_each_format(env, tmp_path, fmt, quality):
    from comfy_core.video.audio_files import read_audio
    from nodes.audio import save_audio_advanced

    g = torch.Generator().manual_seed(0)
    audio = {"waveform": 0.1 * torch.randn(1, 2, 16000, generator=g), "sample_rate": 16000}
    choice = {"format": fmt, **({"quality": quality} if quality else {})}
    with running_node("SaveAudioAdvanced", "1", env):
        out = save_audio_advanced(audio, "audio/ltx", choice)
    assert out["result"] == (audio,)
    (record,) = out["ui"]["audio"]
    assert record["filename"].endswith(f".{fmt}") and record["type"] == "output"
    waveform, rate = read_audio(Path(env.output_dir) / record["subfolder"] / record["filename"])
    assert waveform.shape[0] == 2 and abs(waveform.shape[1] / rate - 1.0) < 0.1


def test_save_audio_advanced_refuses_an_unknown_format_or_quality(env):
    from nodes.audio import save_audio_advanced

    audio = {"waveform": torch.zeros(1, 1, 100), "sample_rate": 16000}
    with running_node("SaveAudioAdvanced", "1", env):
        with pytest.raises(NodeInputError, match="format"):
            save_audio_advanced(audio, "a", {"format": "wav"})
        with pytest.raises(NodeInputError, match="quality"):
            save_audio_advanced(audio, "a", {"format": "mp3", "quality": "64k"})


def test_ltx2_prompt_chat_is_gemma3s_with_lightricks_system_prompts():
    from nodes.text_generate_ltx2 import LTX2_I2V_SYSTEM_PROMPT, LTX2_T2V_SYSTEM_PROMPT, ltx2_chat

    text = ltx2_chat("a fox")
    assert text == (f"<start_of_turn>system\n{LTX2_T2V_SYSTEM_PROMPT.strip()}<end_of_turn>\n<start_of_turn>user\n"
                    "\nUser Raw Input Prompt: a fox.<end_of_turn>\n<start_of_turn>model\n")
    assert "\n<image_soft_token>\n\nUser Raw Input Prompt" in ltx2_chat("a fox", image=True)
    assert LTX2_I2V_SYSTEM_PROMPT.strip() in ltx2_chat("a fox", image=True)
    assert ltx2_chat("a fox", "  Be brief.  ").startswith("<start_of_turn>system\nBe brief.<end_of_turn>")
    assert LTX2_T2V_SYSTEM_PROMPT.startswith("You are a Creative Assistant.") and "#### Example" in LTX2_T2V_SYSTEM_PROMPT


def test_the_dit_loras_reach_every_attention_projection(env, model):
    from comfy_core.lora import load_lora_for_models

    lora = load_file(str(env.folders.full_path("loras", "ltx2-plain.safetensors")))
    _patched, _clip, report = load_lora_for_models(model, None, lora, 1.0, 0.0)
    assert report.unmatched == [] and report.skipped == [] and report.model_keys == len(lora) // 2


def test_text_generate_ltx2_prompt_generates_on_the_chat_and_refuses_images(env, tmp_path):
    from comfy_core.families.ltx2.ltxav_loader import load_ltxav_text_encoder
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip
    from nodes.text_generate_ltx2 import ltx2_chat, text_generate_ltx2_prompt

    gemma = tmp_path / "gemma_3_12B_it_fp4_mixed.safetensors"
    WRITERS_LTX2["gemma3_12b_fp4_mixed"](gemma)
    clip = load_ltxav_text_encoder(gemma, env.folders.full_path("checkpoints", CHECKPOINT))
    system = "Be brief."  # a short chat (Lightricks' system prompts are thousands of tiny-vocabulary tokens)
    with running_node("TextGenerateLTX2Prompt", "1", env):
        text, thinking = text_generate_ltx2_prompt(clip, "a fox", 3, {"sampling_mode": "off"}, system_prompt=system)
        with pytest.raises(NodeInputError, match="image"):
            text_generate_ltx2_prompt(clip, "a fox", 3, {"sampling_mode": "off"}, image=torch.zeros(1, 8, 8, 3),
                                      system_prompt=system)
    ids = generate_with_clip(clip, clip.tokenize(ltx2_chat("a fox", system), min_length=1), 3,
                             SamplingOptions(do_sample=False))
    assert text == (clip.decode(ids).strip() or "a fox") and thinking == ""


def test_ltxv_scheduler_counts_the_video_tokens_of_a_nested_latent():
    from nodes.ltxv_nodes import token_shift

    nested = _nested(0)
    video = nested.unbind()[0]
    assert token_shift({"samples": nested}, 2.05, 0.95) == token_shift({"samples": video}, 2.05, 0.95)


def test_a_multitype_widget_takes_its_saved_value():
    """LTXVEmptyLatentAudio's `frame_rate` is a V3 MultiType ("FLOAT,INT") with a widget: the editor
    saves its value between frames_number and batch_size."""
    import json

    from graph.editor_workflow import widget_slots

    record = json.loads((Path(__file__).resolve().parents[1] / "data" / "object_info_2026" /
                         "LTXVEmptyLatentAudio.json").read_text())
    assert [slot.name for slot in widget_slots(record)] == ["frames_number", "frame_rate", "batch_size"]


def test_a_seed_inside_a_dynamic_combo_has_no_control_widget():
    """TextGenerateLTX2Prompt as the LTX-2.3 templates save it: after the sampling seed come
    presence_penalty, thinking and use_default_template (no control_after_generate value)."""
    import json

    from graph.editor_workflow import expand_slots, widget_slots

    record = json.loads((Path(__file__).resolve().parents[1] / "data" / "object_info_2026" /
                         "TextGenerateLTX2Prompt.json").read_text())
    values = ["", 2048, "on", 0.7, 64, 0.95, 0.05, 1.05, 0, 0, False, True]
    names = [slot.name for slot in expand_slots(widget_slots(record), values)]
    assert names[8:12] == ["sampling_mode.seed", "sampling_mode.presence_penalty", "thinking", "use_default_template"]
