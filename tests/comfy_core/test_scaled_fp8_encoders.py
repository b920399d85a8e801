"""ComfyUI's scaled-fp8 text-encoder files in the LLM towers (decoder_llm.convert_weights /
scale_linears): the legacy form (`scaled_fp8` marker, per-layer `scale_weight`, `scale_input`) and
today's per-layer form (`<layer>.comfy_quant` JSON + `weight_scale`, or the same JSON as the
`_quantization_metadata` header entry), written as ComfyUI's quantisers write them (the scale is
amax / 448, the weight divided by it and rounded to float8_e4m3fn). Each tower keeps the fp8
weights and computes weight x scale in float32: equal to transformers' model on the dequantised
weights, and within fp8 rounding of the float32 tower; through CLIPLoader's loader too; typed
errors for what is not read."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.models.storage_cast import ScaledFp8Linear
from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders.errors import TextEncoderError
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

FP8 = torch.float8_e4m3fn
UNSCALED = "model.layers.0.mlp.up_proj.weight"  # left in bf16, as mixed files leave some layers


def quantise(state: dict, form: str = "legacy", scale_input: bool = False) -> tuple[dict, dict]:
    """(the file's tensors, the dequantised float32 weights): every projection but `UNSCALED` in
    float8_e4m3fn with a per-tensor scale (amax / 448), the other tensors bf16."""
    out, dequantised = {}, {}
    for name, tensor in state.items():
        if name.endswith("proj.weight") and name != UNSCALED:
            scale = tensor.abs().amax().float() / 448.0
            stored = (tensor / scale).to(FP8)
            layer = name[:-len(".weight")]
            out[name] = stored
            if form == "legacy":
                out[layer + ".scale_weight"] = scale.reshape(())
                if scale_input:
                    out[layer + ".scale_input"] = torch.ones(())
            else:
                out[layer + ".weight_scale"] = scale.reshape(())
                if form == "comfy_quant":
                    out[layer + ".comfy_quant"] = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()),
                                                               dtype=torch.uint8)
            dequantised[name] = stored.float() * scale
        else:
            out[name] = tensor.to(torch.bfloat16)
            dequantised[name] = out[name].float()
    if form == "legacy":
        out["scaled_fp8"] = torch.empty(0, dtype=FP8)
    return out, dequantised


def header_metadata(state: dict) -> str:
    layers = {n[:-len(".weight_scale")]: {"format": "float8_e4m3fn"} for n in state if n.endswith(".weight_scale")}
    return json.dumps({"format_version": "1.0", "layers": layers})


def _towers():
    from tests.fixtures import gemma_files, llama_files, mistral_files, qwen3_files
    from comfy_core.text_encoders.gemma import GemmaConfig, build_gemma_encoder
    from comfy_core.text_encoders.llama import LlamaConfig, build_llama_encoder
    from comfy_core.text_encoders.mistral import MistralConfig, build_mistral_encoder
    from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder

    return {
        "qwen3": (qwen3_files.tiny_qwen3_state_dict, qwen3_files.reference_model, Qwen3Config, build_qwen3_encoder,
                  lambda tower, ids: tower.encode_ids(ids, layer_idx=None), {}),
        "llama": (llama_files.tiny_llama_state_dict, llama_files.reference_model, LlamaConfig, build_llama_encoder,
                  lambda tower, ids: tower.encode_ids(ids, all_layers=False, layer_idx=None), {}),
        "mistral": (mistral_files.tiny_mistral_state_dict, mistral_files.reference_model, MistralConfig,
                    build_mistral_encoder, lambda tower, ids: tower.encode_ids(ids, all_layers=False, layer_idx=None),
                    {"num_hidden_layers": 2}),
        "gemma": (gemma_files.tiny_gemma_state_dict, gemma_files.reference_model, GemmaConfig, build_gemma_encoder,
                  lambda tower, ids: tower.encode_ids(ids, layer_idx=None), {}),
    }


IDS = torch.tensor([[1, 5, 77, 300, 12, 9, 41]])


@pytest.mark.parametrize("form", ["legacy", "comfy_quant"])
@pytest.mark.parametrize("family", ["qwen3", "llama", "mistral", "gemma"])
def test_every_llm_tower_computes_fp8_weight_times_scale_in_float32(family, form):
    make, reference_model, config_class, build, run, shape = _towers()[family]
    state = make(**shape)
    stored, dequantised = quantise(state, form, scale_input=True)
    config = config_class.detect_from_weights(stored, "")
    tower = build(config, stored)
    layer = tower.transformer.model.layers[1].self_attn.q_proj
    assert isinstance(layer, ScaledFp8Linear) and layer.weight.dtype == FP8
    assert layer.weight.data_ptr() == stored["model.layers.1.self_attn.q_proj.weight"].data_ptr()  # not copied
    assert not isinstance(tower.transformer.model.layers[0].mlp.up_proj, ScaledFp8Linear)
    with torch.no_grad():
        ours = run(tower, IDS)
        expected = reference_model(dequantised, **shape)(input_ids=IDS).last_hidden_state
        full = reference_model(state, **shape)(input_ids=IDS).last_hidden_state
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
    error = float((ours - full).abs().max() / full.abs().max())
    assert 0 < error < 0.15  # float8_e4m3fn keeps 3 mantissa bits


@pytest.fixture(scope="module")
def qwen3_state():
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict

    return tiny_qwen3_state_dict()


def _encode(clip, ids):
    return clip.cond_stage_model.qwen3_4b.encode_ids(ids, layer_idx=-2)


def test_scaled_fp8_qwen3_files_through_cliploader(tmp_path, qwen3_state):
    from tests.fixtures.qwen3_files import reference_model

    legacy, dequantised = quantise(qwen3_state, "legacy", scale_input=True)
    save_file(legacy, str(tmp_path / "qwen_3_4b_fp8_scaled.safetensors"))
    per_layer, _ = quantise(qwen3_state, "comfy_quant")
    save_file(per_layer, str(tmp_path / "qwen_3_4b_fp8_mixed.safetensors"))
    header, _ = quantise(qwen3_state, "header")
    save_file(header, str(tmp_path / "qwen_3_4b_fp8_header.safetensors"),
              metadata={"_quantization_metadata": header_metadata(header)})
    ids = torch.tensor([[151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198]])
    with torch.no_grad():
        expected = reference_model(dequantised)(input_ids=ids, output_hidden_states=True).hidden_states[-2]
    for name in ("qwen_3_4b_fp8_scaled", "qwen_3_4b_fp8_mixed", "qwen_3_4b_fp8_header"):
        clip = load_text_encoders([tmp_path / f"{name}.safetensors"], "lumina2")
        layer = clip.cond_stage_model.qwen3_4b.transformer.model.layers[2].mlp.down_proj
        assert isinstance(layer, ScaledFp8Linear) and layer.weight.dtype == FP8, name
        torch.testing.assert_close(_encode(clip, ids), expected, rtol=1e-5, atol=1e-5, msg=name)
    cond = clip.encode_from_tokens(clip.tokenize("a red fox"))
    assert cond.shape[-1] == 32 and torch.isfinite(cond).all()


def test_a_scaled_fp8_lm_head_generates_with_its_scale(qwen3_state):
    from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder

    head = torch.randn(qwen3_state["model.embed_tokens.weight"].shape) * 0.1
    stored, _ = quantise(qwen3_state, "legacy")
    scale = head.abs().amax() / 448.0
    stored.update({"lm_head.weight": (head / scale).to(FP8), "lm_head.scale_weight": scale.reshape(())})
    tower = build_qwen3_encoder(Qwen3Config.detect_from_weights(stored, ""), stored)
    hidden = torch.randn(1, 32)
    expected = hidden @ ((head / scale).to(FP8).float() * scale).t()
    torch.testing.assert_close(tower.logits(hidden), expected, rtol=1e-5, atol=1e-5)


def test_what_is_not_read_is_a_typed_error(qwen3_state):
    from comfy_core.text_encoders.qwen3 import Qwen3Config, Qwen3KeyError, build_qwen3_encoder

    config = Qwen3Config.detect_from_weights(qwen3_state, "")
    legacy, _ = quantise(qwen3_state, "legacy")
    unmarked = {k: v for k, v in legacy.items() if k != "scaled_fp8"}
    with pytest.raises(Qwen3KeyError, match="without the scaled_fp8 marker"):
        build_qwen3_encoder(config, unmarked)
    per_layer, _ = quantise(qwen3_state, "comfy_quant")
    orphan = {k: v for k, v in per_layer.items() if k != "model.layers.0.self_attn.q_proj.comfy_quant"}
    with pytest.raises(Qwen3KeyError, match="q_proj.comfy_quant' metadata"):
        build_qwen3_encoder(config, orphan)
    int8 = dict(per_layer, **{"model.layers.0.self_attn.q_proj.comfy_quant": torch.tensor(
        list(json.dumps({"format": "int8_tensorwise"}).encode()), dtype=torch.uint8)})
    with pytest.raises(Qwen3KeyError, match="format 'int8_tensorwise' is not read"):
        build_qwen3_encoder(config, int8)
    blocked = dict(legacy, **{"model.layers.0.self_attn.q_proj.scale_weight": torch.ones(64)})
    with pytest.raises(Qwen3KeyError, match="one scale per layer"):
        build_qwen3_encoder(config, blocked)
    embedding = dict(legacy, **{"model.embed_tokens.scale_weight": torch.ones(())})
    with pytest.raises(Qwen3KeyError, match="not a linear layer"):
        build_qwen3_encoder(config, embedding)
    bad_json = dict(per_layer, **{"model.layers.0.self_attn.q_proj.comfy_quant": torch.tensor([1, 2, 3],
                                                                                             dtype=torch.uint8)})
    with pytest.raises(Qwen3KeyError, match="not ComfyUI's quantisation JSON"):
        build_qwen3_encoder(config, bad_json)


def test_a_damaged_quantisation_header_is_a_typed_error(tmp_path, qwen3_state):
    header, _ = quantise(qwen3_state, "header")
    save_file(header, str(tmp_path / "bad.safetensors"), metadata={"_quantization_metadata": "{not json"})
    with pytest.raises(TextEncoderError, match="_quantization_metadata"):
        load_text_encoders([tmp_path / "bad.safetensors"], "lumina2")


def test_qwen25vl_reads_todays_per_layer_form_text_and_vision(tmp_path):
    from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig, Qwen25VLKeyError
    from comfy_core.text_encoders.qwen25vl_load import build_qwen25vl_encoder
    from tests.fixtures.qwen25vl_files import TINY_TEXT, reference_model, tiny_qwen25vl_state_dict

    state = tiny_qwen25vl_state_dict()
    names = [k for k in state if k.startswith("model.layers.") and k.endswith("proj.weight")][:5]
    names.append("visual.blocks.0.attn.qkv.weight")
    stored, true = dict(state), dict(state)
    conf = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
    for name in names:
        scale = state[name].abs().max() / 448.0
        layer = name[:-len(".weight")]
        stored.update({name: (state[name] / scale).to(FP8), layer + ".weight_scale": scale.reshape(()),
                       layer + ".comfy_quant": conf})
        true[name] = stored[name].float() * scale
    config = Qwen25VLConfig.detect_from_weights(stored, "")
    tower = build_qwen25vl_encoder(config, stored)
    assert isinstance(tower.transformer.visual.blocks[0].attn.qkv, ScaledFp8Linear)
    ids = torch.tensor([[17, 872, 198, 64, 654, 315, 264]])
    with torch.no_grad():
        expected = reference_model(true, vocab_size=TINY_TEXT["vocab_size"]).model.language_model(input_ids=ids)
    torch.testing.assert_close(tower.encode_ids(ids), expected.last_hidden_state, atol=1e-5, rtol=1e-5)
    int8 = dict(stored, **{names[0][:-len(".weight")] + ".comfy_quant": torch.tensor(
        list(json.dumps({"format": "int8_tensorwise"}).encode()), dtype=torch.uint8)})
    with pytest.raises(Qwen25VLKeyError, match="int8_tensorwise"):
        build_qwen25vl_encoder(config, int8)
