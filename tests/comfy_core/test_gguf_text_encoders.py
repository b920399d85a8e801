"""GGUF text encoders: the reader and dequantisers of comfy_core/weights/gguf.py against the `gguf`
package's reference (its numpy dequantisers, exactly), and llama.cpp-named GGUF files of the tiny
LLM towers (written with `gguf`'s writer) loaded through `load_text_encoders` (CLIPLoader's path):
Qwen3 from Q8_0 against the same weights in safetensors within the quantisation error and
against the dequantised weights exactly; K-quant towers against gguf's dequantised weights in
transformers' model; Llama's permuted q/k rows restored; Gemma 2's norms; Mistral's tekken
tokenizer rebuilt from the GGUF vocabulary; weights kept quantised; typed errors."""
from __future__ import annotations

import re
import struct

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from comfy_core.split.text_encoder_files import load_text_encoders  # noqa: E402
from comfy_core.text_encoders.gguf_files import (GGUFTextEncoderError, GGUFTextEncoderFile,  # noqa: E402
                                                 llama_cpp_name, unpermute_rows)
from comfy_core.text_encoders.qwen3 import Qwen3Config, build_qwen3_encoder  # noqa: E402
from comfy_core.weights.gguf import (GGUFError, GGUFLinear, GGUFTensor, GGUFTypeError, TYPES_BY_NAME,  # noqa: E402
                                     dequantize, dequantize_rows, read_gguf)
from tests.fixtures.clips import one_thread  # noqa: E402,F401  (module-wide one-thread torch)

QUANTISED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
_OURS_TO_CPP = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
                "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down", "post_attention_layernorm": "ffn_norm"}
_GEMMA_TO_CPP = {**_OURS_TO_CPP, "post_attention_layernorm": "post_attention_norm",
                 "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm"}


# --- writing llama.cpp-named files with gguf's writer ------------------------------------------------

