"""nodes/_names.py: the torch-free copies the built-in nodes declare their combos with equal
comfy_core's own lists, and the live combos give what comfy_core would."""
from __future__ import annotations

from comfy_core.attention import available_backends, backend_names
from comfy_core.prompt.embedding import EMBEDDING_EXTENSIONS
from comfy_core.prompt.emphasis import DEFAULT_EMPHASIS, EMPHASIS_MODES
from comfy_core.prompt.library import EMBEDDINGS_KIND, embedding_files
from comfy_core.sampling.samplers.registry import SAMPLER_NAMES
from comfy_core.sampling.schedulers import SCHEDULER_NAMES
from nodes import _names
from nodes.environment import Environment
from nodes.patching import _backend_options


def test_name_lists_equal_comfy_core_lists():
    assert _names.SAMPLER_NAMES == tuple(SAMPLER_NAMES)
    assert _names.SCHEDULER_NAMES == tuple(SCHEDULER_NAMES)
    assert _names.EMPHASIS_MODES == tuple(EMPHASIS_MODES) and _names.DEFAULT_EMPHASIS == DEFAULT_EMPHASIS
    assert _names.EMBEDDINGS_KIND == EMBEDDINGS_KIND and _names.EMBEDDING_EXTENSIONS == tuple(EMBEDDING_EXTENSIONS)
    assert list(_names.ATTENTION_BACKENDS) == backend_names()
    assert set(_names.OPTIONAL_BACKENDS) <= set(backend_names())


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


# Ours, with no ComfyUI counterpart: their facades use the default method name.
OUR_OWN_NODES = {"CLIPTextEncodeWeighted", "CLIPTextEncodeWeightedSDXL", "ApplyEmbedding",
                 "SetAttentionBackend", "SetVAEAttentionBackend"}


def test_every_comfyui_node_has_comfyuis_method_name_for_packs():
    # Packs call built-ins as `nodes.X().<FUNCTION>(...)`: each ComfyUI node needs ComfyUI's name.
    from nodes import builtin_node_functions
    from nodes._comfy_facade import COMFY_FUNCTION_NAMES

    builtins = {fn.__node_spec__.node_id for fn in builtin_node_functions()}
    assert set(COMFY_FUNCTION_NAMES) <= builtins
    assert builtins - OUR_OWN_NODES == set(COMFY_FUNCTION_NAMES)
