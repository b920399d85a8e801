"""Weight overlays (`Patcher.overlay_weights`): inside `applied()`, weights replaced for a block and
the applied tensor objects put back after, also on error; only while the module is held; the
originals stay readable; two threads both wanting one on a shared module get an error, not a
deadlock."""
from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from comfy_core.patching import ModelPatcher, PatchConflictError

KEY = "lin.weight"


def patcher() -> ModelPatcher:
    root = nn.Module()
    root.lin = nn.Linear(3, 3, bias=False)
    return ModelPatcher(root)


def test_an_overlay_replaces_weights_for_the_block_and_puts_the_applied_ones_back():
    p = patcher()
    original = p.model.lin.weight
    p.add_patches({KEY: torch.ones(3, 3)})
    with p.applied() as module:
        applied = module.lin.weight
        new = torch.full((3, 3), 7.0)
        with p.overlay_weights({KEY: new}):
            assert isinstance(module.lin.weight, nn.Parameter) and torch.equal(module.lin.weight, new)
            assert p.applied_tensor(KEY) is module.lin.weight
            assert p.model_state_dict()[KEY].data_ptr() == original.data_ptr()  # originals stay readable
        assert module.lin.weight is applied
    assert p.model.lin.weight is original


def test_the_original_of_a_weight_only_an_overlay_replaces_stays_readable():
    p = patcher()
    original = p.model.lin.weight
    with p.applied():
        with p.overlay_weights({KEY: torch.zeros(3, 3)}):
            assert p.model_state_dict()[KEY].data_ptr() == original.data_ptr()
    assert p.model.lin.weight is original


def test_an_overlay_is_undone_when_its_block_fails():
    p = patcher()
    with p.applied() as module:
        applied = module.lin.weight
        with pytest.raises(RuntimeError):
            with p.overlay_weights({KEY: torch.zeros(3, 3)}):
                raise RuntimeError("boom")
        assert module.lin.weight is applied
        with p.overlay_weights({KEY: torch.zeros(3, 3)}):  # and the module takes another one
            pass


def test_an_overlay_needs_the_module_held_and_does_not_nest():
    p = patcher()
    with pytest.raises(PatchConflictError, match="inside applied"):
        with p.overlay_weights({KEY: torch.zeros(3, 3)}):
            pass
    with p.applied():
        with p.overlay_weights({KEY: torch.zeros(3, 3)}):
            with p.applied():  # the holding thread may re-enter the same configuration
                pass
            with pytest.raises(PatchConflictError, match="do not nest"):
                with p.overlay_weights({KEY: torch.ones(3, 3)}):
                    pass


def test_two_threads_both_wanting_an_overlay_get_an_error_instead_of_a_deadlock():
    p = patcher()
    other = p.clone()
    state = p._state
    holding, errors = threading.Event(), []

    def second() -> None:
        with other.applied():
            holding.set()
            while not state._overlay_waiting:  # until the main thread waits for its overlay
                time.sleep(0.001)
            try:
                with other.overlay_weights({KEY: torch.ones(3, 3)}):
                    pass
            except PatchConflictError as exc:
                errors.append(exc)

    thread = threading.Thread(target=second)
    with p.applied() as module:
        thread.start()
        holding.wait()
        with p.overlay_weights({KEY: torch.full((3, 3), 2.0)}):  # waits until `second` lets go
            assert torch.equal(module.lin.weight, torch.full((3, 3), 2.0))
    thread.join()
    assert len(errors) == 1 and "both want weight overlays" in str(errors[0])
