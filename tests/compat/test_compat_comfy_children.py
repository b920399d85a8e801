"""ComfyUI puts its `comfy/` folder on sys.path before packs load: `import model_management` or
`from ldm.modules... import` (Marigold, CCSR) reach `comfy.model_management` / `comfy.ldm`. Here the
bare names are the same module objects as their `comfy.` twins, and yield to installed modules."""
from __future__ import annotations

import sys

import pytest


def test_bare_comfy_child_names_are_their_comfy_twins(session):
    import comfy.model_management
    import model_management  # noqa: I001 -- what Marigold does

    assert model_management is comfy.model_management
    assert comfy.model_management.__spec__.name == "comfy.model_management"  # the twin keeps its identity
    from ldm.modules.diffusionmodules.util import timestep_embedding  # what CCSR does

    import comfy.ldm.modules.diffusionmodules.util as util
    assert timestep_embedding is util.timestep_embedding
    assert sys.modules["ldm.modules"] is sys.modules["comfy.ldm.modules"]


def test_an_installed_module_keeps_its_bare_name(session, tmp_path, monkeypatch):
    (tmp_path / "options.py").write_text("OWN = True\n")  # a module of a comfy child's name, on sys.path
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "options", raising=False)
    import options

    assert getattr(options, "OWN", False) is True
    monkeypatch.delitem(sys.modules, "options")


def test_names_that_are_no_comfy_child_are_not_answered(session):
    with pytest.raises(ImportError):
        import no_such_comfy_child_module  # noqa: F401
