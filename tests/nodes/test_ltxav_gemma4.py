"""LTXAVTextEncoderLoader given a Gemma 4 file (ComfyUI's "matching gemma 4 model", its two-file
`CLIPType.LTXV` branch): the Gemma 4 tower under "gemma4" with the checkpoint's projection (LTX-2.3's
per-stream pair; LTX-2.0's single one with its connectors in compat mode), the text-encoder file's
own projection when the checkpoint has none, and typed errors for a projection that does not fit
or is nowhere; on tests/fixtures/gemma4_files.py's tiny 12B (32 wide, 7 hidden states: the tiny
LTX checkpoints' 224-wide projection input)."""
from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from comfy_core.families.ltx2.encoders import UNPROCESSED_KEY, LTXAVTextEncoderError
from comfy_core.families.ltx2.ltxav_loader import load_ltxav_text_encoder
from comfy_core.families.ltx2.gemma4_text import load_ltx25_text_encoder
from tests.fixtures.gemma4_files import write_gemma4_file
from tests.fixtures.ltx2_text_files import write_tiny_ltx2_checkpoint
from tests.fixtures.template_models_ltx2 import WRITERS_LTX2
from tests.nodes.node_context import folders_env, running_node

LTX23, LTX20, BARE = "ltx-2.3-22b-distilled.safetensors", "ltx-2-19b-dev.safetensors", "ltx-2-no-projection.safetensors"
G12, G12_PROJ, E2B = ("gemma4_12b_it_bf16.safetensors", "gemma4-12b-with-proj-ltx-2.5-comfy-bf16.safetensors",
                      "gemma4_e2b_it_bf16.safetensors")
PROMPT = "a man walks in the rain"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltxav_gemma4")
    environment = folders_env(root)
    models = root / "base" / "models"
    WRITERS_LTX2["ltx23_checkpoint"](models / "checkpoints" / LTX23)
    write_tiny_ltx2_checkpoint(models / "checkpoints" / LTX20, "2.0", seed=1)
    write_tiny_ltx2_checkpoint(models / "checkpoints" / BARE, "2.0", seed=2, projection=False)
    write_gemma4_file(models / "text_encoders" / G12, "12b", seed=3)
    write_gemma4_file(models / "text_encoders" / G12_PROJ, "12b", seed=3, projection=True)  # the same tower
    write_gemma4_file(models / "text_encoders" / E2B, "e2b", seed=4)
    return environment


def _path(env, folder: str, name: str):
    return env.folders.full_path(folder, name)


def _load(env, text_encoder: str, ckpt_name: str):
    from nodes.ltxv_nodes import ltxav_text_encoder_loader

    with running_node("LTXAVTextEncoderLoader", "1", env):
        return ltxav_text_encoder_loader(text_encoder, ckpt_name)[0]


def _encode(clip) -> tuple[torch.Tensor, dict]:
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    return conditioning[0][0], conditioning[0][1]


def test_a_gemma4_file_takes_the_checkpoints_per_stream_projection(env) -> None:
    clip = _load(env, G12, LTX23)
    assert type(clip.tokenizer).__name__ == "LTXAVGemma4Tokenizer" and clip.tokenizer.clip_name == "gemma4"
    cond, extra = _encode(clip)
    assert extra.get(UNPROCESSED_KEY) is True and cond.shape[-1] == 128 + 64  # the tiny LTX-2.3 streams
    # by hand: every hidden state of the tower, RMS-normed per token and state, through the pair
    tower = clip.cond_stage_model.encoder("gemma4")
    ids = [t for t, *_ in clip.tokenize(PROMPT)["gemma4"][0]]
    with torch.no_grad():
        states = torch.stack(tower.hidden_states(torch.tensor([ids])), dim=-1)  # [1, N, W, S]
    x = (states * torch.rsqrt(states.pow(2).mean(dim=2, keepdim=True) + 1e-6)).flatten(start_dim=2)
    weights = load_file(str(_path(env, "checkpoints", LTX23)))
    outs = []
    for side in ("video", "audio"):
        weight = weights[f"text_embedding_projection.{side}_aggregate_embed.weight"].float()
        bias = weights[f"text_embedding_projection.{side}_aggregate_embed.bias"].float()
        outs.append(torch.nn.functional.linear(x * math.sqrt(weight.shape[0] / 32), weight, bias))
    torch.testing.assert_close(cond.float(), torch.cat(outs, dim=-1), rtol=2e-3, atol=2e-3)
    # ComfyUI loads the checkpoint after the text encoder: its projection replaces the file's own
    own = _load(env, G12_PROJ, LTX23)
    torch.testing.assert_close(_encode(own)[0], cond)


def test_ltx20s_single_projection_runs_its_connectors_in_compat_mode(env) -> None:
    clip = _load(env, G12, LTX20)
    assert clip.cond_stage_model.compat_mode
    cond, extra = _encode(clip)
    assert UNPROCESSED_KEY not in extra and cond.shape[-1] == 2 * 32  # video half, audio half


def test_without_a_checkpoint_projection_the_files_own_is_used(env) -> None:
    clip = _load(env, G12_PROJ, BARE)
    reference = load_ltx25_text_encoder(_path(env, "text_encoders", G12_PROJ))
    torch.testing.assert_close(_encode(clip)[0], _encode(reference)[0])
    assert not clip.cond_stage_model.compat_mode
    with pytest.raises(LTXAVTextEncoderError, match="no LTX-2 text projection"):
        load_ltxav_text_encoder(_path(env, "text_encoders", G12), _path(env, "checkpoints", BARE))


def test_a_projection_that_does_not_fit_the_tower_is_refused(env) -> None:
    with pytest.raises(LTXAVTextEncoderError, match=r"8 hidden states\) needs \[\*, 256\]"):  # E2B: 7 blocks
        load_ltxav_text_encoder(_path(env, "text_encoders", E2B), _path(env, "checkpoints", LTX23))


def test_the_clip_generates_with_the_gemma4_tower(env) -> None:
    from nodes.text_generate_ltx2 import text_generate_ltx2_prompt

    clip = _load(env, G12, LTX23)
    with running_node("TextGenerateLTX2Prompt", "2", env):
        text, thinking = text_generate_ltx2_prompt(clip, "a fox", 3, {"sampling_mode": "off"})
    assert isinstance(text, str) and thinking == ""


def test_a_gemma4_file_without_its_tokenizer_is_refused(env, tmp_path) -> None:
    from comfy_core.text_encoders.gemma4_load import MissingGemma4TokenizerError

    path = tmp_path / "gemma4_12b_notok.safetensors"
    write_gemma4_file(path, "12b", seed=5, tokenizer=False)
    with pytest.raises(MissingGemma4TokenizerError, match="tokenizer_json"):
        load_ltxav_text_encoder(path, _path(env, "checkpoints", LTX23))
