"""Depth Anything 3 nodes (nodes/da3_nodes.py): loading from the geometry_estimation folder in a
chosen dtype, DA3_GEOMETRY as ComfyUI's dict, the multi-view mode refused for a Mono model, and
DA3Render's outputs against their equations."""
from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest
import torch

from comfy_core.models import da3_infer
from graph.context import NodeContext, reset_current, set_current
from nodes.da3_nodes import _model_files, da3_inference, da3_render, load_da3_model
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.moge_nodes import turbo
from tests.fixtures.template_models_da3 import WRITERS_DA3

NAME = "depth_anything_3_mono_large.safetensors"


@contextmanager
def running(class_type: str, env: Environment):
    token = set_current(NodeContext(str(uuid.uuid4()), "1", "1", None, env, class_type=class_type))
    try:
        yield
    finally:
        reset_current(token)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("da3")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "geometry_estimation"
    folder.mkdir(parents=True, exist_ok=True)
    WRITERS_DA3["da3_mono"](folder / NAME)
    (folder / "not_da3.safetensors").write_bytes(b"")
    return environment


def _load(env, name=NAME, dtype="default"):
    with running("LoadDA3Model", env):
        return load_da3_model(name, dtype)[0]


def test_loader_lists_the_folder_and_loads_in_the_chosen_dtype(env):
    assert NAME in _model_files(env)
    model = _load(env)
    assert model.dtype == torch.float32 and model.has_sky and not model.has_confidence
    assert _load(env, dtype="bf16").dtype == torch.bfloat16
    with pytest.raises(NodeInputError, match="geometry_estimation"):
        _load(env, "missing.safetensors")
    with pytest.raises(NodeInputError, match="Depth Anything 3"):
        _load(env, "not_da3.safetensors")


def test_inference_gives_comfyuis_geometry_dict(env):
    model = _load(env)
    image = torch.rand(2, 30, 44, 4, generator=torch.Generator().manual_seed(0))  # RGBA: alpha dropped
    with running("DA3Inference", env):
        (geometry,) = da3_inference(model, image, 140, "upper_bound_resize", {"mode": "mono"})
    assert set(geometry) == {"depth", "image", "mode", "sky"}
    assert geometry["mode"] == "mono"
    assert geometry["depth"].shape == (2, 30, 44) and geometry["sky"].shape == (2, 30, 44)
    torch.testing.assert_close(geometry["image"], image[..., :3])
    # each image alone, at 98 x 140 (the longest side 140), resized back bilinearly
    x = da3_infer.preprocess(image[1:2, ..., :3], 140)
    assert x.shape == (1, 3, 98, 140)
    with torch.no_grad():
        raw = model.model(x)["depth"]
    want = torch.nn.functional.interpolate(raw[:, None], size=(30, 44), mode="bilinear", align_corners=False)[:, 0]
    torch.testing.assert_close(geometry["depth"][1:2], want)


def test_multiview_is_refused_for_a_mono_model(env):
    model = _load(env)
    image = torch.rand(2, 28, 28, 3)
    with running("DA3Inference", env), pytest.raises(NodeInputError, match="Small / Base"):
        da3_inference(model, image, 140, "upper_bound_resize",
                      {"mode": "multiview", "ref_view_strategy": "first", "pose_method": "cam_dec"})
    with pytest.raises(NodeInputError, match="DA3_MODEL"):
        da3_inference("model", image, 140, "upper_bound_resize", {"mode": "mono"})


def _geometry():
    gen = torch.Generator().manual_seed(1)
    depth = torch.rand(2, 16, 20, generator=gen) + 0.5
    sky = torch.zeros(2, 16, 20)
    sky[:, :4] = 0.8
    return {"depth": depth, "image": torch.rand(2, 16, 20, 3, generator=gen), "mode": "mono", "sky": sky}


def test_render_depth_modes_against_their_equations():
    g = _geometry()
    (grey,) = da3_render(g, {"output": "depth", "normalization": "v2_style", "apply_sky_clip": False})
    want = torch.stack([da3_infer.normalize_v2_style(g["depth"][i], g["sky"][i]) for i in range(2)])
    assert grey.shape == (2, 16, 20, 3)
    torch.testing.assert_close(grey, want[..., None].expand(2, 16, 20, 3))
    assert bool((grey[:, :4] == 0).all())  # sky black

    (colored,) = da3_render(g, {"output": "depth_colored", "normalization": "min_max", "apply_sky_clip": True})
    clipped = torch.stack([da3_infer.sky_aware_clip(g["depth"][i], g["sky"][i]) for i in range(2)])
    torch.testing.assert_close(colored, turbo(da3_infer.normalize_min_max(clipped)))

    (raw,) = da3_render(g, {"output": "depth", "normalization": "raw", "apply_sky_clip": False})
    torch.testing.assert_close(raw[..., 0], g["depth"])  # no scaling, no clamp

    no_sky = {k: v for k, v in g.items() if k != "sky"}
    with pytest.raises(NodeInputError, match="sky"):
        da3_render(no_sky, {"output": "depth", "normalization": "v2_style", "apply_sky_clip": True})


def test_render_sky_and_confidence():
    g = _geometry()
    (sky,) = da3_render(g, {"output": "sky_mask", "colored": False})
    torch.testing.assert_close(sky, g["sky"][..., None].expand(2, 16, 20, 3))
    (sky_c,) = da3_render(g, {"output": "sky_mask", "colored": True})
    torch.testing.assert_close(sky_c, turbo(g["sky"]))
    with pytest.raises(NodeInputError, match="confidence"):
        da3_render(g, {"output": "confidence", "colored": False})
    g["confidence"] = g["depth"] * 3
    (conf,) = da3_render(g, {"output": "confidence", "colored": True})
    torch.testing.assert_close(conf, turbo(da3_infer.normalize_confidence(g["confidence"])))
    with pytest.raises(NodeInputError, match="DA3_GEOMETRY"):
        da3_render({"image": 1}, {"output": "depth"})
