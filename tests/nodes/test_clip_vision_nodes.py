"""CLIPVisionLoader, CLIPVisionEncode, StyleModelLoader, StyleModelApply: ComfyUI's /object_info
entries, loading from the model folders, behaviour against results computed here, typed errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.clip_vision.config import CLIP_MEAN, CLIP_STD
from comfy_core.memory import MemoryManager
from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from nodes import clip_vision as cv_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.clip_vision import write_tiny_clip_vision, write_tiny_style_model
from tests.fixtures.clips import one_thread  # noqa: F401 (autouse fixture)


def _use(environment: Environment):
    return set_current(NodeContext("p", "1", "1", None, environment))


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    models = tmp_path / "models"
    write_tiny_clip_vision(models / "clip_vision" / "vit.safetensors", dtype=torch.float16)
    write_tiny_clip_vision(models / "clip_vision" / "sub" / "siglip.safetensors", "siglip", seed=1)
    write_tiny_style_model(models / "style_models" / "style.safetensors", "t2i", context_dim=24)
    token = _use(environment)
    yield environment
    reset_current(token)


def test_model_folders_have_comfyuis_kinds(tmp_path):
    folders = Environment.rooted_at(tmp_path).folders
    assert folders.paths("clip_vision") == [(tmp_path / "models" / "clip_vision").resolve()]
    assert folders.paths("style_models") == [(tmp_path / "models" / "style_models").resolve()]


def test_combos_list_the_folders(env):
    assert spec_of(cv_nodes.load_clip).input("clip_name").combo_values(env) == ["sub/siglip.safetensors",
                                                                                 "vit.safetensors"]
    assert spec_of(cv_nodes.load_style_model).input("style_model_name").combo_values(env) == ["style.safetensors"]


def test_loader_stores_in_the_text_encoder_dtype_and_encode_crops(env):
    (clip_vision,) = cv_nodes.load_clip("vit.safetensors")
    assert clip_vision.dtype == torch.float16  # ComfyUI's text-encoder dtype on the CPU
    image = torch.rand(1, 40, 30, 3, generator=torch.Generator().manual_seed(0))
    (centre,) = cv_nodes.encode(clip_vision, image, "center")
    (squashed,) = cv_nodes.encode(clip_vision, image, "none")
    assert centre.image_embeds.shape == (1, 16) and centre.last_hidden_state.shape == (1, 5, 32)
    assert not torch.allclose(centre.image_embeds, squashed.image_embeds)
    # "none" is the tower on the whole image squashed to 28 x 28 (computed here).
    pixels = F.interpolate(image.permute(0, 3, 1, 2), size=(28, 28), mode="bicubic", antialias=True)
    pixels = ((pixels * 255).clamp(0, 255).round() / 255 - torch.tensor(CLIP_MEAN)[:, None, None]) \
        / torch.tensor(CLIP_STD)[:, None, None]
    with torch.no_grad():
        expected = clip_vision.model.encode(pixels).image_embeds
    assert torch.allclose(squashed.image_embeds, expected, atol=1e-6)


def test_dtype_policy_and_memory_manager_are_honoured(tmp_path):
    write_tiny_clip_vision(tmp_path / "models" / "clip_vision" / "vit.safetensors")
    memory = MemoryManager("cpu")
    token = _use(Environment.rooted_at(tmp_path, dtype_policy={"text": "fp32"}, memory=memory))
    try:
        (clip_vision,) = cv_nodes.load_clip("vit.safetensors")
    finally:
        reset_current(token)
    assert clip_vision.dtype == torch.float32 and clip_vision.patcher.memory is memory


def test_style_model_apply_appends_the_style_tokens(env):
    (clip_vision,) = cv_nodes.load_clip("vit.safetensors")
    (style_model,) = cv_nodes.load_style_model("style.safetensors")
    (output,) = cv_nodes.encode(clip_vision, torch.rand(2, 28, 28, 3), "center")
    text = torch.randn(1, 6, 24)
    (out,) = cv_nodes.apply_stylemodel([[text, {}]], style_model, output, 1.5, "multiply")
    expected = 1.5 * style_model.get_cond(output).reshape(1, 16, 24)  # 2 images x 8 tokens
    assert out[0][0].shape == (1, 22, 24) and torch.equal(out[0][0][:, :6], text)
    assert torch.allclose(out[0][0][:, 6:], expected)


def test_typed_errors(env):
    (clip_vision,) = cv_nodes.load_clip("vit.safetensors")
    (style_model,) = cv_nodes.load_style_model("style.safetensors")
    (output,) = cv_nodes.encode(clip_vision, torch.rand(1, 28, 28, 3), "center")
    with pytest.raises(NodeInputError, match="clip_name"):
        cv_nodes.load_clip("missing.safetensors")
    with pytest.raises(NodeInputError, match="style_model_name"):
        cv_nodes.load_style_model("vit.safetensors")
    with pytest.raises(NodeInputError, match="'image'"):
        cv_nodes.encode(clip_vision, torch.rand(28, 28, 3), "center")
    with pytest.raises(NodeInputError, match="'clip_vision'"):
        cv_nodes.encode("not a model", torch.rand(1, 28, 28, 3), "center")
    with pytest.raises(NodeInputError, match="'crop'"):
        cv_nodes.encode(clip_vision, torch.rand(1, 28, 28, 3), "left")
    text = [[torch.randn(1, 6, 24), {}]]
    with pytest.raises(NodeInputError, match="'strength'"):
        cv_nodes.apply_stylemodel(text, style_model, output, -1.0, "multiply")
    with pytest.raises(NodeInputError, match="'strength_type'"):
        cv_nodes.apply_stylemodel(text, style_model, output, 1.0, "add")
    with pytest.raises(NodeInputError, match="'clip_vision_output'"):
        cv_nodes.apply_stylemodel(text, style_model, {"image_embeds": 1}, 1.0, "multiply")
    with pytest.raises(NodeInputError, match="context width"):
        cv_nodes.apply_stylemodel([[torch.randn(1, 6, 32), {}]], style_model, output, 1.0, "multiply")
    with pytest.raises(NodeInputError, match="batch size 1"):
        cv_nodes.apply_stylemodel([[torch.randn(2, 6, 24), {}]], style_model, output, 1.0, "multiply")
    (siglip,) = cv_nodes.load_clip("sub/siglip.safetensors")
    (wide,) = cv_nodes.encode(siglip, torch.rand(1, 28, 28, 3), "center")
    wide.last_hidden_state = torch.zeros(1, 4, 16)
    with pytest.raises(NodeInputError, match="clip_vision_output.*32 wide"):
        cv_nodes.apply_stylemodel(text, style_model, wide, 1.0, "multiply")
