"""What UltimateSDUpscale needs of ComfyUI's API beyond sampling (its tile sampling is in
tests/compat/test_compat_impact.py): a V3 node's `execute` result unpacks like a tuple, and a pack
that deletes the modules that appeared during its import (the fixture pack
tests/compat/api_packs/usdu_like_pack) keeps the libraries it imported from outside its folder."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

PACK_DIR = Path(__file__).parent / "api_packs" / "usdu_like_pack"
SHARED_LIB = "usdu_like_shared_lib"


def test_image_upscale_with_model_execute_unpacks_as_in_usdu(session) -> None:
    from comfy_core.upscale.loading import model_from_state_dict
    from comfy_extras.nodes_upscale_model import ImageUpscaleWithModel

    from nodes.upscale_model import image_upscale_with_model
    from tests.fixtures.upscale_models import esrgan_state_dict

    model = model_from_state_dict(esrgan_state_dict("old", seed=2))
    image = torch.rand(1, 12, 16, 3, generator=torch.Generator().manual_seed(0))
    assert "execute" in dir(ImageUpscaleWithModel)  # USDU's test for the V3 face
    (upscaled,) = ImageUpscaleWithModel.execute(model, image)  # modules/upscaler.py
    assert torch.equal(upscaled, image_upscale_with_model(model, image)[0])


@pytest.fixture
def shared_lib(tmp_path):
    """A library outside the pack, not imported yet, on sys.path for the test."""
    lib_dir = tmp_path / "site"
    lib_dir.mkdir()
    (lib_dir / f"{SHARED_LIB}.py").write_text("IMPORTS = []\nIMPORTS.append(1)\n\ndef double(x):\n    return 2 * x\n")
    sys.path.insert(0, str(lib_dir))
    try:
        yield lib_dir
    finally:
        sys.path.remove(str(lib_dir))
        sys.modules.pop(SHARED_LIB, None)


def test_modules_a_pack_drops_after_its_import_stay_unless_they_are_its_own(session, tmp_path, shared_lib) -> None:
    custom_nodes = tmp_path / "custom_nodes"
    custom_nodes.mkdir()
    (custom_nodes / PACK_DIR.name).symlink_to(PACK_DIR, target_is_directory=True)  # packs are often linked in
    assert SHARED_LIB not in sys.modules
    (result,) = session.load_packs([custom_nodes])
    assert result.ok, result.error
    pack = result.module
    # the library it imported is still the module it got (imported once), as in ComfyUI
    assert sys.modules[SHARED_LIB] is pack.SHARED_LIB and pack.SHARED_LIB.IMPORTS == [1]
    # what it dropped of its own folder stays dropped
    own = pack.OWN_MODULE.__name__
    assert own.endswith("usdu_like_modules.shared_state") and own not in sys.modules
    assert not any(name.endswith(".usdu_like_modules") for name in sys.modules)
    cls = session.registry.get("UsduLikeNode")
    assert cls is not None
    assert pack.UsduLikeNode().run(4) == (8,) and pack.SHARED_LIB.IMPORTS == [1]


def test_keep_shared_modules_leaves_modules_that_were_already_out(tmp_path) -> None:
    import types

    from compat.pack_imports import keep_shared_modules

    import importlib.util

    lib = tmp_path / "c2_detached_before.py"
    lib.write_text("X = 1\n")
    spec = importlib.util.spec_from_file_location("c2_detached_before", lib)
    stale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stale)  # alive, made by the import system, never in sys.modules
    scratch = types.ModuleType("c2_scratch_module")  # a pack's scratch module object
    with keep_shared_modules([tmp_path / "custom_nodes"]):
        made = types.ModuleType("c2_made_during")
        spec2 = importlib.util.spec_from_file_location("c2_made_during_import", lib)
        dropped = importlib.util.module_from_spec(spec2)
        sys.modules["c2_made_during_import"] = dropped
        spec2.loader.exec_module(dropped)
        del sys.modules["c2_made_during_import"]
    try:
        assert sys.modules.get("c2_made_during_import") is dropped
        assert "c2_detached_before" not in sys.modules and "c2_scratch_module" not in sys.modules
        assert "c2_made_during" not in sys.modules
    finally:
        sys.modules.pop("c2_made_during_import", None)
    del stale, scratch, made
