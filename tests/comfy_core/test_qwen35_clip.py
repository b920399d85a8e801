"""Qwen3.5 through CLIPLoader (comfy_core/split/text_encoder_files.py, qwen35.py's encoder set and
tokenizer): one Qwen3.5 file gives ComfyUI's Qwen3.5 encoder whatever the type, the vocabulary is
found beside the file (this repository does not ship Qwen3.5's), the chat template's special
tokens at Qwen3.5's ids, encoding as ComfyUI's SDClipModel (state after the next-to-last block),
and TextGenerate's greedy text equal to the tower's greedy ids decoded."""
from __future__ import annotations

import pytest
import torch

from comfy_core.split.clip_types import UnsupportedClipTypeError
from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders.errors import VocabularyError
from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens
from comfy_core.text_encoders.qwen35 import Qwen35TokenizerMissingError
from comfy_core.text_encoders.qwen35_tokenizer import Qwen35ImageTokenizer, Qwen35TEModel, load_qwen35_backend
from nodes.errors import NodeInputError
from nodes.text_generate import text_generate
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen35_files import write_tiny_qwen35, write_tiny_qwen35_tokenizer

SLOT = "qwen35_2b"  # ComfyUI's model type for a width none of the published sizes has
IM_START, IM_END, THINK, END_THINK, NEWLINE = 248045, 248046, 248068, 248069, 198


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen35")
    write_tiny_qwen35(root / "qwen3.5_4b_bf16.safetensors", dtype=torch.bfloat16, seed=7)
    write_tiny_qwen35_tokenizer(root / "qwen35_tokenizer")
    return root


@pytest.fixture(scope="module")
def clip(folder):
    return load_text_encoders([folder / "qwen3.5_4b_bf16.safetensors"], "stable_diffusion")


def _ids(clip, text, **kwargs):
    return [t[0] for t in clip.tokenize(text, **kwargs)[SLOT][0]]


@pytest.mark.parametrize("clip_type", ["qwen_image", "flux3", "cogvideox"])
def test_any_type_gives_comfyuis_qwen35_encoder(folder, clip_type):
    loaded = load_text_encoders([folder / "qwen3.5_4b_bf16.safetensors"], clip_type)
    assert isinstance(loaded.cond_stage_model, Qwen35TEModel) and isinstance(loaded.tokenizer, Qwen35ImageTokenizer)
    assert loaded.cond_stage_model.clip == SLOT


def test_a_type_no_family_answers_is_still_refused_for_other_files(tmp_path):
    with pytest.raises(UnsupportedClipTypeError, match="mochi"):
        load_text_encoders([tmp_path / "missing.safetensors"], "mochi")


def test_the_vocabulary_is_required_and_named(folder, tmp_path):
    lonely = tmp_path / "qwen3.5_2b_bf16.safetensors"
    lonely.write_bytes((folder / "qwen3.5_4b_bf16.safetensors").read_bytes())
    with pytest.raises(Qwen35TokenizerMissingError, match="qwen35_tokenizer"):
        load_text_encoders([lonely], "stable_diffusion")
    given = load_text_encoders([lonely], "stable_diffusion",
                               tokenizer_data={"qwen35_tokenizer": folder / "qwen35_tokenizer"})
    assert _ids(given, "hello")[0] == IM_START


def test_a_vocabulary_with_the_specials_elsewhere_is_not_qwen35s():
    """Qwen2 / Qwen3's vocabulary (the one shipped here) has `<|endoftext|>` at 151643, not 248044."""
    from tokenizers import AddedToken, Tokenizer, models

    other = Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    other.add_special_tokens([AddedToken("<|endoftext|>", special=True), AddedToken("<|im_start|>", special=True),
                              AddedToken("<|im_end|>", special=True)])
    with pytest.raises(VocabularyError, match="248044"):
        load_qwen35_backend(other.to_str())


