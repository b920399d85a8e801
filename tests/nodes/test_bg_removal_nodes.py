"""Background removal nodes (nodes/bg_removal_nodes.py): loading a BiRefNet from the
background_removal folder (a file of another kind refused), and RemoveBackground's MASK: the
model's `encode_image` at the chosen resolution, one mask per image at the image's size."""
from __future__ import annotations


import pytest
import torch

from comfy_core.models.birefnet.model import BackgroundRemovalModel
from nodes.bg_removal_nodes import _model_files, load_background_removal_model, remove_background
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.nodes.node_context import running_node
from tests.fixtures.template_models_bgremoval import WRITERS_BGREMOVAL, file_kind_bgremoval

NAME = "birefnet.safetensors"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Environment:
    root = tmp_path_factory.mktemp("bgremoval")
    environment = Environment.rooted_at(root / "base")
    environment.ensure_dirs()
    folder = root / "base" / "models" / "background_removal"
    folder.mkdir(parents=True, exist_ok=True)
    assert file_kind_bgremoval("background_removal", NAME) == "birefnet"
    WRITERS_BGREMOVAL["birefnet"](folder / NAME)
    from safetensors.torch import save_file
    save_file({"model.weight": torch.zeros(2)}, str(folder / "other.safetensors"))
    return environment


def _load(env, name=NAME):
    with running_node("LoadBackgroundRemovalModel", env=env):
        return load_background_removal_model(name)[0]


def test_loader_lists_the_folder_and_refuses_other_files(env):
    assert set(_model_files(env)) == {NAME, "other.safetensors"}
    model = _load(env)
    assert isinstance(model, BackgroundRemovalModel) and model.dtype == torch.float32
    with pytest.raises(NodeInputError, match="background_removal"):
        _load(env, "missing.safetensors")
    with pytest.raises(NodeInputError, match="not a background removal model"):
        _load(env, "other.safetensors")


def test_remove_background_gives_one_mask_per_image_at_its_size(env):
    model = _load(env)
    image = torch.rand(2, 36, 50, 4, generator=torch.Generator().manual_seed(0))  # RGBA: alpha ignored
    with running_node("RemoveBackground", env=env):
        (mask,) = remove_background(model, image, 256)
    assert mask.shape == (2, 36, 50) and mask.dtype == torch.float32
    torch.testing.assert_close(mask, model.encode_image(image[..., :3], image_size=256), atol=1e-6, rtol=1e-6)
    assert float(mask.min()) > 0.0 and float(mask.max()) < 1.0


def test_remove_background_refuses_bad_inputs(env):
    model = _load(env)
    image = torch.rand(1, 8, 8, 3)
    with running_node("RemoveBackground", env=env):
        with pytest.raises(NodeInputError, match="bg_removal_model"):
            remove_background("not a model", image, 1024)
        with pytest.raises(NodeInputError, match="resolution"):
            remove_background(model, image, 100)
        with pytest.raises(NodeInputError, match="multiple of 32"):
            remove_background(model, image, 300)
