"""Every ComfyUI sampling name packs reassign or extend, changed inside an installed session: the
change reaches a sampling run (the pack's function is called, or its name is offered and runs),
it arrives through `session.extension_points` (the field is set), and no attribute of any
comfy_core module changes (comfy_core/extension_points.py, compat/samplers_points.py)."""
from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

S = 0.5


class TinyDiffusionModel(nn.Module):
    """The DiffusionModel contract around the ideal Gaussian denoiser (data mean = context mean)."""

    def __init__(self) -> None:
        super().__init__()
        from comfy_core.models.model_sampling import ModelSampling

        self.weight = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.model_sampling = ModelSampling("eps")
        self.latent_format = SimpleNamespace(channels=4, scale_factor=0.18215, shift_factor=0.0)

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        mu = c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **_):
        return None


@pytest.fixture
def model():
    from comfy_core.patching import ModelPatcher

    return ModelPatcher(TinyDiffusionModel())


def _cond(v: float) -> list:
    return [[torch.full((1, 77, 8), v), {}]]


def _run(model, sampler: str = "euler", scheduler: str = "normal", steps: int = 3, cfg: float = 3.0) -> torch.Tensor:
    """The built-in KSampler node, as a workflow runs it."""
    from nodes.sampling import ksampler

    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return ksampler(model, 7, steps, cfg, sampler, scheduler, _cond(0.3), _cond(-0.2), latent, 1.0)[0]["samples"]


def _comfy_core_state() -> dict:
    """Every attribute of every loaded comfy_core module: identity, and the items of containers."""
    state = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("comfy_core") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            items = None
            if isinstance(value, (list, tuple, set, frozenset)):
                items = tuple(id(v) for v in value)
            elif isinstance(value, dict):
                items = tuple((k, id(v)) for k, v in value.items())
            state[(name, attr)] = (id(value), items)
    return state


def _assert_no_comfy_core_change(before: dict) -> None:
    from comfy_core import extension_points

    after = _comfy_core_state()
    changed = [key for key, value in before.items() if after.get(key) != value]
    assert changed == []
    assert extension_points.BUILT_IN == extension_points.ExtensionPoints()


# (surface module, name, ExtensionPoints field, sampler the run uses)
REPLACED_FUNCTIONS = [
    ("comfy.samplers", "sampling_function", "sampling_function", "euler"),
    ("comfy.samplers", "cfg_function", "cfg_function", "euler"),
    ("comfy.samplers", "calc_cond_batch", "calc_cond_batch", "euler"),
    ("comfy.samplers", "get_area_and_mult", "get_area_and_mult", "euler"),
    ("comfy.samplers", "sample", "sample", "euler"),
    ("comfy.sample", "sample", "sample_steps", "euler"),
    ("comfy.k_diffusion.sampling", "default_noise_sampler", "default_noise_sampler", "euler_ancestral"),
]


@pytest.mark.parametrize("module_name, name, field, sampler", REPLACED_FUNCTIONS,
                         ids=[f"{m}.{n}" for m, n, _, _ in REPLACED_FUNCTIONS])
def test_a_replaced_function_runs_through_the_sessions_extension_points(session, model, module_name, name, field,
                                                                         sampler) -> None:
    module = importlib.import_module(module_name)
    expected = _run(model, sampler)  # also loads every module the run needs
    original = getattr(module, name)
    calls = []

    def replacement(*args, **kwargs):  # a pack's wrapper around ComfyUI's function
        calls.append(name)
        return original(*args, **kwargs)

    before = _comfy_core_state()
    setattr(module, name, replacement)
    try:
        assert getattr(session.extension_points, field) is replacement
        assert getattr(module, name) is replacement
        out = _run(model, sampler)
        _assert_no_comfy_core_change(before)
    finally:
        setattr(module, name, original)
    assert calls and torch.equal(out, expected)
    assert getattr(module, name) is original


def test_ksampler_sample_replacement_is_the_sessions(session, model) -> None:
    import comfy.samplers

    expected = _run(model)
    original = comfy.samplers.KSampler.sample
    seen = []

    def ksampler_sample(self, *args, **kwargs):  # smZNodes patches the class method
        seen.append((self.sampler, self.scheduler))
        return original(self, *args, **kwargs)

    before = _comfy_core_state()
    comfy.samplers.KSampler.sample = ksampler_sample
    try:
        assert session.extension_points.ksampler_sample is ksampler_sample
        assert comfy.samplers.KSampler.sample is ksampler_sample
        out = _run(model)
        _assert_no_comfy_core_change(before)
    finally:
        comfy.samplers.KSampler.sample = original
    assert seen == [("euler", "normal")] and torch.equal(out, expected)


def test_replacing_an_existing_k_diffusion_sampler(session, model) -> None:
    import comfy.k_diffusion.sampling as kds

    _run(model)
    euler = kds.sample_euler
    calls = []

    def zeroing_euler(model, x, sigmas, **kwargs):
        calls.append(len(sigmas))
        return euler(model, x, sigmas, **kwargs) * 0

    before = _comfy_core_state()
    kds.sample_euler = zeroing_euler
    try:
        assert session.extension_points.samplers["euler"] is zeroing_euler and kds.sample_euler is zeroing_euler
        out = _run(model)
        ddim = _run(model, sampler="ddim")  # ComfyUI's ddim is its euler: the replacement too
        _assert_no_comfy_core_change(before)
    finally:
        del kds.sample_euler
    assert calls == [4, 4] and torch.count_nonzero(out) == 0 and torch.count_nonzero(ddim) == 0
    assert "euler" not in session.extension_points.samplers and kds.sample_euler is euler


