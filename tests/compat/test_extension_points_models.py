"""ComfyUI's replaceable names of the attention and model layers are extension points: a pack's
assignment inside an installed session changes that session's `ExtensionPoints`
(comfy_core/extension_points.py), the pack's function reaches the run, and no comfy_core module
attribute changes (issue 28: the core never reads a replaceable global)."""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

import pytest
import torch

from tests.compat.api_pack_support import load_sd1_model, unet_output
from tests.fixtures.dit_checkpoints import flux_state_dict, save


@pytest.fixture(scope="module")
def model(tiny_sd1_ckpt):  # noqa: ANN001, ANN201
    return load_sd1_model(tiny_sd1_ckpt)


@pytest.fixture(scope="module")
def flux(tmp_path_factory):  # noqa: ANN001, ANN201
    from comfy_core.loading import load_checkpoint

    path = save(flux_state_dict(), tmp_path_factory.mktemp("flux") / "flux.safetensors")
    patcher, _, _ = load_checkpoint(path, output_clip=False, output_vae=False)
    return patcher


def _core_globals() -> dict[tuple[str, str], int]:
    """Every attribute of every imported comfy_core module, by identity."""
    return {(name, attr): id(value)
            for name, module in list(sys.modules.items())
            if module is not None and (name == "comfy_core" or name.startswith("comfy_core."))
            for attr, value in list(vars(module).items())}


def _changed(before: dict[tuple[str, str], int]) -> list[tuple[str, str]]:
    after = _core_globals()
    return sorted(key for key, ident in before.items() if after.get(key) != ident)


@pytest.fixture
def core_unchanged(session) -> Iterator[None]:  # noqa: ANN001
    """Fails the test when a comfy_core module attribute (or the built-in extension points)
    changed while it ran; the test's model runs happen after a warm-up, so lazily filled module
    state is already there."""
    from comfy_core import extension_points
    from comfy_core.extension_points import ExtensionPoints

    before = _core_globals()
    yield
    assert _changed(before) == []
    assert extension_points.BUILT_IN == ExtensionPoints()


class Counting:
    """A pack's replacement that counts its calls and delegates to what it replaced."""

    def __init__(self, previous: Callable[..., Any]) -> None:
        self.previous = previous
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.previous(*args, **kwargs)


def _blocks(model) -> int:  # noqa: ANN001
    from comfy_core.models.transformer import BasicTransformerBlock

    return sum(isinstance(m, BasicTransformerBlock) for m in model.model.diffusion_model.modules())


@pytest.fixture
def warm(model, flux) -> None:  # noqa: ANN001
    """One run of each model before the core's attributes are recorded."""
    unet_output(model)
    _flux_output(flux)


def _flux_output(patcher) -> torch.Tensor:  # noqa: ANN001
    dm = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 8, 8, generator=gen)
    context = torch.randn(1, 5, dm.config.context_in_dim, generator=gen)
    y = torch.randn(1, dm.config.vec_in_dim, generator=gen)
    with torch.no_grad(), patcher.applied():
        return dm(x, torch.tensor([0.7]), context, y=y, guidance=torch.tensor([3.5]), transformer_options={})


# --- attention -----------------------------------------------------------------------------------

