"""Session fixtures shared by every test folder: tiny random checkpoints with the real key names.

Each file is generated once per test session (a few tenths of a second each) into a session
temporary folder; see `tests/fixtures/checkpoints.py` for what they contain.
"""
from __future__ import annotations

from pathlib import Path

import pytest


def _tiny(tmp_path_factory: pytest.TempPathFactory, family: str) -> Path:
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    folder = tmp_path_factory.mktemp(f"ckpt_{family}")
    return write_tiny_checkpoint(folder / f"tiny_{family}.safetensors", family)


@pytest.fixture(scope="session")
def tiny_sd1_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory, "sd1")


@pytest.fixture(scope="session")
def tiny_sd2_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory, "sd2")


@pytest.fixture(scope="session")
def tiny_sd2v_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory, "sd2_v")


@pytest.fixture(scope="session")
def tiny_sdxl_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory, "sdxl")


@pytest.fixture(scope="session")
def tiny_sdxl_refiner_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory, "sdxl_refiner")
