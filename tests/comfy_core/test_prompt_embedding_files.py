"""Textual-inversion file formats, generated here (reference section 4.1)."""
import pytest
import safetensors.torch
import torch

from comfy_core.prompt import EmbeddingError, EmbeddingWidthError
from comfy_core.prompt.embedding import embedding_from_data, load_embedding


def test_webui_pt(tmp_path):
    vectors = torch.randn(3, 768, dtype=torch.float16)
    path = tmp_path / "my-style.pt"
    torch.save({"string_to_token": {"*": 265}, "string_to_param": {"*": vectors},
                "name": "ignored", "step": 1500, "sd_checkpoint_name": "v1-5"}, path)
    e = load_embedding(path)
    assert e.name == "my-style" and e.vector_count == 3 and e.step == 1500 and e.checkpoint == "v1-5"
    assert e.vectors.dtype == torch.float32 and torch.equal(e.vectors, vectors.float())
    assert e.widths == {"": 768}


def test_webui_pt_with_two_params_is_an_error(tmp_path):
    path = tmp_path / "two.pt"
    torch.save({"string_to_param": {"*": torch.zeros(1, 8), "+": torch.zeros(1, 8)}}, path)
    with pytest.raises(EmbeddingError, match="exactly one"):
        load_embedding(path)


def test_kohya_safetensors_emb_params(tmp_path):
    path = tmp_path / "kohya.safetensors"
    safetensors.torch.save_file({"emb_params": torch.randn(2, 768)}, str(path))
    e = load_embedding(path)
    assert e.name == "kohya" and e.vector_count == 2


def test_single_tensor_safetensors_with_any_key(tmp_path):
    path = tmp_path / "other.safetensors"
    safetensors.torch.save_file({"whatever": torch.randn(4, 1024)}, str(path))
    assert load_embedding(path).widths == {"": 1024}


def test_diffusers_bin_one_vector_is_unsqueezed(tmp_path):
    path = tmp_path / "learned_embeds.bin"
    torch.save({"<cat-toy>": torch.randn(768)}, path)
    e = load_embedding(path, name="cat-toy")
    assert e.name == "cat-toy" and tuple(e.vectors.shape) == (1, 768)


def test_sdxl_dict(tmp_path):
    path = tmp_path / "xl.safetensors"
    safetensors.torch.save_file({"clip_l": torch.randn(2, 768), "clip_g": torch.randn(2, 1280)}, str(path))
    e = load_embedding(path)
    assert e.vector_count == 2 and e.widths == {"clip_l": 768, "clip_g": 1280}
    assert tuple(e.vectors_for("clip_g", 1280).shape) == (2, 1280)
    with pytest.raises(EmbeddingWidthError, match="clip_h"):
        e.vectors_for("clip_h", 1024)


def test_multi_tensor_dict_is_an_error():
    with pytest.raises(EmbeddingError, match="exactly one tensor"):
        embedding_from_data({"a": torch.zeros(1, 8), "b": torch.zeros(1, 8)}, "x")


def test_unrecognised_dict_is_an_error():
    with pytest.raises(EmbeddingError, match="neither"):
        embedding_from_data({"a": "text"}, "x")


def test_width_mismatch_names_file_and_both_widths(tmp_path):
    path = tmp_path / "sd2.safetensors"
    safetensors.torch.save_file({"emb_params": torch.randn(1, 1024)}, str(path))
    e = load_embedding(path)
    with pytest.raises(EmbeddingWidthError) as info:
        e.vectors_for("clip_l", 768)
    message = str(info.value)
    assert "sd2.safetensors" in message and "1024" in message and "768" in message


def test_bad_files(tmp_path):
    with pytest.raises(EmbeddingError, match="unsupported extension"):
        load_embedding(tmp_path / "x.png")
    with pytest.raises(EmbeddingError, match="does not exist"):
        load_embedding(tmp_path / "missing.pt")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    with pytest.raises(EmbeddingError, match="could not be read"):
        load_embedding(broken)


def test_signature_follows_content():
    a = embedding_from_data({"x": torch.ones(1, 4)}, "n")
    b = embedding_from_data({"y": torch.ones(1, 4)}, "n")
    c = embedding_from_data({"x": torch.zeros(1, 4)}, "n")
    assert a.signature() == b.signature() != c.signature()


class NotATensor:
    pass


def test_pickle_needing_arbitrary_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"string_to_param": {"*": NotATensor()}}, path)
    with pytest.raises(EmbeddingError, match="could not be read"):
        load_embedding(path)
