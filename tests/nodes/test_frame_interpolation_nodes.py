"""Frame interpolation nodes (nodes/frame_interpolation_nodes.py): loading FILM and RIFE (raw
RIFE names too) from the frame_interpolation folder, a file of another kind refused, and
FrameInterpolate's frames: `(N - 1) * multiplier + 1`, the inputs kept exactly, one frame
unchanged, bad inputs refused."""
from __future__ import annotations


import pytest
import torch

from comfy_core.models.frame_interp.model import InterpolationModel
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.nodes.node_context import running_node
from nodes.frame_interpolation_nodes import _model_files, frame_interpolate, load_frame_interpolation_model
from tests.fixtures.template_models_bgremoval import WRITERS_BGREMOVAL, file_kind_bgremoval, tiny_rife_state_dict

FILM = "film_net_fp16.safetensors"
RIFE = "rife_v4.26.safetensors"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("frame_interp")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "frame_interpolation"
    folder.mkdir(parents=True, exist_ok=True)
    for name in (FILM, RIFE):
        WRITERS_BGREMOVAL[file_kind_bgremoval("frame_interpolation", name)](folder / name)
    raw = {("module.block" + k[len("blocks."):]) if k.startswith("blocks.") else "module." + k: v
           for k, v in tiny_rife_state_dict(seed=1).items()}
    save_file({k: v.contiguous() for k, v in raw.items()}, str(folder / "rife_raw.pth.safetensors"))
    save_file({"model.weight": torch.zeros(2)}, str(folder / "other.safetensors"))
    return environment


def _load(env, name):
    with running_node("FrameInterpolationModelLoader", env=env):
        return load_frame_interpolation_model(name)[0]


def test_loader_lists_the_folder_tells_film_from_rife_and_refuses_other_files(env):
    assert set(_model_files(env)) == {FILM, RIFE, "rife_raw.pth.safetensors", "other.safetensors"}
    film, rife = _load(env, FILM), _load(env, RIFE)
    assert isinstance(film, InterpolationModel) and film.kind == "film" and film.dtype == torch.float32
    assert rife.kind == "rife" and _load(env, "rife_raw.pth.safetensors").kind == "rife"
    with pytest.raises(NodeInputError, match="frame_interpolation"):
        _load(env, "missing.safetensors")
    with pytest.raises(NodeInputError, match="not a FILM or RIFE"):
        _load(env, "other.safetensors")


@pytest.mark.parametrize("name, multiplier", [(FILM, 2), (RIFE, 4)])
def test_frame_interpolate_counts_and_keeps_the_inputs(env, name, multiplier):
    model = _load(env, name)
    images = torch.rand(3, 64, 80, 3, generator=torch.Generator().manual_seed(0))
    with running_node("FrameInterpolate", env=env):
        (out,) = frame_interpolate(model, images, multiplier)
    assert out.shape == (2 * multiplier + 1, 64, 80, 3) and out.dtype == torch.float32
    for k in range(3):
        assert torch.equal(out[k * multiplier], images[k])
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    torch.testing.assert_close(out, model.interpolate(images, multiplier), atol=0, rtol=0)


def test_frame_interpolate_passes_one_frame_and_refuses_bad_inputs(env):
    model = _load(env, RIFE)
    one = torch.rand(1, 64, 64, 3)
    with running_node("FrameInterpolate", env=env):
        assert frame_interpolate(model, one, 2)[0] is one
        with pytest.raises(NodeInputError, match="interp_model"):
            frame_interpolate("not a model", one, 2)
        with pytest.raises(NodeInputError, match="multiplier"):
            frame_interpolate(model, one, 1)
        with pytest.raises(NodeInputError, match="3 channels"):
            frame_interpolate(model, torch.rand(2, 64, 64, 4), 2)
