"""Gemma 4 files through CLIPLoader's path (comfy_core/split/text_encoder_files.py ->
comfy_core/text_encoders/gemma4_load.py, comfy_core/families/ltx2/gemma4_text.py): LTX-2.5's
`gemma4-12b-with-proj` (type "ltxv": LTX-2.3's conditioning over Gemma 4's hidden states), the
plain E2B / E4B CLIP (tokenizer from the file, chat template, generation), int8 ConvRot storage;
transformers' Gemma 4 is the numerics reference."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders.gemma4_load import Gemma4FamilyTokenizer, MissingGemma4TokenizerError
from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip
from tests.fixtures.gemma4_files import OVERRIDES, SPECIAL, layout_config, write_gemma4_file

pytest.importorskip("transformers")


def _reference_model(kind: str, weights: dict[str, torch.Tensor]):
    from transformers import Gemma4TextModel

    model = Gemma4TextModel(layout_config(kind).to_transformers()).eval()
    state = {k[len("model."):]: v.to(torch.bfloat16).float() for k, v in weights.items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("embed_scale" in m or "inv_freq" in m for m in missing)
    return model


def _ids(clip, text: str) -> list[int]:
    tokens = clip.tokenize(text)
    (rows,) = tokens.values()
    return [t for t, *_ in rows[0]]


def _ltx_reference(states: tuple[torch.Tensor, ...], weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """LTX's per-stream projection written out: each state RMS-normed per token, flattened over the
    states, scaled by sqrt(out / width), through the video and audio linears."""
    x = torch.stack(states, dim=-1)  # [1, N, W, S]
    x = x * torch.rsqrt(x.pow(2).mean(dim=2, keepdim=True) + 1e-6)
    x = x.flatten(start_dim=2)
    outs = []
    for side in ("video", "audio"):
        weight = weights[f"text_embedding_projection.{side}_aggregate_embed.weight"].to(torch.bfloat16).float()
        bias = weights[f"text_embedding_projection.{side}_aggregate_embed.bias"].to(torch.bfloat16).float()
        outs.append(torch.nn.functional.linear(x * math.sqrt(weight.shape[0] / states[0].shape[-1]), weight, bias))
    return torch.cat(outs, dim=-1)


def test_ltx25_text_encoder_conditions_as_ltx23_over_gemma4(tmp_path: Path) -> None:
    path = tmp_path / "gemma4-12b-with-proj-ltx-2.5-comfy.safetensors"
    weights = write_gemma4_file(path, "12b", projection=True, seed=3)
    clip = load_text_encoders([path], "ltxv")
    assert type(clip.tokenizer).__name__ == "LTXAVGemma4Tokenizer" and clip.tokenizer.clip_name == "gemma4"
    ids = _ids(clip, "a man walks in the rain")
    assert ids[0] == SPECIAL["<bos>"] and SPECIAL["<unk>"] not in ids and len(ids) == 7
    cond = clip.encode_from_tokens(clip.tokenize("a man walks in the rain"))
    model = _reference_model("12b", weights)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    states = (*out.hidden_states[:-1], out.last_hidden_state)
    expected = _ltx_reference(states, weights)
    assert cond.shape == (1, 7, 128 + 64)
    torch.testing.assert_close(cond.float(), expected, rtol=2e-3, atol=2e-3)
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize("a man walks in the rain"))
    assert conditioning[0][1].get("unprocessed_ltxav_embeds") is True


def test_int8_convrot_file_loads_dequantized(tmp_path: Path) -> None:
    plain, quant = tmp_path / "plain.safetensors", tmp_path / "gemma4-12b-int8-convrot.safetensors"
    write_gemma4_file(plain, "12b", projection=True, seed=4, dtype=torch.float32)
    write_gemma4_file(quant, "12b", projection=True, seed=4, quantize="int8_convrot", dtype=torch.float32)
    reference = load_text_encoders([plain], "ltxv")
    a = reference.encode_from_tokens(reference.tokenize("a red car"))
    clip = load_text_encoders([quant], "ltxv")
    b = clip.encode_from_tokens(clip.tokenize("a red car"))
    assert a.shape == b.shape
    assert not torch.equal(a, b)  # the int8 weights are not the float ones ...
    assert float((b - a).norm() / a.norm()) < 0.05  # ... but close to them


@pytest.mark.parametrize("clip_type", ["stable_diffusion", "ltxv"])
def test_plain_gemma4_generates_as_transformers(tmp_path: Path, clip_type: str) -> None:
    """E2B (per-layer inputs, shared keys): greedy generation through the CLIP equals the argmax
    of transformers' logits recomputed over the whole sequence at each step."""
    from transformers import Gemma4ForCausalLM

    path = tmp_path / "gemma4_e2b_it_bf16.safetensors"
    weights = write_gemma4_file(path, "e2b", seed=5)
    clip = load_text_encoders([path], clip_type)
    assert isinstance(clip.tokenizer, Gemma4FamilyTokenizer)
    tokens = clip.tokenize("a dog runs", skip_template=False)
    prompt = [t for t, *_ in tokens["gemma4"][0]]
    chat = "<|turn>user\na dog runs<turn|>\n<|turn>model\n"
    assert prompt == [SPECIAL["<bos>"]] + clip.tokenizer.gemma4.encode(chat)
    generated = generate_with_clip(clip, tokens, 6, SamplingOptions(do_sample=False))
    config = layout_config("e2b").to_transformers()
    lm = Gemma4ForCausalLM(config).eval()
    lm.model.load_state_dict({k[len("model."):]: v.to(torch.bfloat16).float() for k, v in weights.items()})
    lm.lm_head.weight = lm.model.embed_tokens.weight
    sequence = list(prompt)
    expected = []
    with torch.no_grad():
        for _ in range(6):
            token = int(lm(input_ids=torch.tensor([sequence])).logits[0, -1].argmax())
            expected.append(token)
            sequence.append(token)
            if token in (1, 50, 106):
                break
    assert generated == expected