def test_the_chat_template_and_its_special_tokens(clip):
    ids = _ids(clip, "hello")
    user, assistant = _ids(clip, "<|im_start|>user"), _ids(clip, "<|im_start|>assistant")
    hello = clip.tokenizer.qwen35_2b.encode("hello")
    assert ids == user + [NEWLINE] + hello + [IM_END, NEWLINE] + assistant + [NEWLINE, THINK, NEWLINE, END_THINK,
                                                                                 NEWLINE]
    assert _ids(clip, "hello", thinking=True) == ids[:-4]
    system = _ids(clip, "hello", system_prompt="be brief")
    assert system[0] == IM_START and system[len(system) - len(ids):] == ids
    assert clip.tokenizer.qwen35_2b.decode(system[:len(system) - len(ids)], skip_special_tokens=False) == \
        "<|im_start|>system\nbe brief<|im_end|>\n"
    assert _ids(clip, "<|im_start|>raw") == user[:1] + clip.tokenizer.qwen35_2b.encode("raw")  # used as it is
    assert clip.tokenizer.qwen35_2b.decode(_ids(clip, "(a:1.2)", thinking=True), skip_special_tokens=False) == \
        "<|im_start|>user\n(a:1.2)<|im_end|>\n<|im_start|>assistant\n"  # prompt weights are not parsed


def test_encoding_is_the_state_after_the_next_to_last_block(clip):
    tokens = clip.tokenize("a fox")
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    tower = clip.cond_stage_model.qwen35_2b
    ids = torch.tensor([[t[0] for t in tokens[SLOT][0]]])
    with torch.no_grad():
        expected = tower.encode_ids(ids, layer_idx=-2)
    assert pooled is None and cond.shape == (1, ids.shape[1], 32)
    assert torch.equal(cond, expected)


def test_text_generate_greedy_is_the_towers_greedy_ids_decoded(clip):
    tower = clip.cond_stage_model.qwen35_2b
    ids = _ids(clip, "a fox")
    with torch.no_grad():
        expected = generate_tokens(tower, tower.embed_ids(torch.tensor([ids])), 5, SamplingOptions(do_sample=False),
                                   stop_tokens=tower.stop_tokens)
    text, reasoning = text_generate(clip, "a fox", 5, {"sampling_mode": "off"})
    assert reasoning == "" and text == clip.tokenizer.decode(expected).strip() and text
    sampled = {"sampling_mode": "on", "temperature": 0.7, "top_k": 64, "top_p": 0.95, "min_p": 0.05,
               "repetition_penalty": 1.05, "seed": 4}
    assert text_generate(clip, "a fox", 5, sampled) == text_generate(clip, "a fox", 5, sampled)


def test_text_generate_reads_an_image_through_the_vision_tower(clip):
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(1))
    tokens = clip.tokenize("describe", image=image)[SLOT][0]
    entries = [index for index, pair in enumerate(tokens) if isinstance(pair[0], dict)]
    assert len(entries) == 1 and tokens[entries[0] - 1][0] == 248053 and tokens[entries[0] + 1][0] == 248054
    tower = clip.cond_stage_model.qwen35_2b
    with torch.no_grad():
        embeds, positions = tower.prompt_inputs([pair[0] for pair in tokens])
        expected = generate_tokens(tower, embeds, 4, SamplingOptions(do_sample=False), stop_tokens=tower.stop_tokens,
                                   positions=positions)
    text, _ = text_generate(clip, "describe", 4, {"sampling_mode": "off"}, image=image)
    assert text == clip.tokenizer.decode(expected).strip()


