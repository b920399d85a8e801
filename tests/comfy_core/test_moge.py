"""MoGe (comfy_core/models/dinov2.py, moge.py, moge_geometry.py, moge_infer.py) on tiny random weights:
the DINOv2 tower against transformers' `Dinov2Model`, the v1 / v2 heads and the camera recovery against
their equations written here with torch.nn.functional / numpy / scipy, within 1e-4; loading from a
safetensors file (ComfyUI's names and MoGe's own Meta-style DINOv2 names)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.models.dinov2 import Dinov2Model
from comfy_core.models.moge import MoGeWeightsError, convert_keys, detect_config, network_from_state_dict
from comfy_core.models.moge_geometry import depth_map_to_point_map, recover_focal_shift
from comfy_core.models.moge_infer import MoGeModel, load_moge
from tests.fixtures.template_models_moge import (GRID, HIDDEN, LAYERS, backbone_config, tiny_state_dict, v1_config,
                                                v2_config, v3_config)

TOL = 1e-4


# -- the DINOv2 tower against transformers ----------------------------------------------------------

# ComfyUI's DINOv2 names (transformers 4's) -> transformers 5's, after the prefix (`backbone.` /
# `encoder.backbone.` in MoGe files) is dropped: the attention projections renamed, and the SwiGLU's fused
# `weights_in` ([gate; up], as DINOv2's `w12`) split into `gate_proj` / `up_proj`, `weights_out` -> `down_proj`.
RENAME = {".attention.attention.query.": ".attention.q_proj.", ".attention.attention.key.": ".attention.k_proj.",
          ".attention.attention.value.": ".attention.v_proj.", ".attention.output.dense.": ".attention.o_proj."}


def _renamed(key: str) -> str:
    for ours, theirs in RENAME.items():
        key = key.replace(ours, theirs)
    return key


def _hf_dinov2(state: dict, prefix: str, *, grid: int = GRID, swiglu: bool = False):
    from transformers import Dinov2Config, Dinov2Model as HFDinov2

    config = Dinov2Config(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HIDDEN // 64,
                          image_size=14 * grid, patch_size=14, layer_norm_eps=1e-6, use_swiglu_ffn=swiglu,
                          hidden_act="gelu")
    model = HFDinov2(config).eval()
    ours = {}
    for key, value in state.items():
        if not key.startswith(prefix):
            continue
        key = _renamed(key[len(prefix):])
        if key.endswith(("mlp.weights_in.weight", "mlp.weights_in.bias")):  # fused [gate; up] -> split
            gate, up = value.chunk(2, dim=0)
            ours[key.replace("weights_in", "gate_proj")], ours[key.replace("weights_in", "up_proj")] = gate, up
        else:
            ours[key.replace("mlp.weights_out.", "mlp.down_proj.")] = value
    missing, unexpected = model.load_state_dict(ours, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return model


def _ours(state: dict, prefix: str, config=None) -> Dinov2Model:
    model = Dinov2Model(config or backbone_config())
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model.eval()


def _hf_layers(hf, pixels: torch.Tensor) -> list[torch.Tensor]:
    out = hf(pixel_values=pixels, output_hidden_states=True)
    return [hf.layernorm(h) for h in out.hidden_states[1:]], out.last_hidden_state


@torch.no_grad()
def test_dinov2_tower_matches_transformers_on_the_trained_grid():
    state = tiny_state_dict(v2_config(), seed=11)
    prefix = "encoder.backbone."
    hf, ours = _hf_dinov2(state, prefix), _ours(state, prefix)
    pixels = torch.randn(2, 3, 14 * GRID, 14 * GRID, generator=torch.Generator().manual_seed(0))
    layers, last = _hf_layers(hf, pixels)
    assert torch.allclose(ours(pixels), last, atol=TOL)
    got = ours.intermediate_layers(pixels, [0, 2, -1])
    for (tokens, cls), want in zip(got, [layers[0], layers[2], layers[3]]):
        assert torch.allclose(tokens, want[:, 1:], atol=TOL) and torch.allclose(cls, want[:, 0], atol=TOL)


@torch.no_grad()
def test_dinov2_swiglu_matches_transformers():
    from dataclasses import replace

    config = replace(backbone_config(), swiglu=True)
    model = Dinov2Model(config)
    gen = torch.Generator().manual_seed(5)
    state = {k: 0.2 * torch.randn(v.shape, generator=gen) + (1.0 if "norm" in k and k.endswith("weight") else 0.0)
             for k, v in model.state_dict().items()}
    assert "encoder.layer.0.mlp.weights_in.weight" in state
    hf, ours = _hf_dinov2(state, "", swiglu=True), _ours(state, "", config)
    pixels = torch.randn(1, 3, 14 * GRID, 14 * GRID, generator=gen)
    assert torch.allclose(ours(pixels), _hf_layers(hf, pixels)[1], atol=TOL)


@torch.no_grad()
def test_dinov2_positions_interpolated_as_comfyui():
    """Off the trained 4 x 4 grid, positions are resized bicubic with DINOv2's scale factors
    `(n + 0.1) / M` (transformers resizes to the size instead): the reference is transformers' tower
    holding the positions so resized for a 6 x 6 grid."""
    state = tiny_state_dict(v2_config(), seed=12)
    prefix = "encoder.backbone."
    ours = _ours(state, prefix)
    pos = state[prefix + "embeddings.position_embeddings"]
    grid = pos[:, 1:].reshape(1, GRID, GRID, HIDDEN).permute(0, 3, 1, 2)
    resized = F.interpolate(grid, scale_factor=(6.1 / GRID, 6.1 / GRID), mode="bicubic", align_corners=False)
    assert resized.shape[-2:] == (6, 6)
    state6 = dict(state)
    state6[prefix + "embeddings.position_embeddings"] = torch.cat(
        [pos[:, :1], resized.permute(0, 2, 3, 1).reshape(1, 36, HIDDEN)], dim=1)
    hf = _hf_dinov2(state6, prefix, grid=6)
    pixels = torch.randn(1, 3, 84, 84, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(ours(pixels), _hf_layers(hf, pixels)[1], atol=TOL)
    with pytest.raises(AssertionError):  # transformers' own resize (by size) is another rule
        assert torch.allclose(ours(pixels), _hf_layers(_hf_dinov2(state, prefix), pixels)[1], atol=TOL)


# -- the heads, written here with torch.nn.functional ----------------------------------------------

def _conv(x, sd, key, k=3):
    if k > 1:
        x = F.pad(x, (k // 2,) * 4, mode="replicate")
    return F.conv2d(x, sd[key + ".weight"], sd[key + ".bias"])


def _res_block(x, sd, key, norms=True):
    h = x
    if norms:
        h = F.group_norm(h, 1, sd[f"{key}.layers.0.weight"], sd[f"{key}.layers.0.bias"])
    h = _conv(F.relu(h), sd, f"{key}.layers.2")
    if norms:
        c = h.shape[1]
        h = F.group_norm(h, max(c // 32, 1), sd[f"{key}.layers.3.weight"], sd[f"{key}.layers.3.bias"])
    return x + _conv(F.relu(h), sd, f"{key}.layers.5")


def _uv(b, h, w, aspect):
    """The view plane: u over [-a, a], v over [-b, b] at pixel centres, a = aspect / diag, b = 1 / diag."""
    diag = math.sqrt(1 + aspect ** 2)
    u = (2 * (np.arange(w) + 0.5) / w - 1) * aspect / diag
    v = (2 * (np.arange(h) + 0.5) / h - 1) / diag
    grid = np.stack(np.meshgrid(u, v, indexing="xy"), axis=0).astype(np.float32)
    return torch.from_numpy(grid)[None].expand(b, -1, -1, -1)


def _stack(features, sd, prefix, config):
    outs, x = [], None
    for i in range(len(config.dim_res)):
        f = _conv(features[i], sd, f"{prefix}input_blocks.{i}", 1)
        x = f if x is None else x + f
        for j in range(config.num_res_blocks[i]):
            x = _res_block(x, sd, f"{prefix}res_blocks.{i}.{j}", config.norms)
        outs.append(_conv(x, sd, f"{prefix}output_blocks.{i}", 1) if config.dim_out[i] is not None else x)
        if i < len(config.dim_res) - 1:
            key = f"{prefix}resamplers.{i}"
            if config.transposed[i]:
                x = F.conv_transpose2d(x, sd[key + ".0.weight"], sd[key + ".0.bias"], stride=2)
            else:
                x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = _conv(x, sd, key + ".1")
    return outs


def _imagenet(x):
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    return (x - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)


def _exp_remap(p):  # [B, H, W, 3]
    z = torch.exp(p[..., 2:])
    return torch.cat([p[..., :2] * z, z], dim=-1)


@torch.no_grad()
def test_v2_network_matches_its_equations():
    config = v2_config(normal=True)
    sd = tiny_state_dict(config, seed=21)
    network = network_from_state_dict(sd)
    image = torch.rand(1, 3, 40, 56, generator=torch.Generator().manual_seed(2))
    num_tokens = 30
    got = network(image, num_tokens=num_tokens)

    aspect = 56 / 40
    rows, cols = round((num_tokens / aspect) ** 0.5), round((num_tokens * aspect) ** 0.5)
    x = F.interpolate(image, (rows * 14, cols * 14), mode="bilinear", align_corners=False, antialias=True)
    x = _imagenet(x)
    # 5 x 6 tokens: off the trained grid, where transformers resizes the positions by another rule, so the
    # tower's features come from ours (checked against transformers above)
    tower = network.encoder.backbone
    chosen = tower.intermediate_layers(x, list(config.intermediate_layers))
    features = sum(_conv(t.permute(0, 2, 1).reshape(1, HIDDEN, rows, cols), sd, f"encoder.output_projections.{i}", 1)
                   for i, (t, _c) in enumerate(chosen))
    levels = [_uv(1, rows * 2 ** i, cols * 2 ** i, aspect) for i in range(5)]
    levels[0] = torch.cat([features, levels[0]], dim=1)
    neck = _stack(levels, sd, "neck.", config.neck)

    def resize(t):
        return F.interpolate(t, (40, 56), mode="bilinear", align_corners=False)

    points = _exp_remap(resize(_stack(neck, sd, "points_head.", config.points_head)[-1]).permute(0, 2, 3, 1))
    mask = torch.sigmoid(resize(_stack(neck, sd, "mask_head.", config.mask_head)[-1])[:, 0])
    normal = F.normalize(resize(_stack(neck, sd, "normal_head.", config.normal_head)[-1]).permute(0, 2, 3, 1), dim=-1)
    cls = chosen[-1][1]
    hidden = F.relu(F.linear(cls, sd["scale_head.0.weight"], sd["scale_head.0.bias"]))
    scale = torch.exp(F.linear(hidden, sd["scale_head.2.weight"], sd["scale_head.2.bias"])[:, 0])
    assert torch.allclose(got["points"], points, atol=TOL, rtol=TOL)
    assert torch.allclose(got["mask"], mask, atol=TOL)
    assert torch.allclose(got["normal"], normal, atol=TOL)
    assert torch.allclose(got["metric_scale"], scale, atol=TOL, rtol=TOL)


@torch.no_grad()
def test_v1_network_matches_its_equations():
    config = v1_config()
    sd = tiny_state_dict(config, seed=31)
    network = network_from_state_dict(sd)
    image = torch.rand(1, 3, 36, 50, generator=torch.Generator().manual_seed(3))
    num_tokens = 16
    got = network(image, num_tokens=num_tokens)

    resize = ((num_tokens * 196) / (36 * 50)) ** 0.5
    rh, rw = int(36 * resize), int(50 * resize)
    x = F.interpolate(image, (rh, rw), mode="bicubic", align_corners=False, antialias=True)
    x = _imagenet(x)
    x14 = F.interpolate(x, (rh // 14 * 14, rw // 14 * 14), mode="bilinear", align_corners=False, antialias=True)
    ph, pw = rh // 14, rw // 14
    chosen = network.backbone.intermediate_layers(x14, [0, 1, 2, 3])
    h = sum(_conv(t.permute(0, 2, 1).reshape(1, HIDDEN, ph, pw), sd, f"head.projects.{i}", 1)
            for i, (t, _c) in enumerate(chosen))
    aspect = rw / rh
    for i in range(len(config.dim_upsample)):
        h = torch.cat([h, _uv(1, h.shape[-2], h.shape[-1], aspect)], dim=1)
        key = f"head.upsample_blocks.{i}"
        h = F.conv_transpose2d(h, sd[f"{key}.0.0.weight"], sd[f"{key}.0.0.bias"], stride=2)
        h = _conv(h, sd, f"{key}.0.1")
        h = _res_block(h, sd, f"{key}.1")
    h = F.interpolate(h, (rh, rw), mode="bilinear", align_corners=False)
    h = torch.cat([h, _uv(1, rh, rw, aspect)], dim=1)
    outs = [_conv(F.relu(_conv(h, sd, f"head.output_block.{j}.0")), sd, f"head.output_block.{j}.2", 1) for j in (0, 1)]
    points = _exp_remap(F.interpolate(outs[0], (36, 50), mode="bilinear", align_corners=False).permute(0, 2, 3, 1))
    mask = F.interpolate(outs[1], (36, 50), mode="bilinear", align_corners=False)[:, 0]
    assert torch.allclose(got["points"], points, atol=TOL, rtol=TOL)
    assert torch.allclose(got["mask"], mask, atol=TOL)


# -- camera recovery -------------------------------------------------------------------------------

def _view_plane(h, w):
    return _uv(1, h, w, w / h)[0].permute(1, 2, 0).numpy()  # [H, W, 2]


def _reference_focal_shift(uv: np.ndarray, xyz: np.ndarray) -> tuple[float, float]:
    """min over shift of |f(s) xy / (z + s) - uv|^2 with the best f in closed form, by a bounded scalar
    search (not least squares): the reference optimum."""
    from scipy.optimize import minimize_scalar

    uv, xy, z = uv.reshape(-1, 2).astype(np.float64), xyz[..., :2].reshape(-1, 2).astype(np.float64), \
        xyz[..., 2].reshape(-1).astype(np.float64)

    def cost(s):
        p = xy / (z + s)[:, None]
        f = (p * uv).sum() / (p * p).sum()
        return ((f * p - uv) ** 2).sum()

    s = minimize_scalar(cost, bounds=(-z.min() + 1e-3, 10.0), method="bounded", options={"xatol": 1e-10}).x
    p = xy / (z + s)[:, None]
    return float((p * uv).sum() / (p * p).sum()), float(s)


def test_focal_and_shift_are_recovered():
    """A point map made from a known camera (focal 1.3 of the half diagonal) with its depth shifted by
    -0.7: the solver finds the focal and the shift back, and agrees with the reference optimum."""
    h, w, focal, shift = 64, 64, 1.3, 0.7
    rng = np.random.default_rng(0)
    z = 2.0 + rng.random((h, w)).astype(np.float32)
    uv = _view_plane(h, w)
    xy = uv * z[..., None] / focal
    points = np.concatenate([xy, (z - shift)[..., None]], axis=-1).astype(np.float32)
    got_focal, got_shift = recover_focal_shift(torch.from_numpy(points)[None])
    assert abs(float(got_focal[0]) - focal) < 1e-3 and abs(float(got_shift[0]) - shift) < 1e-3
    ref_focal, ref_shift = _reference_focal_shift(uv, points)
    assert abs(float(got_focal[0]) - ref_focal) < TOL and abs(float(got_shift[0]) - ref_shift) < TOL
    # the focal given: the shift alone
    _, only_shift = recover_focal_shift(torch.from_numpy(points)[None], focal=torch.tensor([focal]))
    assert abs(float(only_shift[0]) - shift) < 1e-3


def test_focal_and_shift_on_noisy_points_match_the_reference_optimum():
    h, w = 64, 64
    rng = np.random.default_rng(1)
    z = 1.0 + rng.random((h, w)).astype(np.float32)
    uv = _view_plane(h, w)
    points = np.concatenate([uv * z[..., None] / 0.9 + 0.01 * rng.standard_normal((h, w, 2)), (z + 0.4)[..., None]],
                            axis=-1).astype(np.float32)
    mask = rng.random((h, w)) > 0.3
    got_focal, got_shift = recover_focal_shift(torch.from_numpy(points)[None], torch.from_numpy(mask)[None])
    ref_focal, ref_shift = _reference_focal_shift(uv[mask], points[mask])
    assert abs(float(got_focal[0]) - ref_focal) < 1e-3 and abs(float(got_shift[0]) - ref_shift) < 1e-3


def test_depth_unprojects_through_normalised_intrinsics():
    depth = torch.rand(2, 5, 7) + 1
    k = torch.tensor([[0.8, 0, 0.5], [0, 1.1, 0.5], [0, 0, 1.0]]).expand(2, 3, 3)
    points = depth_map_to_point_map(depth, k)
    u = (torch.arange(7) + 0.5) / 7
    v = (torch.arange(5) + 0.5) / 5
    assert torch.allclose(points[..., 0], (u[None, None, :] - 0.5) / 0.8 * depth)
    assert torch.allclose(points[..., 1], (v[None, :, None] - 0.5) / 1.1 * depth)
    assert torch.equal(points[..., 2], depth)


# -- infer -----------------------------------------------------------------------------------------

@torch.no_grad()
def test_infer_post_processing_follows_its_equations():
    """fov_x given: focal = aspect / diag / tan(fov / 2), the shift solved for it, intrinsics
    (f diag / 2 / aspect, f diag / 2, 0.5, 0.5), points re-made from the depth, the metric scale
    applied, inf outside the mask (which v2 also clears where the depth is not positive)."""
    sd = tiny_state_dict(v2_config(normal=True), seed=41)
    model = MoGeModel(network_from_state_dict(sd))
    image = torch.rand(1, 3, 30, 40, generator=torch.Generator().manual_seed(4))
    raw = model.forward(image, num_tokens=model.num_tokens(0))
    assert model.num_tokens(0) == 1200 and model.num_tokens(9) == 3600 and model.num_tokens(5) == 2533
    out = model.infer(image, resolution_level=0, fov_x=70.0)
    aspect, diag = 40 / 30, math.sqrt(1 + (40 / 30) ** 2)
    focal = aspect / diag / math.tan(math.radians(35.0))
    mask = raw["mask"] > 0.5
    _, shift = recover_focal_shift(raw["points"], mask, focal=torch.tensor([focal]))
    fy = focal / 2 * diag
    assert torch.allclose(out["intrinsics"][0], torch.tensor([[fy / aspect, 0, 0.5], [0, fy, 0.5], [0, 0, 1.0]]),
                          atol=1e-6)
    depth = raw["points"][..., 2] + shift
    mask = mask & (depth > 0)
    assert torch.equal(out["mask"], mask)
    scale = raw["metric_scale"][0]
    want_depth = torch.where(mask, depth * scale, torch.full_like(depth, float("inf")))
    assert torch.allclose(out["depth"], want_depth, rtol=1e-5)
    u = (torch.arange(40) + 0.5) / 40
    x = (u - 0.5) / (fy / aspect) * depth * scale
    assert torch.allclose(out["points"][..., 0][mask], x.expand_as(depth)[mask], rtol=1e-4, atol=1e-6)
    assert torch.equal(out["normal"][~mask], torch.zeros_like(out["normal"][~mask]))
    raw_only = model.infer(image, resolution_level=0, fov_x=70.0, force_projection=False, apply_mask=False,
                           apply_metric_scale=False)
    assert torch.allclose(raw_only["points"][..., :2], raw["points"][..., :2])


@torch.no_grad()
def test_infer_recovers_the_focal_and_falls_back_to_60_degrees():
    sd = tiny_state_dict(v1_config(), seed=42)
    model = MoGeModel(network_from_state_dict(sd))
    image = torch.rand(2, 3, 28, 28, generator=torch.Generator().manual_seed(5))
    out = model.infer(image, resolution_level=0)
    raw = model.forward(image, model.num_tokens(0))
    focal, _ = recover_focal_shift(raw["points"], raw["mask"] > 0.5)
    diag = math.sqrt(2)
    fallback = 1 / diag / math.tan(math.radians(30))
    want = torch.where(torch.isfinite(focal) & (focal > 0), focal, torch.tensor(fallback))
    assert torch.allclose(out["intrinsics"][:, 1, 1], want / 2 * diag, rtol=1e-5)
    assert model.version == "v1" and "normal" not in out


# -- loading ---------------------------------------------------------------------------------------

def _meta_style(state: dict, prefix: str) -> dict:
    """ComfyUI's DINOv2 names back to MoGe's own (Meta's) names, q / k / v fused."""
    out = {}
    top = {"embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
           "embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias", "embeddings.cls_token": "cls_token",
           "embeddings.position_embeddings": "pos_embed", "embeddings.mask_token": "mask_token",
           "layernorm.weight": "norm.weight", "layernorm.bias": "norm.bias"}
    for key, value in state.items():
        rel = key[len(prefix):] if key.startswith(prefix) else None
        if rel is None:
            out[key] = value
        elif rel in top:
            out[prefix + top[rel]] = value
        elif ".attention.attention." in rel:
            index, rest = rel.split(".")[2], rel.split(".attention.attention.")[1]
            name, tail = rest.split(".")
            if name == "query":
                parts = [state[f"{prefix}encoder.layer.{index}.attention.attention.{n}.{tail}"]
                         for n in ("query", "key", "value")]
                out[f"{prefix}blocks.{index}.attn.qkv.{tail}"] = torch.cat(parts, dim=0)
        else:
            index, sub = rel.split(".", 3)[2], rel.split(".", 3)[3]
            for ours, meta in (("layer_scale1.lambda1", "ls1.gamma"), ("layer_scale2.lambda1", "ls2.gamma"),
                               ("attention.output.dense.", "attn.proj.")):
                sub = sub.replace(ours, meta)
            out[f"{prefix}blocks.{index}.{sub}"] = value
    return out


@torch.no_grad()
def test_meta_style_files_convert_to_the_same_network():
    sd = tiny_state_dict(v2_config(normal=False), seed=51)
    meta = _meta_style(sd, "encoder.backbone.")
    assert "encoder.backbone.blocks.0.attn.qkv.weight" in meta
    converted = convert_keys({"model": meta, "model_config": {}})
    assert set(converted) == set(sd)
    assert all(torch.equal(converted[k], sd[k]) for k in sd)
    config = detect_config(converted)
    assert config.version == "v2" and config.normal_head is None and config.intermediate_layers == (0, 1, 2, 3)


def test_load_from_safetensors(tmp_path):
    from safetensors.torch import save_file

    from tests.fixtures.template_models_moge import WRITERS_MOGE

    for kind, version, normal in (("moge_v1", "v1", False), ("moge_v2", "v2", True)):
        path = tmp_path / f"{kind}.safetensors"
        WRITERS_MOGE[kind](path)
        model = load_moge(path)
        assert model.version == version and model.num_tokens_range == {"v1": (1200, 2500), "v2": (1200, 3600)}[version]
        assert (getattr(model.model, "normal_head", None) is not None) == normal
        assert next(model.model.parameters()).dtype == torch.float32
        out = model.infer(torch.rand(1, 3, 28, 42), resolution_level=0)
        assert out["points"].shape == (1, 28, 42, 3) and out["mask"].any()
    WRITERS_MOGE["moge_v3"](tmp_path / "v3.safetensors")
    v3 = load_moge(tmp_path / "v3.safetensors")
    assert v3.version == "v3" and v3.model.config.backbone.swiglu and v3.model.config.refiner.channels == (8,) * 5
    sd = tiny_state_dict(v2_config(), seed=1)
    del sd["neck.res_blocks.0.0.layers.2.weight"]
    save_file(sd, str(tmp_path / "broken.safetensors"))
    with pytest.raises(MoGeWeightsError, match="broken.safetensors"):
        load_moge(tmp_path / "broken.safetensors")
    save_file({"a": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(MoGeWeightsError, match="not a MoGe model"):
        load_moge(tmp_path / "other.safetensors")


def test_the_network_moves_once_per_loaded_block_and_back_even_on_error():
    sd = tiny_state_dict(v1_config(), seed=61)
    model = MoGeModel(network_from_state_dict(sd), load_device="cuda", offload_device="cpu")
    moves = []
    model.model.to = lambda device: moves.append(str(device))  # records; nothing runs on the device
    with model.loaded():
        with model.loaded():
            pass
        assert moves == ["cuda"]
    assert moves == ["cuda", "cpu"]
    with pytest.raises(RuntimeError, match="boom"):
        with model.loaded():
            raise RuntimeError("boom")
    assert moves == ["cuda", "cpu", "cuda", "cpu"]


# -- MoGe-3's sparse refiner, against dense equivalents ---------------------------------------------

def _sparse_volume(seed: int, n: int = 60, shape=(5, 6, 7), batch: int = 2, channels: int = 4):
    gen = torch.Generator().manual_seed(seed)
    cells = torch.randperm(batch * shape[0] * shape[1] * shape[2], generator=gen)[:n]
    b, rest = cells // (shape[0] * shape[1] * shape[2]), cells % (shape[0] * shape[1] * shape[2])
    coords = torch.stack([b, rest // (shape[1] * shape[2]), rest // shape[2] % shape[1], rest % shape[2]], dim=1)
    return torch.randn(n, channels, generator=gen), coords.to(torch.int32), shape


def test_submanifold_conv_is_a_dense_conv_read_at_the_voxels():
    from comfy_core.models.moge_refiner import SubmanifoldConv3d, neighbour_map

    feats, coords, shape = _sparse_volume(0)
    conv = SubmanifoldConv3d(4, 3)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen))
        conv.bias.copy_(torch.randn(3, generator=gen))
        got = conv(feats, neighbour_map(coords, shape))
    dense = torch.zeros(2, 4, *shape)
    c = coords.long()
    dense[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]] = feats
    # the stored weight [C_out, x, y, z, C_in] as conv3d's [C_out, C_in, x, y, z]: kernel index i is offset i - 1
    out = F.conv3d(dense, conv.weight.detach().permute(0, 4, 1, 2, 3), conv.bias.detach(), padding=1)
    assert torch.allclose(got, out[c[:, 0], :, c[:, 1], c[:, 2], c[:, 3]], atol=TOL)


def test_mean_pooling_groups_by_floor_division():
    from comfy_core.models.moge_refiner import pool_mean

    feats, coords, shape = _sparse_volume(2, n=80)
    pooled, coarse, coarse_shape, index = pool_mean(feats, coords, shape, 2)
    assert coarse_shape == (3, 3, 4)
    groups: dict = {}
    for f, c in zip(feats, coords.tolist()):
        groups.setdefault((c[0], c[1] // 2, c[2] // 2, c[3] // 2), []).append(f)
    assert sorted(map(tuple, coarse.tolist())) == sorted(groups)
    for row, key in zip(pooled, map(tuple, coarse.tolist())):
        assert torch.allclose(row, torch.stack(groups[key]).mean(0), atol=1e-6)
    assert all(tuple(coarse[index[i]].tolist()) == (c[0], c[1] // 2, c[2] // 2, c[3] // 2)
               for i, c in enumerate(coords.tolist()))


@torch.no_grad()
def test_v3_refines_the_log_depth_before_the_heads():
    """MoGe-3 = MoGe-2's outputs with the raw points' log depth replaced, `refine_steps` times, by
    log z + refiner(points, voxels (b, row, col, round(256 log z) - min), encoder features + UV); with
    0 steps it is MoGe-2 on the same weights."""
    from dataclasses import replace

    from comfy_core.models.moge import MoGeV2

    config = v3_config()
    sd = tiny_state_dict(config, seed=71)
    network = network_from_state_dict(sd)
    plain = MoGeV2(replace(config, refiner=None, version="v2"))
    plain.load_state_dict({k: v for k, v in sd.items() if not k.startswith("refiner.")})
    plain.eval()
    image = torch.rand(1, 3, 28, 28, generator=torch.Generator().manual_seed(7))
    unrefined = network(image, num_tokens=16, refine_steps=0)
    assert torch.allclose(unrefined["points"], plain(image, num_tokens=16)["points"], atol=TOL)
    refined = network(image, num_tokens=16, refine_steps=2)
    # the refiner by hand: two passes over the raw points
    rows = cols = 4
    features, _cls = network.encoder(image, rows, cols)
    levels = [torch.cat([features, _uv(1, rows, cols, 1.0)], dim=1)] + [_uv(1, rows * 2 ** i, cols * 2 ** i, 1.0)
                                                                       for i in range(1, 5)]
    coord = network.points_head(network.neck(levels))[-1].permute(0, 2, 3, 1)
    for _ in range(2):
        log_z = coord[..., 2]
        bins = torch.round(log_z * 256).long()
        bins = bins - bins.min()
        r, c = torch.meshgrid(torch.arange(64), torch.arange(64), indexing="ij")
        voxels = torch.stack([torch.zeros_like(r), r, c, bins[0]], dim=-1).reshape(-1, 4).to(torch.int32)
        residual = network.refiner(coord.reshape(-1, 3), voxels, (64, 64, int(bins.max()) + 1), levels[0])
        coord = torch.cat([coord[..., :2], (log_z + residual.reshape(1, 64, 64))[..., None]], dim=-1)
    want = _exp_remap(F.interpolate(coord.permute(0, 3, 1, 2), (28, 28), mode="bilinear",
                                    align_corners=False).permute(0, 2, 3, 1))
    assert torch.allclose(refined["points"], want, atol=TOL, rtol=TOL)
    assert not torch.allclose(refined["points"], unrefined["points"], atol=1e-3)
    assert torch.equal(refined["mask"], unrefined["mask"])