def cpp_name(ours: str, arch: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if ours in top:
        return top[ours]
    index, part, kind = re.match(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)$", ours).groups()
    return f"blk.{index}.{(_GEMMA_TO_CPP if arch == 'gemma2' else _OURS_TO_CPP)[part]}.{kind}"


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k row order for its interleaved RoPE (written here for the test)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_blocks(qtype: str, rows: int, row_values: int, seed: int, scale: float = 2e-3) -> np.ndarray:
    """Raw blocks of `qtype` [rows, row_bytes] with random payload bytes and small float16 scales
    (gguf's writer has no K-quant quantiser, so K-quant files are written from raw blocks)."""
    t = TYPES_BY_NAME[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows * row_values // t.block_size, t.type_size), dtype=np.uint8)
    halves = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
              "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,)}[qtype]
    for start in halves:
        values = (rng.uniform(0.5, 1.0, size=blocks.shape[0]) * scale).astype(np.float16)
        blocks[:, start:start + 2] = values.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def write_gguf(path, state: dict, arch: str, types: dict | None = None, metadata: dict | None = None,
               raw: dict | None = None, heads: tuple[int, int] | None = None, tokens: tuple | None = None,
               spm=None):
    """`state` (our names) as a GGUF file of llama.cpp's names: each tensor in `types[name]` (a
    quantisation gguf can write; default F32), or the raw blocks `raw[name] = (qtype, bytes)`;
    Llama's q/k rows permuted as llama.cpp does (`heads` = (heads, kv heads)); Gemma's norms + 1."""
    writer = gguf.GGUFWriter(str(path), arch)
    if heads is not None:
        writer.add_uint32(f"{arch}.attention.head_count", heads[0])
        writer.add_uint32(f"{arch}.attention.head_count_kv", heads[1])
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    if spm is not None:  # a SentencePiece vocabulary as llama.cpp writes one
        writer.add_tokenizer_model("llama")
        writer.add_token_list([p.piece for p in spm.pieces])
        writer.add_token_scores([p.score for p in spm.pieces])
        writer.add_token_types([p.type for p in spm.pieces])
        for add, value in ((writer.add_bos_token_id, spm.trainer_spec.bos_id), (writer.add_eos_token_id,
                           spm.trainer_spec.eos_id), (writer.add_unk_token_id, spm.trainer_spec.unk_id),
                          (writer.add_pad_token_id, spm.trainer_spec.pad_id)):
            add(value)
        writer.add_add_space_prefix(spm.normalizer_spec.add_dummy_prefix)
        writer.add_remove_extra_whitespaces(spm.normalizer_spec.remove_extra_whitespaces)
    if tokens is not None:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens[0])
        writer.add_token_types(tokens[1])
    for name, tensor in state.items():
        target = cpp_name(name, arch)
        if raw and name in raw:
            qtype, blocks = raw[name]
            writer.add_tensor(target, blocks, raw_dtype=getattr(Q, qtype))
            continue
        array = tensor.float().numpy()
        if arch == "gemma2" and name.endswith("norm.weight"):
            array = array + 1.0
        if arch == "llama" and heads is not None and name.endswith(("q_proj.weight", "k_proj.weight")):
            array = llama_cpp_permute(array, heads[0] if "q_proj" in name else heads[1])
        qtype = (types or {}).get(name, "F32")
        if qtype == "F32":
            writer.add_tensor(target, np.ascontiguousarray(array, dtype=np.float32))
        elif qtype == "F16":
            writer.add_tensor(target, np.ascontiguousarray(array, dtype=np.float16))
        else:
            writer.add_tensor(target, gguf.quants.quantize(array, getattr(Q, qtype)), raw_dtype=getattr(Q, qtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantisable(name: str, tensor: torch.Tensor, block: int = 32) -> bool:
    return tensor.dim() == 2 and tensor.shape[-1] % block == 0 and "embed_tokens" not in name


# --- the dequantisers against gguf's reference ------------------------------------------------------

@pytest.mark.parametrize("qtype", QUANTISED)
def test_every_dequantiser_equals_ggufs_reference_exactly(qtype):
    t = TYPES_BY_NAME[qtype]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(5, 3 * t.type_size), dtype=np.uint8)  # any bytes, scales included
    with np.errstate(all="ignore"):
        reference = torch.from_numpy(gguf.quants.dequantize(raw, getattr(Q, qtype)))
    ours = dequantize(GGUFTensor("w", t, torch.Size((5, 3 * t.block_size)), torch.from_numpy(raw)))
    assert ours.dtype == torch.float32 and ours.shape == reference.shape
    finite = torch.isfinite(reference)
    assert torch.equal(torch.isfinite(ours), finite)
    assert torch.equal(ours[finite], reference[finite])


@pytest.mark.parametrize("qtype", ["F16", "BF16", "Q8_0", "Q4_0", "Q5_1"])
def test_files_written_by_gguf_read_back_as_ggufs_reader_reads_them(tmp_path, qtype):
    weights = torch.randn(6, 64)
    path = write_gguf(tmp_path / "w.gguf", {"model.layers.0.mlp.up_proj.weight": weights}, "qwen3",
                      types={"model.layers.0.mlp.up_proj.weight": qtype}, metadata={"general.name": "tiny"})
    tensors, metadata = read_gguf(path)
    assert metadata["general.architecture"] == "qwen3" and metadata["general.name"] == "tiny"
    tensor = tensors["blk.0.ffn_up.weight"]
    assert tensor.shape == (6, 64) and tensor.dtype == qtype
    reader = gguf.GGUFReader(str(path))
    expected = torch.from_numpy(np.asarray(gguf.quants.dequantize(reader.tensors[0].data, reader.tensors[0].tensor_type),
                                           dtype=np.float32)).reshape(6, 64)
    assert torch.equal(dequantize(tensor), expected)
    rows = torch.tensor([4, 1])
    assert torch.equal(dequantize_rows(tensor, rows), expected[rows])
    if qtype in ("F16", "BF16"):
        assert not tensor.quantized and torch.equal(tensor.plain().float(), expected)


def test_damaged_files_are_typed_errors(tmp_path):
    (tmp_path / "not.gguf").write_bytes(b"GGML" + bytes(20))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf(tmp_path / "not.gguf")
    (tmp_path / "v9.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 9, 0, 0))
    with pytest.raises(GGUFError, match="version 9"):
        read_gguf(tmp_path / "v9.gguf")
    good = write_gguf(tmp_path / "good.gguf", {"model.norm.weight": torch.ones(32)}, "qwen3").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(good[:40])
    with pytest.raises(GGUFError, match="truncated|past the end"):
        read_gguf(tmp_path / "cut.gguf")
    (tmp_path / "short.gguf").write_bytes(good[:-64])
    with pytest.raises(GGUFError, match="extends past the end"):
        read_gguf(tmp_path / "short.gguf")
    odd = bytearray(good)
    type_at = good.index(b"output_norm.weight") + len(b"output_norm.weight") + 4 + 8  # after rank and dims
    odd[type_at:type_at + 4] = struct.pack("<I", 99)
    (tmp_path / "odd.gguf").write_bytes(bytes(odd))
    with pytest.raises(GGUFTypeError, match="ggml type 99"):
        read_gguf(tmp_path / "odd.gguf")


def test_a_gguf_linear_keeps_its_weight_quantised_and_dequantises_per_call():
    blocks = random_blocks("Q4_K", 3, 256, seed=1)
    tensor = GGUFTensor("blk.0.ffn_up.weight", TYPES_BY_NAME["Q4_K"], torch.Size((3, 256)), torch.from_numpy(blocks))
    bias = torch.randn(3)
    layer = GGUFLinear(tensor, bias)
    assert layer.qweight.dtype == torch.uint8 and layer.qweight.shape == (3, 144)
    x = torch.randn(2, 256)
    expected = torch.nn.functional.linear(x, torch.from_numpy(gguf.quants.dequantize(blocks, Q.Q4_K)), bias)
    torch.testing.assert_close(layer(x), expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(GGUFError, match="2 dimensions"):
        GGUFLinear(GGUFTensor("x", TYPES_BY_NAME["Q8_0"], torch.Size((32,)), torch.zeros(1, 34, dtype=torch.uint8)))


def test_llama_cpp_names_and_the_row_permutation():
    assert llama_cpp_name("blk.3.attn_q.weight", "qwen3") == "model.layers.3.self_attn.q_proj.weight"
    assert llama_cpp_name("blk.0.attn_k_norm.weight", "qwen3") == "model.layers.0.self_attn.k_norm.weight"
    assert llama_cpp_name("blk.1.ffn_norm.weight", "llama") == "model.layers.1.post_attention_layernorm.weight"
    assert llama_cpp_name("blk.1.ffn_norm.weight", "gemma2") == "model.layers.1.pre_feedforward_layernorm.weight"
    assert llama_cpp_name("token_embd.weight", "llama") == "model.embed_tokens.weight"
    assert llama_cpp_name("output.weight", "qwen3") == "lm_head.weight"
    with pytest.raises(GGUFTextEncoderError, match="not a block tensor"):
        llama_cpp_name("blk.0.ssm_conv1d.weight", "qwen3")
    w = np.arange(24 * 2, dtype=np.float32).reshape(24, 2)
    permuted = torch.from_numpy(llama_cpp_permute(w, 3))
    assert torch.equal(permuted[unpermute_rows(24, 3)], torch.from_numpy(w))


# --- towers from GGUF files --------------------------------------------------------------------------

IDS = torch.tensor([[151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198, 151644, 77091, 198]])


@pytest.fixture(scope="module")
def qwen3_state():
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict

    return tiny_qwen3_state_dict()


@pytest.fixture(scope="module")
def qwen3_q8(tmp_path_factory, qwen3_state):
    types = {n: "Q8_0" for n, t in qwen3_state.items() if quantisable(n, t)}
    types["model.embed_tokens.weight"] = "F16"
    return write_gguf(tmp_path_factory.mktemp("q8") / "qwen3-4b-Q8_0.gguf", qwen3_state, "qwen3", types=types,
                      heads=(4, 2))


def _dequantised_state(path) -> dict[str, torch.Tensor]:
    """The file's weights as gguf's reader and dequantisers give them, under our names."""
    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        values = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        out[llama_cpp_name(t.name, "qwen3")] = torch.from_numpy(values.reshape(tuple(reversed([int(d) for d in t.shape]))).copy())
    return out


def test_a_q8_0_qwen3_file_keeps_its_linears_quantised(qwen3_q8):
    clip = load_text_encoders([qwen3_q8], "lumina2")
    tower = clip.cond_stage_model.qwen3_4b
    block = tower.transformer.model.layers[0]
    assert isinstance(block.self_attn.q_proj, GGUFLinear) and block.self_attn.q_proj.gguf_type.name == "Q8_0"
    assert block.mlp.down_proj.weight.dtype == torch.float32  # rows of 48 are not Q8_0 blocks: F32 in the file
    assert tower.token_embedding().weight.dtype == torch.float16


def test_a_q8_0_qwen3_tower_equals_its_dequantised_weights_and_the_safetensors_tower_within_q8(qwen3_q8, qwen3_state):
    from tests.fixtures.qwen3_files import reference_model

    clip = load_text_encoders([qwen3_q8], "ltxv")  # the llm_qwen3_text_gen template's type
    tower = clip.cond_stage_model.qwen3_4b
    ours = tower.encode_ids(IDS, layer_idx=None)
    with torch.no_grad():
        exact = reference_model(_dequantised_state(qwen3_q8))(input_ids=IDS).last_hidden_state
        full = reference_model(qwen3_state)(input_ids=IDS).last_hidden_state
    torch.testing.assert_close(ours, exact, rtol=1e-5, atol=1e-5)
    config = Qwen3Config.detect_from_weights({k: v for k, v in qwen3_state.items()}, "")
    safetensors_tower = build_qwen3_encoder(config, qwen3_state)
    torch.testing.assert_close(safetensors_tower.encode_ids(IDS, layer_idx=None), full, rtol=1e-5, atol=1e-5)
    # Q8_0 keeps ~8 bits per weight: the states move by well under a percent of their scale.
    error = (ours - full).abs().max() / full.abs().max()
    assert 0 < error < 2e-2


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K"])
def test_k_quant_towers_match_transformers_on_ggufs_dequantised_weights(tmp_path, qtype):
    from tests.fixtures.qwen3_files import reference_model, tiny_qwen3_state_dict

    shape = dict(hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, vocab_size=512)
    state = tiny_qwen3_state_dict(seed=3, **shape)
    raw = {name: (qtype, random_blocks(qtype, t.shape[0], t.shape[1], seed=i, scale=2.5e-4))
           for i, (name, t) in enumerate(state.items()) if t.dim() == 2 and "embed_tokens" not in name}
    path = write_gguf(tmp_path / f"tiny-{qtype}.gguf", state, "qwen3", raw=raw)
    clip = load_text_encoders([path], "lumina2")
    tower = clip.cond_stage_model.qwen3_4b
    assert isinstance(tower.transformer.model.layers[1].mlp.down_proj, GGUFLinear)
    ids = torch.tensor([[3, 17, 250, 9, 511, 0]])
    with torch.no_grad():
        expected = reference_model(_dequantised_state(path), **shape)(input_ids=ids, output_hidden_states=True)
    expected = expected.hidden_states[-2]  # random K-quant blocks have a mean: states of order 1e3
    torch.testing.assert_close(tower.encode_ids(ids, layer_idx=-2), expected, rtol=1e-5,
                               atol=1e-6 * float(expected.abs().max()))


def test_a_llama_file_gets_its_q_k_rows_back(tmp_path):
    from tests.fixtures.llama_files import reference_model, tiny_llama_state_dict

    state = tiny_llama_state_dict()
    types = {n: "Q8_0" for n, t in state.items() if quantisable(n, t)}
    path = write_gguf(tmp_path / "llama-3.1-8b-Q8_0.gguf", state, "llama", types=types, heads=(2, 1))
    clip = load_text_encoders([path], "hidream")
    tower = clip.cond_stage_model.llama
    ids = torch.tensor([[128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679]])
    with torch.no_grad():
        expected = reference_model(state)(input_ids=ids).last_hidden_state
    ours = tower.encode_ids(ids, all_layers=False, layer_idx=None)
    error = (ours - expected).abs().max() / expected.abs().max()
    assert error < 2e-2  # within Q8_0; the rows out of order would move the states by order one
    unpermuted = write_gguf(tmp_path / "no-metadata.gguf", state, "llama", types=types, heads=None)
    with pytest.raises(Exception, match="head_count"):
        load_text_encoders([unpermuted], "hidream")


def test_a_gemma2_file_takes_llama_cpps_plus_one_off_its_norms(tmp_path):
    from tests.fixtures.gemma_files import reference_model, tiny_gemma_state_dict

    state = tiny_gemma_state_dict()
    path = write_gguf(tmp_path / "gemma-2-2b-F16.gguf", state, "gemma2",
                      types={n: "F16" for n, t in state.items() if t.dim() == 2})
    opened = GGUFTextEncoderFile(path)
    norm = "model.layers.0.post_feedforward_layernorm.weight"
    torch.testing.assert_close(opened.read(norm), state[norm], rtol=0, atol=1e-6)
    from comfy_core.text_encoders.gemma import GemmaConfig, build_gemma_encoder

    config = GemmaConfig.detect_from_weights(opened.tensors, "")
    tower = build_gemma_encoder(config, opened.state_dict())
    ids = torch.tensor([[2, 5, 77, 300, 12]])
    with torch.no_grad():
        expected = reference_model({k: v.half().float() if v.dim() == 2 else v for k, v in state.items()})(
            input_ids=ids, output_hidden_states=True).hidden_states[-2]
    torch.testing.assert_close(tower.encode_ids(ids, layer_idx=-2), expected, rtol=1e-4, atol=1e-4)


def test_a_mistral_files_tekken_tokenizer_is_rebuilt_from_the_gguf_vocabulary(tmp_path):
    from comfy_core.text_encoders.vocab import bytes_to_unicode
    from tests.fixtures.mistral_files import tiny_mistral_state_dict, tiny_tekken, write_mistral_file
    import base64

    tekken = tiny_tekken()
    specials = tekken["config"]["default_num_special_tokens"]
    limit = tekken["config"]["default_vocab_size"] - specials
    spelling = bytes_to_unicode()
    tokens = [s["token_str"] for s in tekken["special_tokens"]]
    tokens += ["".join(spelling[b] for b in base64.b64decode(v["token_bytes"])) for v in tekken["vocab"][:limit]]
    types = [3] * specials + [1] * limit
    state = {k: v for k, v in tiny_mistral_state_dict(num_hidden_layers=2).items()}
    gguf_path = write_gguf(tmp_path / "mistral-small-3-Q8_0.gguf", state, "llama", heads=(2, 1),
                           types={n: "Q8_0" for n, t in state.items() if quantisable(n, t)},
                           tokens=(tokens, types), metadata={"tokenizer.ggml.pre": "tekken"})
    reference_path = write_mistral_file(tmp_path / "mistral.safetensors", state, tekken=tekken)
    from_gguf, from_file = load_text_encoders([gguf_path], "flux2"), load_text_encoders([reference_path], "flux2")
    for prompt in ("a red fox in the snow", "café naïve über 日本語 🙂 [INST] 1234567890", ""):
        assert from_gguf.tokenize(prompt) == from_file.tokenize(prompt)


def test_files_that_are_not_llm_text_encoders_are_refused(tmp_path):
    path = write_gguf(tmp_path / "flux.gguf", {"model.norm.weight": torch.ones(32)}, "flux")
    with pytest.raises(GGUFTextEncoderError, match="architecture 'flux'"):
        load_text_encoders([path], "lumina2")


def _gemma_like_spiece() -> bytes:
    """A tiny SentencePiece BPE model set up as Gemma's (identity normaliser, no dummy prefix,
    byte fallback, its special ids, turn markers as user-defined pieces)."""
    import io

    import sentencepiece
    from tests.fixtures.gemma_files import CORPUS, TINY_VOCAB

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=out, vocab_size=TINY_VOCAB, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        byte_fallback=True, character_coverage=1.0, num_threads=1, minloglevel=2,
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False)
    return out.getvalue()


def test_a_gemma2_files_sentencepiece_tokenizer_is_rebuilt_from_the_gguf_vocabulary(tmp_path):
    from safetensors.torch import save_file
    from sentencepiece import sentencepiece_model_pb2

    from tests.fixtures.gemma_files import tiny_gemma_state_dict

    raw = _gemma_like_spiece()
    spm = sentencepiece_model_pb2.ModelProto()
    spm.ParseFromString(raw)
    state = tiny_gemma_state_dict()
    gguf_path = write_gguf(tmp_path / "gemma-2-2b-Q8_0.gguf", state, "gemma2", spm=spm,
                           types={n: "Q8_0" for n, t in state.items() if quantisable(n, t)})
    reference = dict({k: v.half() for k, v in state.items()},
                     spiece_model=torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    save_file(reference, str(tmp_path / "gemma_2_2b_fp16.safetensors"))
    from_gguf = load_text_encoders([gguf_path], "lumina2")
    from_file = load_text_encoders([tmp_path / "gemma_2_2b_fp16.safetensors"], "lumina2")
    for prompt in ("a photo of a cat", "  two  spaces, Ünïcödé émojis 🙂 12345", "<start_of_turn>user a red chair", ""):
        assert from_gguf.tokenize(prompt) == from_file.tokenize(prompt), prompt
    assert isinstance(from_gguf.cond_stage_model.gemma2_2b.transformer.model.layers[0].self_attn.q_proj, GGUFLinear)


def test_a_qwen2vl_language_model_file_keeps_its_biases(tmp_path):
    from tests.fixtures.qwen25vl_files import reference_model, tiny_qwen25vl_state_dict

    state = {k: v for k, v in tiny_qwen25vl_state_dict().items() if k.startswith("model.")}
    types = {n: "Q8_0" for n, t in state.items() if quantisable(n, t)}
    path = write_gguf(tmp_path / "Qwen2.5-VL-7B-Instruct-Q8_0.gguf", state, "qwen2vl", types=types)
    tower = load_text_encoders([path], "qwen_image").cond_stage_model.qwen25_7b
    q_proj = tower.transformer.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, GGUFLinear) and torch.equal(q_proj.bias, state["model.layers.0.self_attn.q_proj.bias"])
    ids = torch.tensor([[151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198]])
    with torch.no_grad():
        expected = reference_model(state).model.language_model(input_ids=ids).last_hidden_state
    error = float((tower.encode_ids(ids) - expected).abs().max() / expected.abs().max())
    assert error < 2e-2
