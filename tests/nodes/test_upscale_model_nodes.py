"""UpscaleModelLoader and ImageUpscaleWithModel (comfy_extras.nodes_upscale_model): ComfyUI's
/object_info entries, loading tiny random ESRGAN / compact weights by name, the upscale equal
to spandrel's model called directly (one tile) or to ComfyUI's tile blending (larger images),
progress, interrupts and typed errors."""
from __future__ import annotations

import pytest
import torch

from graph.context import Interrupted, NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes import upscale_model as nodes_upscale
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.comfy_core.test_upscale_tiling import reference_tiled_scale
from tests.fixtures.upscale_models import compact_state_dict, esrgan_state_dict, write_upscale_model


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    folder = tmp_path / "models" / "upscale_models"
    write_upscale_model(folder / "RealESRGAN_x4plus.pth", {"params_ema": esrgan_state_dict("new", seed=1)})
    write_upscale_model(folder / "4x_old" / "esrgan.pth", esrgan_state_dict("old", seed=2))
    write_upscale_model(folder / "compact_x2.safetensors", compact_state_dict(scale=2, seed=3))
    (folder / "notes.txt").write_text("not a model")
    (folder / "broken.pth").write_bytes(b"\x00not a torch file")
    reports: list[tuple[float, float]] = []
    stop = {"now": False}
    token = set_current(NodeContext("p", "7", "7", None, environment, report=lambda v, m, p: reports.append((v, m)),
                                    is_interrupted=lambda: stop["now"]))
    environment.extra["reports"], environment.extra["stop"] = reports, stop
    yield environment
    reset_current(token)


def test_loader_lists_the_upscale_models_folder(env):
    options = spec_of(nodes_upscale.upscale_model_loader).input("model_name").combo_values(env)
    assert options == ["4x_old/esrgan.pth", "RealESRGAN_x4plus.pth", "broken.pth", "compact_x2.safetensors"]


def test_loader_detects_each_file(env):
    (x4,) = nodes_upscale.upscale_model_loader("RealESRGAN_x4plus.pth")
    (old,) = nodes_upscale.upscale_model_loader("4x_old/esrgan.pth")
    (compact,) = nodes_upscale.upscale_model_loader("compact_x2.safetensors")
    from spandrel import ImageModelDescriptor

    assert all(isinstance(m, ImageModelDescriptor) for m in (x4, old, compact))
    assert (x4.architecture.id, x4.scale, old.scale, compact.architecture.id, compact.scale) == ("ESRGAN", 4, 4,
                                                                                                 "Compact", 2)
    assert not x4.model.training


def test_loader_errors_name_the_input(env):
    with pytest.raises(NodeInputError, match="'model_name' expected a file in the upscale_models folders"):
        nodes_upscale.upscale_model_loader("missing.pth")
    with pytest.raises(NodeInputError, match="'model_name'"):
        nodes_upscale.upscale_model_loader("../escape.pth")
    with pytest.raises(NodeInputError, match="node 7: input 'model_name' expected .*spandrel can load.*broken.pth"):
        nodes_upscale.upscale_model_loader("broken.pth")


def test_upscale_equals_the_model_called_directly(env):
    (model,) = nodes_upscale.upscale_model_loader("4x_old/esrgan.pth")
    image = _rand(2, 24, 40, 3)
    before = image.clone()
    (out,) = nodes_upscale.image_upscale_with_model(model, image)
    assert out.shape == (2, 96, 160, 3) and out.dtype == torch.float32
    for b in range(2):
        direct = model(image[b:b + 1].movedim(-1, 1)).clamp(0, 1).movedim(1, -1)
        assert torch.equal(out[b:b + 1], direct)
    assert torch.equal(image, before)  # input untouched
    assert env.extra["reports"] == [(1, 2), (2, 2)]  # one step per image (one tile each)
    assert model.device.type == "cpu"


def test_a_wide_image_is_tiled_with_comfyuis_blending(env):
    (model,) = nodes_upscale.upscale_model_loader("compact_x2.safetensors")
    image = _rand(1, 16, 600, 3, seed=4)
    (out,) = nodes_upscale.image_upscale_with_model(model, image)
    expected = reference_tiled_scale(image.movedim(-1, 1), model, (512, 512), 32, 2).clamp(0, 1).movedim(1, -1)
    assert torch.equal(out, expected)
    assert env.extra["reports"] == [(1, 2), (2, 2)]  # 600 px wide: tiles at 0 and 480


def test_an_interrupt_stops_between_tiles(env):
    (model,) = nodes_upscale.upscale_model_loader("compact_x2.safetensors")
    env.extra["stop"]["now"] = True
    with pytest.raises(Interrupted):
        nodes_upscale.image_upscale_with_model(model, _rand(1, 8, 1200, 3))
    assert env.extra["reports"] == []  # stopped at the first tile's report
    assert model.device.type == "cpu"


def test_with_a_memory_manager_it_runs_on_the_managers_device(tmp_path):
    from comfy_core.memory import MemoryManager
    from comfy_core.upscale.loading import model_from_state_dict

    environment = Environment.rooted_at(tmp_path, memory=MemoryManager("cpu"))
    model = model_from_state_dict(compact_state_dict(scale=2, seed=3))
    token = set_current(NodeContext("p", "1", "1", None, environment))
    try:
        (out,) = nodes_upscale.image_upscale_with_model(model, _rand(1, 8, 8, 3))
    finally:
        reset_current(token)
    assert out.shape == (1, 16, 16, 3) and model.device.type == "cpu"


def test_bad_inputs_are_typed_errors(env):
    (model,) = nodes_upscale.upscale_model_loader("compact_x2.safetensors")
    with pytest.raises(NodeInputError, match="'image' expected an IMAGE with 3 channels"):
        nodes_upscale.image_upscale_with_model(model, _rand(1, 8, 8, 4))
    with pytest.raises(NodeInputError, match="'image'"):
        nodes_upscale.image_upscale_with_model(model, _rand(8, 8, 3))
    with pytest.raises(NodeInputError, match="'upscale_model' expected an UPSCALE_MODEL"):
        nodes_upscale.image_upscale_with_model(torch.nn.Conv2d(3, 3, 1), _rand(1, 8, 8, 3))


def test_packs_reach_the_tiling_through_comfy_utils(comfy_nodes, env):
    """`comfy.utils.tiled_scale` / `tiled_scale_multidim` / `get_tiled_scale_steps` for packs:
    the same function, reporting through ComfyUI's ProgressBar to the running node."""
    import comfy.utils

    from comfy_core.upscale import tiling

    x = _rand(1, 3, 40, 40, seed=5)

    def double(v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(v, scale_factor=2, mode="bilinear")
    steps = comfy.utils.get_tiled_scale_steps(40, 40, tile_x=16, tile_y=16, overlap=4)
    assert steps == 9
    bar = comfy.utils.ProgressBar(steps)
    out = comfy.utils.tiled_scale(x, double, tile_x=16, tile_y=16, overlap=4, upscale_amount=2, pbar=bar)
    assert torch.equal(out, tiling.tiled_scale(x, double, 16, 16, 4, 2))
    assert env.extra["reports"][-1] == (9, 9) and len(env.extra["reports"]) == 9
    multi = comfy.utils.tiled_scale_multidim(x, double, tile=(16, 16), overlap=4, upscale_amount=2)
    assert torch.equal(multi, out)