def test_media_the_encoder_does_not_read_are_refused(clip, folder, tmp_path):
    with pytest.raises(NodeInputError, match="video"):
        text_generate(clip, "describe", 4, {"sampling_mode": "off"}, video=torch.zeros(2, 8, 8, 3))
    write_tiny_qwen35(tmp_path / "qwen3.5_text_only.safetensors", vocab=512, visual=False)
    text_only = load_text_encoders([tmp_path / "qwen3.5_text_only.safetensors"], "stable_diffusion",
                                   tokenizer_data={"qwen35_tokenizer": folder / "qwen35_tokenizer"})
    with pytest.raises(NodeInputError, match="image"):
        text_generate(text_only, "describe", 4, {"sampling_mode": "off"}, image=torch.zeros(1, 8, 8, 3))


def test_flux3s_w4a8_upsampler_loads_packed_and_generates(tmp_path):
    """Flux 3's `qwen3.5_9b_flux3_prompt_upsampler_w4a8` is ComfyUI's int4 `asym_w4a8_int8`
    (comfy_core/weights/quant_w4a8.py): through CLIPLoader type flux3 its block layers stay packed,
    and TextGenerate's greedy text about an image (the edit templates') is the tower's greedy ids decoded."""
    from comfy_core.models.quant_linear import QuantizedLinear
    from tests.fixtures.template_models_flux3 import WRITERS_FLUX3

    path = tmp_path / "qwen3.5_9b_flux3_prompt_upsampler_w4a8.safetensors"
    WRITERS_FLUX3["qwen35_9b_flux3_upsampler"](path)  # the tiny model and its vocabulary beside it
    clip = load_text_encoders([path], "flux3")
    tower = clip.cond_stage_model.qwen35_2b
    up = tower.transformer.model.layers[0].mlp.up_proj
    assert isinstance(up, QuantizedLinear) and up.quant_format == "asym_w4a8_int8" and up.weight.dtype == torch.int8
    image = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(2))
    tokens = clip.tokenize("make it snow", image=image)[SLOT][0]
    with torch.no_grad():
        embeds, positions = tower.prompt_inputs([pair[0] for pair in tokens])
        expected = generate_tokens(tower, embeds, 4, SamplingOptions(do_sample=False), stop_tokens=tower.stop_tokens,
                                   positions=positions)
    text, _ = text_generate(clip, "make it snow", 4, {"sampling_mode": "off"}, image=image)
    assert text == clip.tokenizer.decode(expected).strip()


def test_an_int8_convrot_file_loads_as_stored(folder, tmp_path):
    """ComfyUI's `*.int8_convrot` releases (Qwen-Image 2.1's prompt enhancers): int8 block layers
    with per-row scales and the Hadamard rotation, detected at their true shapes, kept as stored."""
    from safetensors.torch import save_file

    from comfy_core.models.quant_linear import QuantizedLinear
    from comfy_core.text_encoders.qwen35 import Qwen35Config
    from comfy_core.text_encoders.qwen35_load import build_qwen35_encoder
    from tests.fixtures.qwen35_files import tiny_state_dict
    from tests.fixtures.t5_files import header_of
    from tests.fixtures.template_models_quant import quantize_state, true_state

    state = tiny_state_dict(seed=2, vocab=512)
    tensors, metadata = quantize_state(state, "int8_tensorwise", convrot=True, float_dtype=torch.float32,
                                       select=lambda layer: ".layers." in layer)
    path = tmp_path / "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors"
    save_file(tensors, str(path))
    loaded = load_text_encoders([path], "stable_diffusion",
                                tokenizer_data={"qwen35_tokenizer": folder / "qwen35_tokenizer"})
    tower = loaded.cond_stage_model.qwen35_2b
    assert isinstance(tower.transformer.model.layers[2].mlp.down_proj, QuantizedLinear)
    truth = true_state(tensors, metadata, {n: tuple(v.shape) for n, v in state.items() if v.dim() == 2})
    reference = build_qwen35_encoder(Qwen35Config.detect_from_weights(header_of(truth), ""), truth)
    ids = torch.tensor([[3, 17, 99, 250, 4, 8]])
    with torch.no_grad():
        assert torch.allclose(tower.encode_ids(ids), reference.encode_ids(ids), atol=1e-5, rtol=0)
