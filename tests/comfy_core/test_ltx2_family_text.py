"""LTX-2's text path (LTXAVTextEncoderLoader's CLIP: the Gemma 3 file + the checkpoint's feature
projection and connectors, ComfyUI's `comfy/text_encoders/lt.py`): the tokenizer (the file's
SentencePiece model, `<bos>`, left padding to 1024), the conditioning against a direct composition
of the tested pieces (tower -> projection -> the network's connectors) and against diffusers'
LTX-2 pipeline (`LTX2Pipeline.encode_prompt` on transformers' Gemma 3, then `LTX2TextConnectors`,
0.42.1) within 1e-4, the unprocessed path (the model runs the connectors), typed refusals, and the
node end to end: LTXAVTextEncoderLoader + CLIPTextEncode + UNETLoader -> apply_model on the packed
latent."""
from __future__ import annotations

import math
import types

import pytest
import torch

from comfy_core.families.ltx2.encoders import (GEMMA3_SLOT, LTXAV_TEXT_ENCODERS, LTXAVTextEncoderError,
                                               MissingGemma3TokenizerError)
from comfy_core.families.ltx2.ltxav_loader import load_ltxav_text_encoder
from comfy_core.families.ltx2.text import TextEmbeddingProjection
from comfy_core.text_encoders.encoder_set import TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.gemma_tokenizer import GemmaSentencePiece
from tests.fixtures.gemma_files import tiny_spiece_model
from tests.fixtures.ltx2_files import CAPTION, CONNECTOR_HEAD_DIM, CONNECTOR_HEADS, REGISTERS, to_diffusers_connector
from tests.fixtures.ltx2_files import tiny_ltx2_state_dict
from tests.fixtures.ltx2_text_files import (HIDDEN_STATES, gemma3_config, tiny_gemma3_state_dict, tiny_projection,
                                            write_ltx2_text_files, write_tiny_gemma3, write_tiny_ltx2_checkpoint)

PROMPT = "a photo of a cat sitting on a red chair"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_ltx2_text_files(tmp_path_factory.mktemp("ltx2") / "models")


@pytest.fixture(scope="module")
def clip(files):
    return load_ltxav_text_encoder(files["gemma"], files["checkpoint"])


def _ids(text):
    return GemmaSentencePiece(tiny_spiece_model())(text)["input_ids"]  # <bos> + pieces


def test_tokens_are_left_padded_to_1024_with_bos_first(clip):
    chunks = clip.tokenize(PROMPT)[GEMMA3_SLOT]
    ids = _ids(PROMPT)
    assert len(chunks) == 1 and len(chunks[0]) == 1024
    assert [t for t, _ in chunks[0]] == [0] * (1024 - len(ids)) + ids
    assert ids[0] == 2 and all(w == 1.0 for _, w in chunks[0])
    weighted = clip.tokenize("(a cat:1.5)")[GEMMA3_SLOT][0]  # weights are off (ComfyUI's disable_weights)
    assert {w for _, w in weighted} == {1.0}
    short = clip.tokenize(PROMPT, tokenizer_options={"gemma3_12b_min_length": 4})[GEMMA3_SLOT][0]
    assert [t for t, _ in short] == ids  # longer than the minimum: no padding
    templated = clip.tokenize("x", skip_template=False)[GEMMA3_SLOT][0]
    assert [t for t, _ in templated if t != 0][:3] == _ids("<start_of_turn>system")[:3]
    with pytest.raises(TokenizeError, match="image"):
        clip.tokenize(PROMPT, image=torch.zeros(1, 8, 8, 3))


def _direct(files, text):
    """The same conditioning composed by hand from the tested pieces."""
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.text_encoders.gemma3 import build_gemma3_encoder

    tower = build_gemma3_encoder(gemma3_config(), tiny_gemma3_state_dict())
    projection = TextEmbeddingProjection.from_weights(
        {"text_embedding_projection.aggregate_embed.weight": tiny_projection()}, width=CAPTION)
    network = load_diffusion_model(files["unet"]).model.diffusion_model
    ids = torch.tensor([_ids(text)])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        states = tower.hidden_states(ids, mask)
        projected = projection(states, mask)
        return network.preprocess_text_embeds(projected, unprocessed=True), projected, tower, states


def test_conditioning_is_tower_projection_connectors(files, clip):
    cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    tensor, options = cond[0]
    want, _, _, _ = _direct(files, PROMPT)
    n = len(_ids(PROMPT))
    assert tensor.shape == (1, math.ceil(n / REGISTERS) * REGISTERS, 2 * CAPTION)  # padding dropped, registers added
    assert torch.allclose(tensor, want, atol=1e-5), (tensor - want).abs().max()
    assert options == {"pooled_output": None}  # no attention mask, no unprocessed flag (LTX-2.0 compat mode)


def test_left_padding_does_not_change_the_kept_states(files):
    """Why the encoder skips the leading pads: with them masked, the kept tokens' states equal
    those of the tokens alone (causal attention, relative RoPE)."""
    _, _, tower, states = _direct(files, PROMPT)
    ids = _ids(PROMPT)
    padded = torch.tensor([[0] * 9 + ids])
    mask = torch.tensor([[0] * 9 + [1] * len(ids)])
    with torch.no_grad():
        full = tower.hidden_states(padded, mask)
    for a, b in zip(states, full):
        assert torch.allclose(a, b[:, 9:], atol=1e-5), (a - b[:, 9:]).abs().max()


