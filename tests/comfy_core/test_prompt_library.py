"""Embedding files in the model folders: listing, `embedding:name` lookup, folder matching."""
import safetensors.torch
import torch

from comfy_core.folders import ModelFolders
from comfy_core.prompt.library import (embedding_files, find_embedding_file, folder_embeddings,
                                       folder_fingerprint, folder_resolver, list_embeddings)


def make_folders(tmp_path):
    folders = ModelFolders.default(tmp_path / "models")
    root = tmp_path / "models" / "embeddings"
    (root / "sub").mkdir(parents=True)
    safetensors.torch.save_file({"emb_params": torch.randn(2, 8)}, str(root / "style.safetensors"))
    torch.save({"string_to_param": {"*": torch.randn(1, 16)}}, root / "sub" / "wide.pt")
    (root / "empty.pt").write_bytes(b"")
    (root / "broken.bin").write_bytes(b"garbage")
    return folders


def test_listing_skips_empty_files(tmp_path):
    folders = make_folders(tmp_path)
    assert embedding_files(folders) == ["broken.bin", "style.safetensors", "sub/wide.pt"]
    assert list_embeddings(folders) == ["broken", "style", "sub/wide"]


def test_find_by_name_with_or_without_extension(tmp_path):
    folders = make_folders(tmp_path)
    assert find_embedding_file(folders, "style").name == "style.safetensors"
    assert find_embedding_file(folders, "sub/wide.pt").name == "wide.pt"
    assert find_embedding_file(folders, "../style") is None
    assert find_embedding_file(folders, "nothing") is None


def test_resolver_loads_once_and_names_by_stem(tmp_path):
    resolve = folder_resolver(make_folders(tmp_path))
    first = resolve("sub/wide")
    assert first.name == "wide" and resolve("sub/wide") is first
    assert resolve("missing") is None


def test_folder_embeddings_keep_readable_fitting_files(tmp_path):
    folders = make_folders(tmp_path)
    found = folder_embeddings(folders, lambda e: e.widths == {"": 8})
    assert [e.name for e in found] == ["style"]


def test_fingerprint_changes_with_files(tmp_path):
    folders = make_folders(tmp_path)
    before = folder_fingerprint(folders)
    safetensors.torch.save_file({"emb_params": torch.randn(3, 8)}, str(tmp_path / "models/embeddings/new.safetensors"))
    assert folder_fingerprint(folders) != before