def test_e4b_shared_blocks_from_comfyui_config_and_decode(tmp_path: Path) -> None:
    path = tmp_path / "gemma4_e4b_it_fp8_scaled.safetensors"
    write_gemma4_file(path, "e4b", seed=6, quantize="fp8_scaled")
    from comfy_core.text_encoders.gemma4_load import load_gemma4_clip

    clip = load_gemma4_clip(path, **OVERRIDES["e4b"])
    tower = clip.cond_stage_model.encoder("gemma4")
    assert tower.config.num_kv_shared_layers == 2 and tower.config.hidden_size_per_layer_input == 8
    # ComfyUI's decode: a thought channel becomes <think>...</think>, turn markers and <eos> go
    tok = clip.tokenizer
    ids = tok.gemma4.encode("<|channel>thought\nthe dog<channel|>a cat<turn|>") + [1]
    assert tok.decode(ids) == "<think>\nthe dog</think>a cat"


def test_media_and_missing_tokenizer_are_refused(tmp_path: Path) -> None:
    from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError

    path = tmp_path / "gemma4_e2b_notok.safetensors"
    write_gemma4_file(path, "e2b", tokenizer=False)
    with pytest.raises(MissingGemma4TokenizerError, match="tokenizer_json"):
        load_text_encoders([path], "stable_diffusion")
    good = tmp_path / "gemma4_e2b.safetensors"
    write_gemma4_file(good, "e2b")
    clip = load_text_encoders([good], "stable_diffusion")
    with pytest.raises(TokenizeError, match="audio"):
        clip.tokenize("describe", audio={"waveform": torch.zeros(1, 1, 160), "sample_rate": 16000})
    from comfy_core.text_encoders.generate import GenerationError

    tokens = clip.tokenize("describe", image=torch.zeros(1, 48, 48, 3), skip_template=False)
    with pytest.raises(GenerationError, match="no vision encoder"):  # this file has no vision tower
        generate_with_clip(clip, tokens, 2, SamplingOptions(do_sample=False))
    assert issubclass(MissingGemma4TokenizerError, TextEncoderError)


def test_text_generate_ltx2_prompt_writes_gemma4s_chat(tmp_path: Path) -> None:
    """TextGenerateLTX2Prompt on a Gemma 4 CLIP (the LTX-2.5 templates' E2B prompt writer) sends
    ComfyUI's Gemma 4 chat (LTX-2.4's system prompt, `user prompt: ...`, the final channel open)."""
    from nodes.text_generate_ltx2 import LTX24_T2V_SYSTEM_PROMPT, ltx24_chat, text_generate_ltx2_prompt

    path = tmp_path / "gemma4_e2b_it_int8_convrot.safetensors"
    write_gemma4_file(path, "e2b", seed=7, quantize="int8_convrot")
    clip = load_text_encoders([path], "ltxv")
    chat = ltx24_chat("a red car")
    assert chat == (f"<|turn>system\n{LTX24_T2V_SYSTEM_PROMPT.strip()}<turn|>\n<|turn>user\nuser prompt: a red car"
                    "<turn|>\n<|turn>model\n<|channel>final\n")
    text, reasoning = text_generate_ltx2_prompt(clip, "a red car", 5, {"sampling_mode": "off"})
    ids = generate_with_clip(clip, clip.tokenize(chat, skip_template=False, min_length=1), 5,
                             SamplingOptions(do_sample=False))
    expected = clip.tokenizer.decode(ids).strip()
    assert (text, reasoning) == (expected or "a red car", "")
