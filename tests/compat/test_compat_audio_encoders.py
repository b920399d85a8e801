"""ComfyUI's audio-encoder modules on our runtime (`comfy.audio_encoders.audio_encoders`,
`comfy_extras.nodes_audio_encoder`; compat/audio_encoders_api.py), through a fixture pack that
imports them as packs do (tests/compat/api_packs/audio_encoder_pack): a state dict from a file
loads as the AudioEncoderLoader node loads it and encodes to the same output; an encoder built
from ComfyUI's config dict and filled by `load_sd` is the one the state dict describes; what is
not an audio encoder is ComfyUI's RuntimeError."""
from __future__ import annotations

import pytest
import torch

from tests.compat.api_pack_support import import_api_pack
from tests.fixtures.audio_encoder_files import write_tiny_audio_encoder

AUDIO = {"waveform": torch.sin(torch.linspace(0, 300, 4800)).reshape(1, 1, -1).repeat(1, 2, 1), "sample_rate": 24000}


@pytest.fixture
def audio_pack(session):  # noqa: ANN001, ANN201
    """The pack, called as from inside one of its nodes: the session's environment is the running one."""
    from graph.context import NodeContext, reset_current, set_current

    token = set_current(NodeContext("p", "1", "1", None, session.env, class_type="AudioPackNode"))
    try:
        yield from import_api_pack("audio_encoder_pack")
    finally:
        reset_current(token)


def _folder() -> str:
    import folder_paths

    return folder_paths.get_folder_paths("audio_encoders")[0]


def _same(a: dict, b: dict) -> None:
    assert a["audio_samples"] == b["audio_samples"] == 3200  # 0.2 s resampled to 16 kHz
    assert torch.equal(a["encoded_audio"], b["encoded_audio"])
    assert len(a["encoded_audio_all_layers"]) == len(b["encoded_audio_all_layers"])
    assert all(torch.equal(x, y) for x, y in zip(a["encoded_audio_all_layers"], b["encoded_audio_all_layers"]))


def test_a_pack_loads_a_file_as_the_node_does(audio_pack):  # noqa: ANN001
    from comfy.audio_encoders.audio_encoders import AudioEncoderModel

    from comfy_core.audio_encoders.model import AudioEncoderModel as Core

    write_tiny_audio_encoder(f"{_folder()}/wav2vec2_tiny.safetensors", "wav2vec2_large")
    encoder = audio_pack.load_by_name("wav2vec2_tiny.safetensors")
    assert isinstance(encoder, AudioEncoderModel) and isinstance(encoder, Core) and encoder.kind == "wav2vec2"
    assert encoder.model_sample_rate == 16000 and encoder.dtype == torch.float16  # the text-encoder storage dtype
    output = audio_pack.encode(encoder, AUDIO)
    assert output["encoded_audio"].shape == (1, 9, 128)  # 3200 samples -> 9 frames of the 128-wide tiny model
    node_encoder, node_output = audio_pack.through_nodes("wav2vec2_tiny.safetensors", AUDIO)
    assert isinstance(node_encoder, Core)
    _same(output, node_output)
    assert audio_pack.node_names() == ["AudioEncoderEncode", "AudioEncoderLoader"]


def test_an_encoder_built_from_comfyuis_config_is_the_state_dicts(audio_pack):  # noqa: ANN001
    from comfy_core.audio_encoders.whisper import WhisperAudioEncoder, WhisperConfig

    torch.manual_seed(0)
    network = WhisperAudioEncoder(WhisperConfig(n_mels=8, n_ctx=8, width=128, heads=2, layers=2, ff_dim=512))
    sd = {f"model.{k}": v.detach().clone() for k, v in network.state_dict().items()}
    sd["model.decoder.embed_tokens.weight"] = torch.zeros(4, 128)  # a whole Whisper file: the decoder is dropped
    config = {"model_type": "whisper3", "n_mels": 8, "n_audio_ctx": 8, "n_audio_state": 128, "n_audio_head": 2,
              "n_audio_layer": 2}
    built, missing, unexpected = audio_pack.build(config, sd)
    assert list(missing) == [] and list(unexpected) == []
    assert built.kind == "whisper3" and built.get_sd().keys() == network.state_dict().keys()
    # (heads are not in the shapes: the loader takes width / 64, here 2 as the config says)
    _same(audio_pack.encode(built, AUDIO), audio_pack.encode(audio_pack.from_sd(sd), AUDIO))
    partial, missing, _ = audio_pack.build(config, {k: v for k, v in sd.items() if ".layers.1." not in k})
    assert missing and all(".layers.1." in k for k in missing)  # not strict, as ComfyUI's load_sd


def test_what_is_not_an_audio_encoder_is_comfyuis_runtime_error(audio_pack):  # noqa: ANN001
    with pytest.raises(RuntimeError, match="not an audio encoder"):
        audio_pack.from_sd({"conv.weight": torch.zeros(2, 2)})
    with pytest.raises(RuntimeError, match="model_type"):
        audio_pack.build({"model_type": "hubert"}, {})
