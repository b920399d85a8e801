"""MMDiT structure detection from safetensors headers (names and shapes only) and typed errors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.checkpoint.header import read_safetensors_header
from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig, MMDiTConfigError
from tests.fixtures.mmdit_files import mmdit_shapes, write_tiny_mmdit

EXPECTED = {
    "sd3": dict(qk_norm=None, x_block_self_attn_layers=()),
    "sd35": dict(qk_norm="rms", x_block_self_attn_layers=()),
    "sd35_medium": dict(qk_norm="rms", x_block_self_attn_layers=(0,)),
}


def _garble(path):
    """Overwrite the data section with noise: detection must not read it."""
    header = read_safetensors_header(path)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (header.file_size - header.data_start,), generator=gen, dtype=torch.uint8)
    with open(path, "r+b") as f:
        f.seek(header.data_start)
        f.write(noise.numpy().tobytes())


@pytest.mark.parametrize("variant", sorted(EXPECTED))
@pytest.mark.parametrize("prefix", ["model.diffusion_model.", ""])
def test_detects_each_variant_from_header_only(tmp_path, variant, prefix):
    path = write_tiny_mmdit(tmp_path, variant, prefix=prefix)
    _garble(path)
    config = MMDiTConfig.detect_from_weights(read_safetensors_header(path).tensors, prefix)
    assert config == MMDiTConfig(depth=2, num_blocks=2, in_channels=16, out_channels=16, patch_size=2,
                                 adm_in_channels=64, context_in_features=64, pos_embed_max_size=8,
                                 **EXPECTED[variant])
    assert (config.hidden_size, config.num_heads, config.num_patches) == (128, 2, 64)


def _shapes(variant, **arch):
    return {k: SimpleNamespace(shape=v) for k, v in mmdit_shapes(variant, **arch).items()}


@pytest.mark.parametrize("variant, arch, depth, x_layers", [
    ("sd3", dict(depth=24, table=192), 24, ()),
    ("sd35", dict(depth=38, table=192), 38, ()),
    ("sd35_medium", dict(depth=24, table=384, x_attn_layers=tuple(range(13))), 24, tuple(range(13))),
])
def test_full_size_headers(variant, arch, depth, x_layers):
    config = MMDiTConfig.detect_from_weights(_shapes(variant, context=4096, pooled=2048, **arch), prefix="")
    assert (config.depth, config.num_blocks, config.hidden_size) == (depth, depth, 64 * depth)
    assert config.x_block_self_attn_layers == x_layers and config.mmdit_x == bool(x_layers)
    assert (config.context_in_features, config.adm_in_channels) == (4096, 2048)
    assert config.pos_embed_max_size == arch["table"]


def test_comfy_unet_config_is_comfyuis_detection():
    config = MMDiTConfig.detect_from_weights(_shapes("sd35_medium"), prefix="")
    assert config.comfy_unet_config() == {
        "in_channels": 16, "patch_size": 2, "out_channels": 16, "depth": 2, "input_size": None,
        "adm_in_channels": 64,
        "context_embedder_config": {"target": "torch.nn.Linear", "params": {"in_features": 64, "out_features": 128}},
        "num_patches": 64, "pos_embed_max_size": 8, "qk_norm": "rms", "pos_embed_scaling_factor": None,
        "x_block_self_attn_layers": [0],
    }
    with torch.device("meta"):
        model = MMDiT(**config.model_kwargs())
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == mmdit_shapes("sd35_medium")


def _broken(change):
    shapes = dict(mmdit_shapes("sd35_medium"))
    change(shapes)
    return {k: SimpleNamespace(shape=v) for k, v in shapes.items()}


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("x_embedder.proj.weight"), "x_embedder.proj.weight' is missing"),
    (lambda s: s.update({"x_embedder.proj.weight": (100, 16, 2, 2)}), "not a multiple of 64"),
    (lambda s: s.update({"pos_embed": (1, 60, 128)}), "pos_embed has shape"),
    (lambda s: s.update({"context_embedder.weight": (96, 64)}), "projects to 96"),
    (lambda s: s.update({"joint_blocks.1.context_block.mlp.fc1.weight": (512, 128)}), "must be pre-only"),
    (lambda s: [s.pop(k) for k in list(s) if k.startswith("joint_blocks.0.context_block.mlp.")], "has no MLP"),
    (lambda s: s.update({"joint_blocks.0.x_block.adaLN_modulation.1.weight": (768, 128)}), "expected 9 x 128"),
    (lambda s: [s.update({k.replace("joint_blocks.1.", "joint_blocks.2."): s.pop(k)})
                for k in list(s) if k.startswith("joint_blocks.1.")], r"joint blocks \[1\] are missing"),
])
def test_inconsistent_weights_are_typed_errors(change, message):
    with pytest.raises(MMDiTConfigError, match=message):
        MMDiTConfig.detect_from_weights(_broken(change), prefix="")


def test_not_an_mmdit_is_a_typed_error():
    with pytest.raises(MMDiTConfigError, match="no MMDiT"):
        MMDiTConfig.detect_from_weights({"model.diffusion_model.input_blocks.0.0.weight": SimpleNamespace(shape=(4,))})
    assert issubclass(MMDiTConfigError, ValueError)
