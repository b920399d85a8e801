"""What ComfyUI's runtime does for packs that reach into it, through the fixture pack
tests/compat/api_packs/runtime_pack: a replaced `comfy.samplers.get_area_and_mult` is what our
batching calls; `model.extra_conds` / `extra_conds_shapes` exist, and an object-patched
`extra_conds` (IC-Light) makes the model inputs; a pack mixin's own `calculate_denoised` on
`model_sampling` is what the model uses; `weight_inplace_update` puts patched values into the
module's own tensors while applied and the originals back after."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "runtime_pack" / "__init__.py"
BIAS = "diffusion_model.out.2.bias"
WIDTH = 64  # the tiny SD1 checkpoint's text width


@pytest.fixture
def pack(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    spec = importlib.util.spec_from_file_location("runtime_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers its get_area_and_mult, as the pack does at import
    for key in module.CALLS:
        module.CALLS[key] = 0
    yield module
    module.unregister()
    import comfy.samplers

    del comfy.samplers.get_area_and_mult  # the session's point empty again: ours
    sys.modules.pop("runtime_pack_under_test", None)


@pytest.fixture
def sd1():
    from nodes.loaders import checkpoint_loader_simple

    return checkpoint_loader_simple("tiny.safetensors")[0]


def _cond(value: float, **options) -> list:
    return [[torch.full((1, 77, WIDTH), value), dict(options)]]


def _ksampler(model, positive, steps: int = 2, negative: float = -0.1) -> torch.Tensor:
    from nodes.sampling import ksampler

    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return ksampler(model, 3, steps, 2.0, "euler", "normal", positive, _cond(negative), latent, 1.0)[0]["samples"]


# --- get_area_and_mult ---------------------------------------------------------------------------

def test_the_packs_get_area_and_mult_is_the_sessions_and_leaves_entries_out(pack, session, sd1):
    import comfy.samplers

    assert comfy.samplers.get_area_and_mult is pack.get_area_and_mult
    assert session.extension_points.get_area_and_mult is pack.get_area_and_mult
    only_a = _ksampler(sd1, _cond(0.3))
    calls = pack.CALLS["get_area_and_mult"]
    assert calls > 0  # every entry of every step went through the pack's function
    # an entry the pack leaves out of every step (its sigma range is empty) changes nothing ...
    out_of_range = _cond(0.3) + _cond(0.9, runtime_pack_sigmas=(-2.0, -1.0))
    assert torch.equal(_ksampler(sd1, out_of_range), only_a)
    # ... and one it keeps is averaged in, as by ours
    in_range = _cond(0.3) + _cond(0.9, runtime_pack_sigmas=(0.0, 1e9))
    assert not torch.equal(_ksampler(sd1, in_range), only_a)


def test_the_builtin_get_area_and_mult_gives_comfyuis_cond_obj(pack):
    import comfy.samplers

    x = torch.randn(2, 4, 8, 8)
    entry = {"model_conds": {"c_crossattn": torch.ones(1, 3, 8)}, "area": (4, 4, 2, 2), "strength": 0.5,
             "uuid": "u"}
    got = pack.store.get_area_and_mult(entry, x, torch.tensor([1.0, 1.0]))
    assert got._fields == ("input_x", "mult", "conditioning", "area", "control", "patches", "uuid", "hooks")
    assert torch.equal(got[0], x[:, :, 2:6, 2:6]) and got.uuid == "u" and tuple(got.area) == (4, 4, 2, 2)
    assert got.conditioning["c_crossattn"].shape == (2, 3, 8)
    assert comfy.samplers.can_concat_cond(got, got)
    assert pack.store.get_area_and_mult({**entry, "timestep_start": 0.5}, x, torch.tensor([1.0, 1.0])) is None


# --- extra_conds / extra_conds_shapes ----------------------------------------------------------------

def test_extra_conds_gives_comfyuis_cond_values(pack, sd1):
    import comfy.conds

    text = torch.randn(1, 77, WIDTH)
    noise = torch.zeros(1, 4, 8, 8)
    out = sd1.model.extra_conds(cross_attn=text, noise=noise, device=noise.device, width=64, height=64)
    assert set(out) == {"c_crossattn"}
    assert isinstance(out["c_crossattn"], comfy.conds.CONDCrossAttn) and out["c_crossattn"].cond is text
    assert sd1.model.extra_conds_shapes(cross_attn=text) == {}


def test_an_object_patched_extra_conds_makes_the_model_inputs(pack, sd1):
    plain = _ksampler(sd1, _cond(0.3))
    scaled = _ksampler(pack.apply_text_scale(sd1, 2.0), _cond(0.3))
    assert not torch.equal(scaled, plain)
    # the pack's text (both prompts doubled) is what the UNet got
    assert torch.equal(scaled, _ksampler(sd1, _cond(0.6), negative=-0.2))


def test_extra_conds_shapes_of_reference_latents_as_comfyuis_flux(pack):
    import comfy.model_base
    from comfy_core.families import default_registry
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.patching import ModelPatcher
    from tests.fixtures.dit_loras import tiny_flux_model

    tiny = tiny_flux_model(seed=1).model
    family = next(f for f in default_registry() if f.name == "flux")
    flux = ModelPatcher(DiffusionModel(tiny.diffusion_model, tiny.model_sampling, tiny.latent_format, family=family,
                                       adm=tiny.conditions))
    assert type(flux.model) is comfy.model_base.Flux  # loaded where the session's points are in force
    refs = [torch.zeros(1, 16, 4, 4), torch.zeros(1, 16, 2, 2)]
    assert pack.cond_shapes(flux, {"positive": [{"reference_latents": refs}, {}]}) == {
        "ref_latents": [[1, 16, (16 * 16 + 16 * 4) // 16]]}


# --- a pack mixin's calculate_denoised ------------------------------------------------------------

def test_a_pack_mixins_calculate_denoised_is_what_the_model_uses(pack, sd1):
    patched = pack.patch_model_sampling(sd1)
    x, sigma = torch.randn(1, 4, 8, 8), torch.tensor([2.0])
    text = torch.randn(1, 77, WIDTH)
    with sd1.applied() as dm:
        plain = dm.apply_model(x, sigma, c_crossattn=text)
    with patched.applied() as dm:
        half = dm.apply_model(x, sigma, c_crossattn=text)
    assert pack.CALLS["calculate_denoised"] == 1
    torch.testing.assert_close(half, plain * 0.5, rtol=1e-6, atol=1e-6)
    assert not torch.equal(_ksampler(patched, _cond(0.3)), _ksampler(sd1, _cond(0.3)))
    assert pack.CALLS["calculate_denoised"] > 1


# --- weight_inplace_update -------------------------------------------------------------------------

@pytest.mark.parametrize("inplace", [True, False])
def test_weight_inplace_update_puts_patched_values_into_the_modules_own_tensors(pack, sd1, inplace):
    diff = torch.full_like(sd1.model_state_dict()[BIAS], 0.25)
    vanilla = pack.get_vanilla_model_patcher(sd1, weight_inplace_update=inplace)
    vanilla.add_patches({BIAS: ("diff", (diff,))}, 1.0)
    assert vanilla.weight_inplace_update is inplace and vanilla.clone().weight_inplace_update is inplace
    held = sd1.model.diffusion_model.out[2].bias  # a reference a pack keeps
    original = held.detach().clone()
    seen = []

    def wrapper(apply_model, args):
        seen.append(held.detach().clone())  # what the pack's reference reads during the run
        return apply_model(args["input"], args["timestep"], **args["c"])

    vanilla.set_model_unet_function_wrapper(wrapper)
    _ksampler(vanilla, _cond(0.3), steps=1)
    assert seen
    if inplace:  # ComfyUI copies the patched values into the module's own tensor
        assert all(torch.equal(s, original + diff) for s in seen)
    else:  # a new tensor object is swapped in: the held one keeps the original values
        assert all(torch.equal(s, original) for s in seen)
    assert sd1.model.diffusion_model.out[2].bias is held and torch.equal(held.detach(), original)
    assert torch.equal(vanilla.model_state_dict()[BIAS], original)