def test_replacing_sample_dpm_fast_reaches_the_dpm_fast_sampler(session, model) -> None:
    import comfy.k_diffusion.sampling as kds

    expected = _run(model, sampler="dpm_fast")
    original = kds.sample_dpm_fast
    calls = []

    def dpm_fast(model, x, sigma_min, sigma_max, n, **kwargs):  # k-diffusion's signature: a sigma range
        calls.append((float(sigma_min), float(sigma_max), n))
        return original(model, x, sigma_min, sigma_max, n, **kwargs)

    before = _comfy_core_state()
    kds.sample_dpm_fast = dpm_fast
    try:
        assert session.extension_points.samplers["dpm_fast"] is dpm_fast
        out = _run(model, sampler="dpm_fast")
        _assert_no_comfy_core_change(before)
    finally:
        del kds.sample_dpm_fast
    assert len(calls) == 1 and calls[0][2] == 3 and torch.equal(out, expected)


def _combos() -> tuple[list, list]:
    from graph.registry import Registry
    from nodes import register_builtin_nodes

    registry = Registry()
    register_builtin_nodes(registry)
    required = registry.object_info_for("KSampler")["KSampler"]["input"]["required"]
    return required["sampler_name"][0], required["scheduler"][0]


def test_a_new_sampler_and_its_names(session, model) -> None:
    import comfy.k_diffusion.sampling as kds
    import comfy.samplers

    expected = _run(model)
    calls = []

    def sample_pack_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
        calls.append(len(sigmas))
        return kds.sample_euler(model, x, sigmas, extra_args=extra_args, callback=callback, disable=disable)

    before = _comfy_core_state()
    assert not hasattr(kds, "sample_pack_euler")
    kds.sample_pack_euler = sample_pack_euler
    comfy.samplers.KSAMPLER_NAMES.append("pack_euler")
    comfy.samplers.KSampler.SAMPLERS.insert(3, "pack_euler")  # smZNodes inserts into KSampler.SAMPLERS
    points = session.extension_points
    assert points.samplers["pack_euler"] is sample_pack_euler
    assert comfy.samplers.SAMPLER_NAMES is comfy.samplers.KSampler.SAMPLERS is points.sampler_names
    assert points.sampler_names[3] == "pack_euler" and points.ksampler_names[-1] == "pack_euler"
    assert "pack_euler" in _combos()[0]
    out = _run(model, sampler="pack_euler")
    _assert_no_comfy_core_change(before)
    assert calls == [4] and torch.equal(out, expected)

    comfy.samplers.KSampler.SAMPLERS.remove("pack_euler")
    del kds.sample_pack_euler
    assert "pack_euler" not in _combos()[0] and not hasattr(kds, "sample_pack_euler")
    with pytest.raises(Exception, match="pack_euler"):
        _run(model, sampler="pack_euler")


def test_a_new_scheduler_and_its_handler(session, model) -> None:
    import comfy.k_diffusion.sampling as kds
    import comfy.samplers

    from comfy_core.sampling import schedulers

    calls = []

    def karras_rho5(n, sigma_min, sigma_max):
        calls.append(n)
        return kds.get_sigmas_karras(n, sigma_min, sigma_max, rho=5.0)

    _run(model)
    ours = dict(schedulers.SCHEDULER_HANDLERS)
    before = _comfy_core_state()
    handler = comfy.samplers.SchedulerHandler(karras_rho5, use_ms=False)
    comfy.samplers.SCHEDULER_HANDLERS["karras_rho5"] = handler
    comfy.samplers.SCHEDULER_NAMES.append("karras_rho5")
    points = session.extension_points
    assert points.scheduler_handlers == {"karras_rho5": handler}
    assert comfy.samplers.KSampler.SCHEDULERS is comfy.samplers.SCHEDULER_NAMES is points.scheduler_names
    assert "karras_rho5" in comfy.samplers.SCHEDULER_HANDLERS and "karras_rho5" in _combos()[1]
    out = _run(model, scheduler="karras_rho5")
    _assert_no_comfy_core_change(before)
    assert calls == [3] and dict(schedulers.SCHEDULER_HANDLERS) == ours
    assert not torch.equal(out, _run(model, scheduler="karras"))

    comfy.samplers.SCHEDULER_HANDLERS.pop("karras_rho5")
    comfy.samplers.SCHEDULER_NAMES.remove("karras_rho5")
    assert points.scheduler_handlers == {} and "karras_rho5" not in _combos()[1]


def test_changes_stay_in_their_session(session, model) -> None:
    import comfy.k_diffusion.sampling as kds
    import comfy.samplers

    from comfy_core import extension_points
    from comfy_core.sampling.samplers.registry import SAMPLER_NAMES, sampler_names

    calls = []
    original = comfy.samplers.sampling_function

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    comfy.samplers.sampling_function = counting
    comfy.samplers.SAMPLER_NAMES.append("only_here")
    kds.sample_only_here = kds.sample_euler
    with extension_points.use(extension_points.ExtensionPoints()):  # another host's runtime
        _run(model)
        assert tuple(sampler_names()) == SAMPLER_NAMES and "only_here" not in _combos()[0]
    assert calls == []
    _run(model)
    assert calls and "only_here" in _combos()[0]
