"""Today's context-window inputs (nodes/context_windows.py over comfy_core/sampling/context_windows.py),
each against its equation on tiny tensors, the expectations composed by hand:

- causal_window_fix: a window not starting at frame 0 runs with frame `first - 1` prepended (x and
  per-frame conds), and that frame's output is dropped before fusing;
- latent_retain_index_list / cond_retain_index_list: sub-position i of each window's x / model
  conds holds frame i of the whole latent;
- split_conds_to_windows: a window gets entry `int(center * n)` of an n-entry conditioning, center
  = (first + last) / (2 * frames);
- freenoise: frames after each window are a seeded permutation of the window-step frames at its start.
A workflow saved with 0.3.64's widgets loads onto today's inputs, the new ones at their defaults:
tests/graph/test_editor_workflow_saved_2026.py (and the editor itself, tests/browser)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.sampling.cond_batch import calc_cond_batch
from comfy_core.sampling.context_schedules import ContextWindowError
from comfy_core.sampling.context_windows import (
    CONTEXT_WINDOW_OPTION, _sampler_sample_wrapper, apply_freenoise, context_handler,
)
from comfy_core.wrappers import WrappersMP
from nodes import context_windows as cw
from nodes.errors import NodeInputError
from tests.nodes.test_context_window_nodes import MODEL

SIGMAS = torch.tensor([2.0, 0.0])


class MixingModel:
    """out = x + mean over the window's frames of x + 10 * c_concat: each output frame depends on the
    whole window (so the causal frame shows), records what each call saw."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def apply_model(self, x, sigma, c_crossattn=None, c_concat=None, transformer_options=None, **_):
        self.calls.append({"x": x.clone(), "c_concat": c_concat, "c_crossattn": c_crossattn,
                           "window": transformer_options[CONTEXT_WINDOW_OPTION].index_list})
        out = x + x.mean(dim=2, keepdim=True)
        return out if c_concat is None else out + 10.0 * c_concat


def _run(handler, x, entries):
    model = MixingModel()
    options = {"context_handler": handler, "transformer_options": {"sample_sigmas": SIGMAS}}
    (out,) = calc_cond_batch(model, [entries], x, SIGMAS[:1], options)
    return model, out


def _frames(n: int) -> torch.Tensor:
    """[1, 1, n, 1, 1] with frame t holding t (so a frame's origin can be read off its value)."""
    return torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1, 1)


def _flat_fuse(n: int, windows: list[list[int]], outputs: list[torch.Tensor]) -> torch.Tensor:
    total, count = torch.zeros(1, 1, n, 1, 1), torch.zeros(n)
    for frames, out in zip(windows, outputs):
        total[:, :, frames] += out
        count[frames] += 1
    return total / count.reshape(1, 1, n, 1, 1)


