"""`embedding:NAME` for ComfyUI's CLIPTextEncode: file search, the vectors taken from each file
format, and ComfyUI's handling of a vector that does not fit the encoder (comfy/sd1_clip.py
`load_embed`, `SDClipModel.process_tokens`), each rule written out in the test."""
from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.text_encoders.embedding_files import (
    FolderEmbeddingLookup,
    embedding_vectors,
    find_embedding_file,
)
from comfy_core.text_encoders.encoder_set import chunks_to_ids
from comfy_core.text_encoders.errors import TokenizeError


def test_exact_name_then_extensions_then_subfolders(tmp_path):
    root = tmp_path / "embeddings"
    (root / "styles").mkdir(parents=True)
    save_file({"emb_params": torch.ones(1, 4)}, str(root / "styles" / "deep.safetensors"))
    torch.save({"string_to_param": {"*": torch.ones(2, 4)}}, root / "old.pt")
    (root / "plain").write_bytes(b"")
    assert find_embedding_file("old", [root]) == root / "old.pt"
    assert find_embedding_file("old.pt", [root]) == root / "old.pt"
    assert find_embedding_file("plain", [root]) == root / "plain"  # the exact file first
    assert find_embedding_file("deep", [root]) == root / "styles" / "deep.safetensors"
    assert find_embedding_file("styles/deep", [root]) == root / "styles" / "deep.safetensors"
    assert find_embedding_file("missing", [root]) is None


def test_names_never_leave_the_folder(tmp_path):
    root = tmp_path / "embeddings"
    root.mkdir()
    save_file({"emb_params": torch.ones(1, 4)}, str(tmp_path / "outside.safetensors"))
    assert find_embedding_file("../outside", [root]) is None
    assert find_embedding_file(str(tmp_path / "outside"), [root]) is None


def test_vectors_taken_from_each_format():
    a, b = torch.randn(2, 4), torch.randn(3, 8)
    assert torch.equal(embedding_vectors({"string_to_param": {"*": a}, "step": 5}, "clip_l", 4), a)
    assert torch.equal(embedding_vectors({"emb_params": a}, "clip_l", 4), a)
    assert torch.equal(embedding_vectors({"clip_l": a, "clip_g": b}, "clip_g", 8), b)
    assert torch.equal(embedding_vectors({"clip_l": a, "clip_g": b}, "clip_l", 4), a)
    # No key of this encoder: the first tensor, whatever its width (the encoder drops it later).
    assert torch.equal(embedding_vectors({"clip_l": a}, "clip_g", 8), a)
    bundled = {"lora_unet_x.alpha": torch.ones(()), "bundle_emb.n.string_to_param.*": a}
    assert torch.equal(embedding_vectors(bundled, "clip_l", 4), a)
    assert torch.equal(embedding_vectors({"bundle_emb.n.clip_g": b, "x": a}, "clip_g", 8), b)
    # Old list dumps: every tensor of the encoder's width, concatenated.
    listed = [{"<t1>": a[0]}, {"<t2>": b[0], "<t3>": a}]
    torch.testing.assert_close(embedding_vectors(listed, "clip_l", 4), torch.cat([a[:1], a]))


def test_lookup_reads_files_and_skips_unreadable_ones(tmp_path, caplog):
    save_file({"emb_params": torch.full((2, 4), 0.5)}, str(tmp_path / "good.safetensors"))
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    lookup = FolderEmbeddingLookup([tmp_path])
    assert torch.equal(lookup("good", "clip_l", 4), torch.full((2, 4), 0.5))
    with caplog.at_level(logging.WARNING):
        assert lookup("bad", "clip_l", 4) is None
    assert "bad" in caplog.text
    assert lookup("nothing", "clip_l", 4) is None
    assert FolderEmbeddingLookup([tmp_path]).cache_signature() == lookup.cache_signature()


def test_a_vector_of_another_width_is_dropped_and_the_row_padded_at_its_end(caplog):
    # process_tokens: the vector is not inserted, later tokens move left, one pad token is
    # appended at the end of the row.
    fits, other = torch.ones(4), torch.ones(6)
    chunk = [49406, 320, other, fits, 1929, 49407, 49407]
    with caplog.at_level(logging.WARNING):
        ids, overrides = chunks_to_ids([chunk], 4, mismatch_pad=0)
    assert ids.tolist() == [[49406, 320, 0, 1929, 49407, 49407, 0]]
    assert [(o.row, o.position) for o in overrides] == [(0, 2)]
    assert "width 6" in caplog.text
    with pytest.raises(TokenizeError, match="width 4"):
        chunks_to_ids([chunk], 4)  # without a pad token it stays an error


class _WebuiTrainingState:  # a class outside torch.load's allow-list, as old AUTOMATIC1111 `.pt` files hold
    def __init__(self, step: int) -> None:
        self.step = step


def test_an_old_webui_pickle_torch_refuses_is_read_as_its_zip(tmp_path):
    # `embedding:old` in a prompt finds vectors in a file torch.load(weights_only=True) refuses,
    # as ComfyUI does (its safe_load_embed_zip fallback): the raw float32 record, no unpickling.
    vectors = torch.randn(2, 768)
    torch.save({"string_to_param": {"*": vectors}, "step": _WebuiTrainingState(3000)}, str(tmp_path / "old.pt"))
    with pytest.raises(Exception):
        torch.load(str(tmp_path / "old.pt"), weights_only=True)
    assert torch.equal(FolderEmbeddingLookup([tmp_path])("old", "clip_l", 768), vectors)