def test_optimized_attention_is_the_sessions_and_reaches_the_unet(session, model, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention
    from comfy_core import extension_points
    from comfy_core.attention.calling import attention_in_force
    from comfy_core.extension_points import ExtensionPoints

    reference = unet_output(model)
    assert attention.optimized_attention is attention_in_force  # the built-in, read through the session
    counting = Counting(attention.optimized_attention)
    attention.optimized_attention = counting
    assert session.extension_points.attention is counting
    assert attention.optimized_attention is counting
    assert attention.get_attention_function("optimized") is counting
    out = unet_output(model)
    assert counting.calls == 2 * _blocks(model)  # attn1 and attn2 of every block
    assert torch.equal(out, reference)
    # other extension points (another host, a library user) do not see the session's change
    with extension_points.use(ExtensionPoints()):
        unet_output(model)
    assert counting.calls == 2 * _blocks(model)
    attention.optimized_attention = counting.previous


def test_optimized_attention_masked_is_the_sessions(session, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention

    layer = attention.CrossAttention(query_dim=8, heads=2, dim_head=4)
    x = torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 3, dtype=torch.bool)
    reference = layer(x, mask=mask)
    counting = Counting(attention.optimized_attention_masked)
    attention.optimized_attention_masked = counting
    assert session.extension_points.attention_masked is counting
    assert session.extension_points.attention is None  # the unmasked one is its own point
    out = layer(x, mask=mask)
    layer(x)  # unmasked: not the masked function
    assert counting.calls == 1
    assert torch.equal(out, reference)


def test_registered_attention_functions_are_the_sessions(session, model, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention
    from comfy_core.attention import calling
    from comfy_core.extension_points import ExtensionPoints

    assert set(attention.REGISTERED_ATTENTION_FUNCTIONS) == {"pytorch", "sub_quad", "split"}
    mine = Counting(attention.attention_pytorch)
    attention.register_attention_function("mine", mine)
    attention.register_attention_function("mine", attention.attention_basic)  # first one stays, as ComfyUI
    attention.register_attention_function("pytorch", mine)  # a built-in name is never replaced
    assert session.extension_points.attention_functions == {"mine": mine}
    assert attention.REGISTERED_ATTENTION_FUNCTIONS["mine"] is mine
    assert "mine" in attention.REGISTERED_ATTENTION_FUNCTIONS
    assert attention.get_attention_function("mine") is mine
    assert attention.get_attention_function("pytorch") is attention.attention_pytorch
    assert attention.get_attention_function("nope", None) is None
    with pytest.raises(KeyError):
        attention.get_attention_function("nope")
    # the built-in table and other extension points do not have it
    assert "mine" not in calling.BUILT_IN_ATTENTION_FUNCTIONS
    assert calling.get_attention_function("mine", None, points=ExtensionPoints()) is None
    # a pack choosing its registered function by name: it reaches the run
    attention.optimized_attention = attention.get_attention_function("mine")
    out = unet_output(model)
    assert mine.calls == 2 * _blocks(model)
    assert torch.allclose(out, unet_output(model), atol=1e-5)
    attention.optimized_attention = None


def test_attention_built_ins_are_not_module_globals_of_the_core() -> None:
    from comfy_core.attention import calling
    from comfy_core.models import transformer

    for gone in ("optimized_attention", "optimized_attention_masked"):
        assert not hasattr(transformer, gone)
    assert not hasattr(calling, "REGISTERED_ATTENTION_FUNCTIONS")
    assert not hasattr(calling, "register_attention_function")
    with pytest.raises(TypeError):
        calling.BUILT_IN_ATTENTION_FUNCTIONS["mine"] = calling.attention_basic  # read-only


# --- the UNet's block functions --------------------------------------------------------------------

def test_forward_timestep_embed_and_apply_control_are_the_sessions(session, model, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel
    from comfy_core.models import unet

    assert openaimodel.forward_timestep_embed is unet.forward_timestep_embed
    assert openaimodel.apply_control is unet.apply_control
    reference = unet_output(model)
    embed = Counting(openaimodel.forward_timestep_embed)
    control = Counting(openaimodel.apply_control)
    openaimodel.forward_timestep_embed = embed
    openaimodel.apply_control = control
    assert session.extension_points.forward_timestep_embed is embed
    assert session.extension_points.apply_control is control
    out = unet_output(model)
    dm = model.model.diffusion_model
    assert embed.calls == len(dm.input_blocks) + 1 + len(dm.output_blocks)
    assert control.calls == len(dm.input_blocks) + 1 + len(dm.output_blocks)
    assert torch.equal(out, reference)
    openaimodel.forward_timestep_embed = embed.previous
    openaimodel.apply_control = control.previous


# --- Flux's attention --------------------------------------------------------------------------------

def test_flux_attention_is_the_sessions_under_each_comfy_name(session, flux, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.ldm.chroma.layers as chroma_layers
    import comfy.ldm.flux.layers as layers
    import comfy.ldm.flux.math as flux_math
    from comfy_core.families.flux import math as core_flux_math

    reference = _flux_output(flux)
    dm = flux.model.diffusion_model
    for surface in (layers, flux_math, chroma_layers):
        assert surface.attention is core_flux_math.attention
        counting = Counting(surface.attention)
        surface.attention = counting
        assert session.extension_points.flux_attention is counting
        assert layers.attention is flux_math.attention is chroma_layers.attention is counting
        out = _flux_output(flux)
        assert counting.calls == len(dm.double_blocks) + len(dm.single_blocks)
        assert torch.equal(out, reference)
        surface.attention = counting.previous
        session.extension_points.flux_attention = None


# --- weights ---------------------------------------------------------------------------------------

def test_calculate_weight_is_the_sessions_and_computes_the_patched_weights(session, model, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.lora

    key = next(k for k in sorted(model.weight_keys()) if k.endswith("to_q.weight"))
    patched = model.clone()
    weight = model.model.get_parameter(key)
    patched.add_patches({key: (torch.full_like(weight, 0.01),)})
    expected = unet_output(patched)
    counting = Counting(comfy.lora.calculate_weight)
    comfy.lora.calculate_weight = counting
    assert session.extension_points.calculate_weight is counting
    again = model.clone()
    again.add_patches({key: (torch.full_like(weight, 0.01),)})
    assert torch.equal(unet_output(again), expected)
    assert counting.calls == 1
    comfy.lora.calculate_weight = counting.previous


# --- the model-class resolver ------------------------------------------------------------------------

def test_model_class_is_the_sessions_resolver(session, tiny_sd1_ckpt, core_unchanged) -> None:  # noqa: ANN001
    import comfy.model_base

    from comfy_core import extension_points
    from comfy_core.extension_points import ExtensionPoints
    from comfy_core.models.diffusion import DiffusionModel
    from compat.mp_model_classes import comfy_model_class

    assert session.extension_points.model_class is comfy_model_class
    assert type(load_sd1_model(tiny_sd1_ckpt).model) is comfy.model_base.BaseModel

    class PacksModel(comfy.model_base.BaseModel):
        pass

    session.extension_points.model_class = lambda family: PacksModel
    try:
        assert type(load_sd1_model(tiny_sd1_ckpt).model) is PacksModel
    finally:
        session.extension_points.model_class = comfy_model_class
    with extension_points.use(ExtensionPoints()):
        assert type(load_sd1_model(tiny_sd1_ckpt).model) is DiffusionModel
    with pytest.raises(ImportError):
        import comfy_core.models.family_classes  # noqa: F401  (the global resolver is gone)


# --- the MODEL patcher class -----------------------------------------------------------------------

def test_loaders_build_comfyuis_model_patcher_in_a_session_and_the_core_one_outside(session, tiny_sd1_ckpt) -> None:  # noqa: ANN001
    import comfy.model_patcher

    from comfy_core import extension_points
    from comfy_core.extension_points import ExtensionPoints
    from comfy_core.loading import load_checkpoint
    from comfy_core.patching.clip import ClipPatcher as CoreClipPatcher
    from comfy_core.patching.model import ModelPatcher as CoreModelPatcher
    from compat.mp_model_classes import comfy_patcher_class
    from compat.mp_model_patcher import ClipPatcher, ModelPatcher

    assert comfy.model_patcher.ModelPatcher is ModelPatcher
    assert session.extension_points.model_patcher_class is comfy_patcher_class
    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    assert type(model) is ModelPatcher and isinstance(model, CoreModelPatcher)
    assert type(model.clone()) is ModelPatcher
    assert type(clip.patcher) is ClipPatcher and isinstance(clip.patcher, ModelPatcher)
    assert type(clip.clone().patcher) is ClipPatcher
    # a patcher built directly (a node, a pack) in the session's context is ComfyUI's too
    assert type(CoreModelPatcher(model.model)) is ModelPatcher
    with extension_points.use(ExtensionPoints()):
        core, core_clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    assert type(core) is CoreModelPatcher and type(core_clip.patcher) is CoreClipPatcher
    assert not [name for name in dir(core) if name.startswith("set_model_")]

    class PacksPatcher(ModelPatcher):
        pass

    assert type(PacksPatcher(model.model)) is PacksPatcher  # a pack's subclass stays itself
    session.extension_points.model_patcher_class = lambda core_class: int
    try:
        with pytest.raises(TypeError, match="not a subclass"):
            CoreModelPatcher(model.model)
    finally:
        session.extension_points.model_patcher_class = comfy_patcher_class


def test_disable_model_cfg1_optimization_keeps_the_negative_at_cfg_1(session, model) -> None:  # noqa: ANN001
    # how packs copying ComfyUI's NAG turn it off: `m.disable_model_cfg1_optimization()`
    p = model.clone()
    p.disable_model_cfg1_optimization()
    assert p.model_options["disable_cfg1_optimization"] is True
    assert "disable_cfg1_optimization" not in model.model_options  # the clone's option only


def test_comfyuis_setters_write_comfyuis_keys_through_the_core_data_methods(session, model) -> None:  # noqa: ANN001
    def fn(*a):  # noqa: ANN002, ANN202
        return a

    p = model.clone()
    p.set_model_sampler_cfg_function(fn, disable_cfg1_optimization=True)
    p.set_model_unet_function_wrapper(fn)
    p.set_model_denoise_mask_function(fn)
    p.set_model_sampler_calc_cond_batch_function(fn)
    p.set_model_sampler_post_cfg_function(fn)
    p.set_model_sampler_pre_cfg_function(fn)
    for name in ("attn1_patch", "attn2_patch", "attn1_output_patch", "attn2_output_patch", "input_block_patch",
                 "input_block_patch_after_skip", "output_block_patch", "emb_patch",
                 "forward_timestep_embed_patch"):
        getattr(p, f"set_model_{name}")(fn)
    p.set_model_double_block_patch(fn)
    p.set_model_post_input_patch(fn)
    p.set_model_attn1_replace(fn, "middle", 0, 0)
    p.set_model_attn2_replace(fn, "input", 4)
    p.set_model_patch_replace(fn, "dit", "double_block", 2)
    o = p.model_options
    assert o["sampler_cfg_function"] is fn and o["disable_cfg1_optimization"] is True
    assert o["model_function_wrapper"] is fn and o["denoise_mask_function"] is fn
    # the pack's function, called with ComfyUI-shaped conds (compat/mp_model_patcher.py `_ComfyCondsCall`)
    assert o["sampler_calc_cond_batch_function"].fn is fn
    assert o["sampler_post_cfg_function"] == [fn] and o["sampler_pre_cfg_function"] == [fn]
    patches = o["transformer_options"]["patches"]
    assert set(patches) == {"attn1_patch", "attn2_patch", "attn1_output_patch", "attn2_output_patch",
                            "input_block_patch", "input_block_patch_after_skip", "output_block_patch",
                            "emb_patch", "forward_timestep_embed_patch", "double_block", "post_input"}
    assert all(v == [fn] for v in patches.values())
    assert o["transformer_options"]["patches_replace"] == {
        "attn1": {("middle", 0, 0): fn}, "attn2": {("input", 4): fn}, "dit": {("double_block", 2): fn}}
    assert "sampler_cfg_function" not in model.model_options  # the clone's, not its parent's
    p.set_model_compute_dtype(torch.float16)
    assert p.object_patches["manual_cast_dtype"] is torch.float16


def test_old_three_argument_cfg_function_is_adapted(session) -> None:  # noqa: ANN001
    from compat.mp_model_patcher import ModelPatcher
    from tests.comfy_core.test_sampling_cfg_hooks import X, FakeModel, guided, ideal

    patcher = ModelPatcher(FakeModel())
    patcher.set_model_sampler_cfg_function(lambda cond, uncond, cond_scale: uncond + (cond - uncond) * cond_scale)
    out = guided(patcher.model, 5.0, patcher.model_options)
    c, u = ideal(1.0), ideal(-1.0)
    torch.testing.assert_close(out, X - ((X - u) + ((X - c) - (X - u)) * 5.0))
    one_arg = lambda args: args["uncond"]  # noqa: E731
    patcher.set_model_sampler_cfg_function(one_arg)
    assert patcher.model_options["sampler_cfg_function"] is one_arg


def test_monkeypatching_an_extension_point_is_undone_to_the_built_in(session, monkeypatch) -> None:  # noqa: ANN001
    import comfy.ldm.modules.attention as attention
    from comfy_core.attention.calling import attention_in_force

    def mine(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return attention_in_force(*args, **kwargs)

    monkeypatch.setattr(attention, "optimized_attention", mine)
    assert session.extension_points.attention is mine
    monkeypatch.undo()
    assert session.extension_points.attention is None
    assert attention.optimized_attention is attention_in_force


def test_reassigning_comfy_model_patcher_helpers_changes_no_core_module(session, warm, core_unchanged) -> None:  # noqa: ANN001
    import comfy.model_patcher as mp

    from comfy_core.patching import model_options

    original = mp.set_model_options_patch_replace
    assert original is model_options.set_model_options_patch_replace
    mp.set_model_options_patch_replace = Counting(original)
    try:
        assert model_options.set_model_options_patch_replace is original
    finally:
        mp.set_model_options_patch_replace = original