class _Tokenizer:
    """transformers' tokenizer call as diffusers makes it, over the same SentencePiece model (its
    GemmaTokenizer cannot be built from a bare SentencePiece file here)."""

    padding_side, pad_token, eos_token = "left", "<pad>", "<eos>"

    def __call__(self, prompts, padding, max_length, truncation, add_special_tokens, return_tensors):
        assert padding == "max_length" and self.padding_side == "left"
        ids = [_ids(p)[:max_length] for p in prompts]
        tokens = torch.tensor([[0] * (max_length - len(i)) + i for i in ids])
        mask = torch.tensor([[0] * (max_length - len(i)) + [1] * len(i) for i in ids])
        return types.SimpleNamespace(input_ids=tokens, attention_mask=mask)


def test_matches_diffusers_ltx2_encode_prompt(files, clip):
    transformers = pytest.importorskip("transformers")
    pipeline = pytest.importorskip("diffusers.pipelines.ltx2.pipeline_ltx2")
    connectors = pytest.importorskip("diffusers.pipelines.ltx2.connectors")
    encoder = transformers.Gemma3TextModel(gemma3_config().to_transformers()).eval()
    encoder.load_state_dict({k[len("model."):]: v for k, v in tiny_gemma3_state_dict().items()}, strict=True)
    ref = connectors.LTX2TextConnectors(
        caption_channels=CAPTION, text_proj_in_factor=HIDDEN_STATES,
        video_connector_num_attention_heads=CONNECTOR_HEADS,
        video_connector_attention_head_dim=CONNECTOR_HEAD_DIM, video_connector_num_learnable_registers=REGISTERS,
        audio_connector_num_attention_heads=CONNECTOR_HEADS, audio_connector_attention_head_dim=CONNECTOR_HEAD_DIM,
        audio_connector_num_learnable_registers=REGISTERS, rope_type="split", rope_double_precision=True).eval()
    bare = tiny_ltx2_state_dict("2.0")
    state = {"text_proj_in.weight": tiny_projection()}
    for side in ("video", "audio"):
        state.update({f"{side}_connector.{k}": v for k, v in to_diffusers_connector(bare, side).items()})
    ref.load_state_dict(state, strict=True)
    owner = types.SimpleNamespace(tokenizer=_Tokenizer(), text_encoder=encoder, _execution_device=torch.device("cpu"))
    owner._get_gemma_prompt_embeds = types.MethodType(pipeline.LTX2Pipeline._get_gemma_prompt_embeds, owner)
    # ComfyUI drops the padding and appends registers up to a whole block; diffusers pads to
    # max_sequence_length and fills the padding with registers: equal when that is the same length.
    length = math.ceil(len(_ids(PROMPT)) / REGISTERS) * REGISTERS
    with torch.no_grad():
        embeds, mask, _, _ = pipeline.LTX2Pipeline.encode_prompt(
            owner, PROMPT, do_classifier_free_guidance=False, max_sequence_length=length, device=torch.device("cpu"),
            dtype=torch.float32)
        video, audio, _ = ref(embeds, mask, padding_side="left")
    ours = clip.encode_from_tokens(clip.tokenize(PROMPT))
    assert ours.shape == (1, length, 2 * CAPTION)
    assert torch.allclose(ours[..., :CAPTION], video, atol=1e-4), (ours[..., :CAPTION] - video).abs().max()
    assert torch.allclose(ours[..., CAPTION:], audio, atol=1e-4), (ours[..., CAPTION:] - audio).abs().max()


def test_unprocessed_conditioning_goes_through_the_models_connectors(files, clip):
    """Checkpoints whose connectors the encoder does not run (ComfyUI's non-compat mode): the
    conditioning is the projected features flagged `unprocessed_ltxav_embeds`, and the model's
    conditions run its connectors (ComfyUI's `LTXAV.extra_conds`), giving the same tensor."""
    from comfy_core.split.diffusion_model import load_diffusion_model

    tower = clip.cond_stage_model.encoder(GEMMA3_SLOT)
    plain = TextEncoderSet(LTXAV_TEXT_ENCODERS, {GEMMA3_SLOT: tower})
    plain.attach(clip.cond_stage_model.text_embedding_projection, None)
    tokens = clip.tokenize(PROMPT)
    with torch.no_grad():
        projected, pooled, extra = plain.encode_token_weights(tokens)
    assert extra == {"unprocessed_ltxav_embeds": True} and pooled is None and projected.shape[-1] == CAPTION
    model = load_diffusion_model(files["unet"]).model
    out = model.extra_inputs(cross_attn=projected, unprocessed_ltxav_embeds=True, device=torch.device("cpu"))
    compat = clip.encode_from_tokens(tokens)
    assert torch.allclose(out["c_crossattn"], compat, atol=1e-5)
    passed = model.extra_inputs(cross_attn=compat, device=torch.device("cpu"))  # already processed: as it is
    assert torch.equal(passed["c_crossattn"], compat)


def test_refusals_name_what_is_missing(tmp_path, files):
    no_tokenizer = write_tiny_gemma3(tmp_path / "te" / "bare.safetensors", with_tokenizer=False)
    with pytest.raises(MissingGemma3TokenizerError, match="spiece_model"):
        load_ltxav_text_encoder(no_tokenizer, files["checkpoint"])
    no_projection = write_tiny_ltx2_checkpoint(tmp_path / "ck" / "noproj.safetensors", projection=False)
    with pytest.raises(LTXAVTextEncoderError, match="text_embedding_projection"):
        load_ltxav_text_encoder(files["gemma"], no_projection)
    dual = write_tiny_ltx2_checkpoint(tmp_path / "ck" / "dual.safetensors",
                                      extra={"text_embedding_projection.audio_aggregate_embed.bias": torch.zeros(4)})
    with pytest.raises(LTXAVTextEncoderError, match="LTX-2.3"):
        load_ltxav_text_encoder(files["gemma"], dual)
    with pytest.raises(LTXAVTextEncoderError, match="Gemma 3"):
        load_ltxav_text_encoder(files["checkpoint"], files["checkpoint"])
