"""Fixtures shared by every test folder: tiny random checkpoints with the real key names, and
the compat layer's state put back after each test.

Each checkpoint is generated once per test session (a few tenths of a second each) into a
session temporary folder; see `tests/fixtures/checkpoints.py` for what they contain.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.isolation import restore, snapshot


@pytest.fixture(autouse=True)
def _compat_state_restored():
    """A server built in a synchronous test leaves its compat session selected in the main
    thread's context, which every later synchronous test shares; putting the state back after
    each test makes every test start as in a fresh process (tests/compat/isolation.py)."""
    saved = snapshot()
    yield
    restore(saved)


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all-templates", action="store_true", default=False,
                     help="run every SD1.x/SD2.x/SDXL, Flux.1 and SD3.5 official template in "
                          "tests/web/test_template_workflows*.py (the default run covers a quick subset)")
    parser.addoption("--full-size", action="store_true", default=False,
                     help="run the Wan templates (tests/web/test_template_workflows_wan.py) at their own "
                          "video sizes instead of 64x64, 9 frames (minutes per template on a CPU)")
