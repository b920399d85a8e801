"""The combos the built-in nodes declare from comfy_core's torch-free name lists give what
comfy_core's own (torch) functions would (the lists themselves: tests/comfy_core/test_name_lists.py)."""
from __future__ import annotations

from comfy_core.attention import available_backends, backend_names
from comfy_core.prompt.library import embedding_files
from nodes import _names
from nodes.environment import Environment
from nodes.patching import _backend_options


def test_the_node_layers_names_are_comfy_cores():
    assert list(_names.ATTENTION_BACKENDS) == backend_names()


def test_embedding_files_match_comfy_core(tmp_path):
    env = Environment.rooted_at(tmp_path)
    folder = tmp_path / "models" / "embeddings"
    (folder / "sub").mkdir(parents=True)
    for name, size in (("a.pt", 4), ("sub/b.safetensors", 4), ("empty.bin", 0), ("notes.txt", 4)):
        (folder / name).write_bytes(b"x" * size)
    assert _names.embedding_files(env.folders) == embedding_files(env.folders) == ["a.pt", "sub/b.safetensors"]


def test_backend_combo_equals_comfy_core_availability(tmp_path):
    env = Environment.rooted_at(tmp_path)
    assert _backend_options(env) == available_backends(None)
