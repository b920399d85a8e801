"""The torch-free name lists (comfy_core/attention_names.py, sampling/scheduler_names.py,
prompt/emphasis_modes.py, prompt/embedding_names.py): each is the one list its implementation
uses, every name has an implementation, and they import without torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from comfy_core.attention import backends
from comfy_core.attention_names import BACKEND_NAMES, DEFAULT_BACKEND, OPTIONAL_BACKENDS
from comfy_core.prompt import embedding, emphasis, library
from comfy_core.prompt.embedding_names import EMBEDDING_EXTENSIONS, EMBEDDINGS_KIND, embedding_files
from comfy_core.prompt.emphasis_modes import DEFAULT_EMPHASIS, EMPHASIS_MODES
from comfy_core.sampling import schedulers
from comfy_core.sampling.scheduler_names import SCHEDULER_NAMES

REPO = Path(__file__).resolve().parents[2]


def test_every_scheduler_name_has_a_schedule_and_no_other():
    assert tuple(schedulers.scheduler_handlers()) == SCHEDULER_NAMES
    assert schedulers.SCHEDULER_NAMES is SCHEDULER_NAMES


def test_the_backend_table_is_built_from_the_names_in_their_order():
    assert tuple(backends.BACKENDS) == BACKEND_NAMES and BACKEND_NAMES[0] == DEFAULT_BACKEND
    assert set(backends._IMPLEMENTED) == set(BACKEND_NAMES)  # noqa: SLF001 -- no implementation left out
    assert set(OPTIONAL_BACKENDS) <= set(BACKEND_NAMES) and DEFAULT_BACKEND not in OPTIONAL_BACKENDS


def test_the_prompt_modules_use_the_torch_free_lists():
    assert emphasis.EMPHASIS_MODES is EMPHASIS_MODES and emphasis.DEFAULT_EMPHASIS == DEFAULT_EMPHASIS
    assert embedding.EMBEDDING_EXTENSIONS is EMBEDDING_EXTENSIONS
    assert library.EMBEDDINGS_KIND == EMBEDDINGS_KIND and library.embedding_files is embedding_files


def test_the_name_modules_import_without_torch():
    code = ("import sys\n"
            "import comfy_core.attention_names, comfy_core.sampling.scheduler_names, comfy_core.sampling.samplers.registry\n"
            "import comfy_core.prompt.emphasis_modes, comfy_core.prompt.embedding_names, nodes._names\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
