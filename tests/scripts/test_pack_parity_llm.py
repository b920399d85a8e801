"""bench/pack_parity.py's LLM-encoder workflows: every file they name has a tiny writer of its own."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = ("qwen_image_t2i", "qwen_image_edit", "hidream_i1", "lumina2")


def _script():
    spec = importlib.util.spec_from_file_location("pack_parity", REPO / "bench" / "pack_parity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("pack_parity", module)
    spec.loader.exec_module(module)
    return module


def test_every_file_of_the_llm_workflows_has_a_writer():
    from tests.fixtures.template_models import LOADER_INPUTS

    parity = _script()
    loaders = {**LOADER_INPUTS, **parity.PACK_LOADER_INPUTS}
    kinds = set()
    for name in WORKFLOWS:
        prompt = json.loads((REPO / "bench" / "pack_workflows" / f"{name}.json").read_text())
        for node in prompt.values():
            for key, value in node["inputs"].items():
                folder = loaders.get((node["class_type"], key))
                if folder is None or not isinstance(value, str):
                    continue
                kind = parity.pack_file_kind(folder, value)
                assert kind in parity.PACK_WRITERS, (name, folder, value, kind)
                kinds.add(kind)
    # the text encoders are the families' own towers, not the SD1 CLIP-L every other text-encoder name gets
    assert {"llm:text_encoders:qwen25vl", "llm:text_encoders:llama", "llm:text_encoders:gemma2",
            "llm:text_encoders:t5xxl", "llm:loras:qwen_image_lora"} <= kinds
    assert parity.pack_file_kind("text_encoders", "other.safetensors") == "clip_l_sd1"
