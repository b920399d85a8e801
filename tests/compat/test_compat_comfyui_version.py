"""`comfyui_version.__version__` for packs: one constant (compat/version.py), the same string
/system_stats reports (tests/web/test_web_feature_flags_2026.py checks that side)."""
from __future__ import annotations


def test_packs_import_comfyui_version(session):
    import comfyui_version

    from compat.version import COMFYUI_VERSION

    assert comfyui_version.__version__ == COMFYUI_VERSION
    # the shape packs parse: "X.Y.Z" of ints (e.g. `tuple(map(int, __version__.split(".")))`)
    assert len(tuple(map(int, comfyui_version.__version__.split(".")))) == 3
