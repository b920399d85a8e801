"""Loaded models are instances of exactly ComfyUI's `comfy.model_base` class for their family
(AnimateDiff-Evolved's `get_sd_model_type` compares `type(model.model) == BaseModel`)."""
from __future__ import annotations


def test_loaded_sd1_model_is_exactly_comfy_base_model(session, tiny_sd1_ckpt):
    import comfy.model_base

    from comfy_core.loading import load_checkpoint
    from comfy_core.models.diffusion import DiffusionModel

    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
    assert type(model.model) is comfy.model_base.BaseModel
    assert type(model.model).__name__ == "BaseModel"
    assert isinstance(model.model, DiffusionModel)
    assert not isinstance(model.model, comfy.model_base.SDXL)
    # clones share the model object, so the type carries over
    assert type(model.clone().model) is comfy.model_base.BaseModel


def test_loaded_sdxl_model_is_exactly_comfy_sdxl(session, tmp_path):
    import comfy.model_base

    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    model, _, _ = load_checkpoint(write_tiny_checkpoint(tmp_path, "sdxl"), output_clip=False, output_vae=False)
    assert type(model.model) is comfy.model_base.SDXL
    assert isinstance(model.model, comfy.model_base.BaseModel)


def test_without_the_resolver_models_are_diffusion_models_and_foreign_classes_are_refused(tiny_sd1_ckpt):
    import pytest

    from comfy_core import extension_points
    from comfy_core.extension_points import ExtensionPoints
    from comfy_core.loading import load_checkpoint
    from comfy_core.models.diffusion import DiffusionModel

    with extension_points.use(ExtensionPoints()):
        model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
        assert type(model.model) is DiffusionModel
    with extension_points.use(ExtensionPoints(model_class=lambda name: int)):
        with pytest.raises(TypeError, match="not a DiffusionModel subclass"):
            load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)


def test_compat_install_sets_the_resolver(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    session = compat.install(env, Registry())
    import comfy.model_base

    assert session.extension_points.model_class("sdxl") is comfy.model_base.SDXL
    assert session.extension_points.model_class("sd2") is comfy.model_base.BaseModel