def test_causal_window_fix_prepends_the_frame_before_each_later_window_and_drops_its_output():
    x = _frames(7)
    crossattn = torch.zeros(1, 2, 3)
    handler = context_handler("standard_static", "flat", 3, 1, dim=2)  # windows [0,1,2] [2,3,4] [4,5,6]
    model, out = _run(handler, x, [{"model_conds": {"c_crossattn": crossattn}}])
    seen = [(call["window"], call["x"].flatten().tolist()) for call in model.calls]
    assert seen == [([0, 1, 2], [0, 1, 2]), ([2, 3, 4], [1, 2, 3, 4]), ([4, 5, 6], [3, 4, 5, 6])]
    # each window's output: its frames plus the mean of what the model saw, the anchor's output dropped
    outputs = [torch.tensor([0., 1, 2]) + 1.0, torch.tensor([2., 3, 4]) + 2.5, torch.tensor([4., 5, 6]) + 4.5]
    expected = _flat_fuse(7, [[0, 1, 2], [2, 3, 4], [4, 5, 6]], [o.reshape(1, 1, 3, 1, 1) for o in outputs])
    torch.testing.assert_close(out, expected)

    off = context_handler("standard_static", "flat", 3, 1, dim=2, causal_window_fix=False)
    model, out = _run(off, x, [{"model_conds": {"c_crossattn": crossattn}}])
    assert [call["x"].flatten().tolist() for call in model.calls] == [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    outputs = [torch.tensor([0., 1, 2]) + 1.0, torch.tensor([2., 3, 4]) + 3.0, torch.tensor([4., 5, 6]) + 5.0]
    torch.testing.assert_close(out, _flat_fuse(7, [[0, 1, 2], [2, 3, 4], [4, 5, 6]],
                                               [o.reshape(1, 1, 3, 1, 1) for o in outputs]))


def test_latent_and_cond_retain_lists_put_frame_0_at_the_start_of_every_window():
    x = _frames(6)
    concat = 100.0 + _frames(6)
    handler = context_handler("batched", "flat", 3, 0, dim=2, causal_window_fix=False,
                              latent_retain_index_list="0", cond_retain_index_list="0")
    model, out = _run(handler, x, [{"model_conds": {"c_crossattn": torch.zeros(1, 2, 3), "c_concat": concat}}])
    assert [call["x"].flatten().tolist() for call in model.calls] == [[0, 1, 2], [0, 4, 5]]
    assert [call["c_concat"].flatten().tolist() for call in model.calls] == [[100, 101, 102], [100, 104, 105]]
    # window [3, 4, 5] saw x [0, 4, 5] (mean 3) and concat [100, 104, 105]; its outputs go to frames 3..5
    second = torch.tensor([0., 4, 5]) + 3.0 + 10.0 * torch.tensor([100., 104, 105])
    first = torch.tensor([0., 1, 2]) + 1.0 + 10.0 * torch.tensor([100., 101, 102])
    torch.testing.assert_close(out.flatten(), torch.cat([first, second]))

    only_cond = context_handler("batched", "flat", 3, 0, dim=2, causal_window_fix=False, cond_retain_index_list="0,2")
    model, _ = _run(only_cond, x, [{"model_conds": {"c_crossattn": torch.zeros(1, 2, 3), "c_concat": concat}}])
    assert [call["x"].flatten().tolist() for call in model.calls] == [[0, 1, 2], [3, 4, 5]]
    assert model.calls[1]["c_concat"].flatten().tolist() == [100, 104, 102]


def test_split_conds_to_windows_gives_each_window_the_entry_of_its_region():
    x = _frames(12)
    entries = [{"model_conds": {"c_crossattn": torch.full((1, 2, 3), float(i))}} for i in range(3)]
    handler = context_handler("batched", "flat", 4, 0, dim=2, causal_window_fix=False, split_conds_to_windows=True)
    model, _ = _run(handler, x, entries)
    # centers (0+3)/24 = .125, (4+7)/24 = .458, (8+11)/24 = .792 -> regions int(3c) = 0, 1, 2; one entry each
    assert [(call["window"], call["c_crossattn"].shape[0], call["c_crossattn"].flatten()[0].item())
            for call in model.calls] == [([0, 1, 2, 3], 1, 0.0), ([4, 5, 6, 7], 1, 1.0), ([8, 9, 10, 11], 1, 2.0)]
    together = context_handler("batched", "flat", 4, 0, dim=2, causal_window_fix=False)
    model, _ = _run(together, x, entries)
    assert all(call["c_crossattn"].shape[0] == 3 for call in model.calls)  # every entry, batched


def test_freenoise_copies_a_seeded_permutation_of_each_window_step_past_the_window():
    noise = _frames(10)
    out = apply_freenoise(noise, 2, 4, 1, seed=7)
    assert torch.equal(noise, _frames(10))  # the input is not changed
    g = torch.Generator().manual_seed(7)
    first, second = torch.randperm(3, generator=g), torch.randperm(3, generator=g)
    frames = list(range(10))
    frames[4:7] = [frames[i] for i in (first + 0).tolist()]  # window [0..3], step 3: frames 4..6 from 0..2
    frames[7:10] = [frames[i] for i in (second + 3).tolist()]  # window [3..6]: frames 7..9 from 3..5 (as placed)
    assert out.flatten().tolist() == frames
    assert torch.equal(apply_freenoise(_frames(4), 2, 4, 1, seed=7), _frames(4))  # one window: unchanged
    assert torch.equal(apply_freenoise(_frames(9), 2, 4, 6, seed=7), _frames(9))  # batched, overlap > length
    with pytest.raises(ContextWindowError, match="freenoise"):
        apply_freenoise(_frames(9), 2, 4, 4, seed=7)


def test_the_freenoise_node_wraps_sampling_and_reschedules_the_initial_noise_with_the_seed():
    (patched,) = cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2, True)
    assert patched.get_wrappers(WrappersMP.SAMPLER_SAMPLE, "ContextWindows_sampler_sample")
    (plain,) = cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2, False)
    assert not plain.get_wrappers(WrappersMP.SAMPLER_SAMPLE, "ContextWindows_sampler_sample")
    seen = []
    extra = {"model_options": patched.model_options, "seed": 7}
    _sampler_sample_wrapper(lambda g, s, e, c, noise, *a: seen.append(noise), None, SIGMAS, extra, None, _frames(10))
    assert torch.equal(seen[0], apply_freenoise(_frames(10), 2, 4, 1, 7))
    with pytest.raises(ContextWindowError, match="seed"):
        _sampler_sample_wrapper(lambda *a: None, None, SIGMAS, {**extra, "seed": None}, None, _frames(10))


def test_wan_retain_first_frame_is_the_cond_list_0_and_freenoise_its_default():
    (patched,) = cw.wan_context_windows_manual(MODEL, 81, 30, "standard_uniform", 1, False, "pyramid",
                                               retain_first_frame=True)
    h = patched.model_options["context_handler"]
    assert (h.cond_retain_index_list, h.latent_retain_index_list, h.freenoise, h.causal_window_fix) == ([0], [], True,
                                                                                                         True)


def test_bad_retain_lists_and_flags_are_input_errors():
    with pytest.raises(NodeInputError, match="cond_retain_index_list"):
        cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2, False, "0,a")
    with pytest.raises(NodeInputError, match="latent_retain_index_list"):
        cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2, False, "", False, "-1")
    with pytest.raises(NodeInputError, match="causal_window_fix"):
        cw.context_windows_manual(MODEL, 4, 1, "standard_static", 1, False, "flat", 2, False, "", False, "", "yes")
    beyond = context_handler("batched", "flat", 3, 0, dim=2, causal_window_fix=False, latent_retain_index_list="3")
    with pytest.raises(ContextWindowError, match="retain index 3"):
        _run(beyond, _frames(6), [{"model_conds": {"c_crossattn": torch.zeros(1, 2, 3)}}])
