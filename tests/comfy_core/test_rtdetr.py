"""RT-DETRv4 (comfy_core/models/rtdetr.py, rtdetr_backbone.py): ComfyUI's key layout and sizes, the configuration read
from a file, loading through UNETLoader's code path, and each block against its equations written
here independently (deformable attention against a per-point bilinear reference, the D-FINE box
distributions, the HGNetv2 stem, the AIFI layer, the anchors, ComfyUI's post-processing)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.models.rtdetr import (MARKER, DetectionModel, MSDeformableAttention, RTDETRConfig, RTv4,
                                      deformable_attention, distance_to_box, integral, is_rtdetr, make_anchors,
                                      weighting_function)
from comfy_core.models.rtdetr_backbone import EncoderLayer, StemBlock, sincos_position
from comfy_core.models.rtdetr_classes import COCO_CLASSES
from tests.fixtures.template_models_rtdetr import tiny_config, tiny_rtdetr_state_dict, write_tiny_rtdetr

ATOL = 1e-4


def test_comfyui_x_model_layout():
    """ComfyUI's X model (HGNetv2-B5, 384-wide encoder, 256-wide 6-layer decoder): its names and
    shapes, 62 M parameters (D-FINE-X's), and the sizes read back from them."""
    state = RTv4(RTDETRConfig()).state_dict()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    expected = {
        MARKER: (384, 768 + 2 * 192, 1, 1),  # cv4 over c3 + 2 c4
        "backbone.stem.stem1.conv.weight": (32, 3, 3, 3),
        "backbone.stem.stem1.bn.running_var": (32,),
        "backbone.stages.0.blocks.0.layers.5.conv.weight": (64, 64, 3, 3),
        "backbone.stages.2.downsample.conv.weight": (512, 1, 3, 3),
        "backbone.stages.2.blocks.4.layers.0.conv2.conv.weight": (256, 1, 5, 5),
        "backbone.stages.3.blocks.1.aggregation.1.conv.weight": (2048, 1024, 1, 1),
        "encoder.input_proj.2.conv.weight": (384, 2048, 1, 1),
        "encoder.encoder.0.layers.0.self_attn.out_proj.weight": (384, 384),
        "encoder.encoder.0.layers.0.linear1.weight": (2048, 384),
        "encoder.fpn_blocks.1.cv2.0.bottlenecks.2.conv.weight": (192, 192, 3, 3),
        "encoder.downsample_convs.0.0.cv2.conv.weight": (384, 1, 3, 3),
        "decoder.input_proj.0.conv.weight": (256, 384, 1, 1),
        "decoder.anchors": (1, 8400, 4),
        "decoder.valid_mask": (1, 8400, 1),
        "decoder.up": (1,), "decoder.reg_scale": (1,), "decoder.decoder.up": (1,), "decoder.decoder.reg_scale": (1,),
        "decoder.decoder.project": (33,),
        "decoder.decoder.layers.5.cross_attn.sampling_offsets.weight": (8 * 12 * 2, 256),
        "decoder.decoder.layers.5.cross_attn.num_points_scale": (12,),
        "decoder.decoder.layers.5.gateway.gate.weight": (512, 512),
        "decoder.decoder.lqe_layers.5.reg_conf.layers.0.weight": (64, 20),
        "decoder.dec_bbox_head.5.layers.2.weight": (132, 256),
        "decoder.dec_score_head.5.weight": (80, 256),
        "decoder.enc_output.proj.weight": (256, 256),
        "decoder.query_pos_head.layers.0.weight": (512, 4),
        "decoder.pre_bbox_head.layers.2.weight": (4, 256),
    }
    assert {k: shapes.get(k) for k in expected} == expected
    assert not [k for k in shapes if "pos_embed" in k]  # ComfyUI's encoder embedding is no tensor of the file
    assert 61_000_000 < sum(math.prod(s) for s in shapes.values()) < 63_000_000
    config = RTDETRConfig.detect_from_weights(shapes)
    assert config == RTDETRConfig()


def test_sizes_read_from_a_tiny_file():
    config = tiny_config()
    state = tiny_rtdetr_state_dict(config=config)
    detected = RTDETRConfig.detect_from_weights({k: v.shape for k, v in state.items()})
    assert detected == config
    small = dataclasses.replace(config, spatial_size=64)  # 84 anchors: at most 84 queries
    detected = RTDETRConfig.detect_from_weights({k: v.shape for k, v in RTv4(small).state_dict().items()})
    assert (detected.spatial_size, detected.num_queries) == (64, 84)


def test_loaded_through_unet_loader(tmp_path):
    """UNETLoader's path (comfy_core.split.load_diffusion_model) gives a MODEL patcher whose
    `model.diffusion_model` is the detector, with the file's weights (float32 on a CPU), and the
    network's detections."""
    from comfy_core.patching.model import ModelPatcher
    from comfy_core.split import load_diffusion_model

    path = tmp_path / "rt_detr_v4-x-hgnet_fp16.safetensors"
    state = write_tiny_rtdetr(path, seed=3)
    with CheckpointFile(path) as file:
        assert is_rtdetr(file)
    model = load_diffusion_model(path)
    assert isinstance(model, ModelPatcher) and isinstance(model.model, DetectionModel)
    network = model.model.diffusion_model
    assert isinstance(network, RTv4) and model.model_dtype() == torch.float32 and not network.training
    loaded = network.state_dict()
    assert set(loaded) == set(state)
    assert all(torch.equal(loaded[k], v.to(loaded[k].dtype)) for k, v in state.items())

    reference = RTv4(tiny_config()).eval()
    reference.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    x = torch.rand(2, 3, 640, 640, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode(), model.applied() as module:
        got = module.diffusion_model(x, (320, 200))
        want = reference(x, (320, 200))
    assert len(got) == 2
    for g, w in zip(got, want):
        assert torch.equal(g["labels"], w["labels"]) and torch.allclose(g["boxes"], w["boxes"])
        assert g["scores"].shape == (300,) and g["boxes"].shape == (300, 4)


def _bilinear_zero_padded(value: torch.Tensor, x: float, y: float) -> torch.Tensor:
    """value `[C, H, W]` at continuous location (x, y) in 0..1, pixel centres at (i + 0.5) / size,
    zero outside: sum over the four neighbours of (1 - |dx|)(1 - |dy|) * value."""
    c, h, w = value.shape
    px, py = x * w - 0.5, y * h - 0.5
    x0, y0 = math.floor(px), math.floor(py)
    out = torch.zeros(c, dtype=value.dtype)
    for xi in (x0, x0 + 1):
        for yi in (y0, y0 + 1):
            if 0 <= xi < w and 0 <= yi < h:
                out += (1 - abs(px - xi)) * (1 - abs(py - yi)) * value[:, yi, xi]
    return out


def test_deformable_attention_matches_a_per_point_reference():
    g = torch.Generator().manual_seed(1)
    b, heads, c, lq, points = 2, 3, 4, 5, (2, 3, 1)
    shapes = [(6, 7), (3, 4), (2, 2)]
    values = [torch.randn(b * heads, c, h, w, generator=g, dtype=torch.float64) for h, w in shapes]
    # locations partly outside 0..1 (zero padding)
    locations = torch.rand(b, lq, heads, sum(points), 2, generator=g, dtype=torch.float64) * 1.4 - 0.2
    weights = torch.softmax(torch.randn(b, lq, heads, sum(points), generator=g, dtype=torch.float64), -1)
    got = deformable_attention(values, locations, weights, points)
    assert got.shape == (b, lq, heads * c)
    level_of = [lvl for lvl, n in enumerate(points) for _ in range(n)]
    for bi in range(b):
        for q in range(lq):
            for hd in range(heads):
                want = sum(weights[bi, q, hd, p] * _bilinear_zero_padded(
                    values[level_of[p]][bi * heads + hd], float(locations[bi, q, hd, p, 0]),
                    float(locations[bi, q, hd, p, 1])) for p in range(sum(points)))
                assert torch.allclose(got[bi, q, hd * c:(hd + 1) * c], want, atol=1e-10)


def test_deformable_cross_attention_offsets():
    """Sampling locations: reference centre + offset * (1 / points of its level) * box size * 0.5;
    the weights a softmax over all points of a head."""
    torch.manual_seed(2)
    attn = MSDeformableAttention(8, 2, (1, 2)).double()
    b, lq = 1, 3
    query = torch.randn(b, lq, 8, dtype=torch.float64)
    ref = torch.rand(b, lq, 1, 4, dtype=torch.float64) * 0.5 + 0.25
    values = [torch.randn(b * 2, 4, 5, 5, dtype=torch.float64), torch.randn(b * 2, 4, 3, 3, dtype=torch.float64)]
    offsets = attn.sampling_offsets(query).reshape(b, lq, 2, 3, 2)
    scale = torch.tensor([1.0, 0.5, 0.5], dtype=torch.float64)[None, None, None, :, None]
    locations = ref[:, :, None, :, :2] + offsets * scale * ref[:, :, None, :, 2:] * 0.5
    weights = torch.softmax(attn.attention_weights(query).reshape(b, lq, 2, 3), -1)
    assert torch.allclose(attn(query, ref, values), deformable_attention(values, locations, weights, (1, 2)))


def test_weighting_function_bins():
    """W(n): 0 in the middle, +-a (a = up * reg_scale = 4) at bins 1 and reg_max - 1, +-2a at the
    ends, symmetric and increasing, consecutive inner ratios (1 + |W|) constant."""
    w = weighting_function(32, torch.tensor([0.5]), torch.tensor([8.0])).double()
    assert w.shape == (33,)
    assert float(w[16]) == 0 and float(w[0]) == -8 and float(w[32]) == 8
    assert abs(float(w[1]) + 4) < 1e-5 and abs(float(w[31]) - 4) < 1e-5
    assert torch.allclose(w, -w.flip(0)) and bool((w[1:] > w[:-1]).all())
    ratios = (1 + w[17:32]) / (1 + w[16:31])
    assert torch.allclose(ratios, torch.full_like(ratios, 5 ** (2 / 30)), atol=1e-6)


def test_integral_and_distance_to_box():
    project = weighting_function(8, torch.tensor([0.5]), torch.tensor([8.0]))
    logits = torch.full((1, 2, 4 * 9), -1e4)
    chosen = [4, 5, 6, 0, 4, 4, 4, 4]
    for i, n in enumerate(chosen):
        logits[0, i // 4, (i % 4) * 9 + n] = 0.0  # one-hot distributions: the expectation is W(n)
    dist = integral(logits, project, 8)
    assert torch.allclose(dist, project[chosen].reshape(1, 2, 4))
    ref = torch.tensor([[[0.5, 0.4, 0.2, 0.1], [0.3, 0.3, 0.4, 0.2]]])
    reg_scale = torch.tensor([8.0])
    out = distance_to_box(ref, dist, reg_scale)
    for q in range(2):
        cx, cy, w, h = ref[0, q].tolist()
        d = dist[0, q].tolist()
        x1, y1 = cx - (4 + d[0]) * w / 8, cy - (4 + d[1]) * h / 8
        x2, y2 = cx + (4 + d[2]) * w / 8, cy + (4 + d[3]) * h / 8
        assert torch.allclose(out[0, q], torch.tensor([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]), atol=1e-6)
    assert torch.allclose(out[0, 1], ref[0, 1])  # zero distances: the reference box itself


def test_stem_matches_its_equations():
    torch.manual_seed(3)
    stem = StemBlock(3, 8, 12).eval()
    for m in stem.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 33, 30)

    def cba(block, t, stride, padding, relu=True):
        t = F.conv2d(t, block.conv.weight, None, stride, padding)
        bn = block.bn
        t = (t - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var[:, None, None] + bn.eps)
        t = t * bn.weight[:, None, None] + bn.bias[:, None, None]
        return t.clamp_min(0) if relu else t

    t = F.pad(cba(stem.stem1, x, 2, 1), (0, 1, 0, 1))
    a = cba(stem.stem2b, F.pad(cba(stem.stem2a, t, 1, 0), (0, 1, 0, 1)), 1, 0)
    pooled = F.max_pool2d(t, 2, 1, ceil_mode=True)
    want = cba(stem.stem4, cba(stem.stem3, torch.cat([pooled, a], 1), 2, 1), 1, 0)
    with torch.no_grad():
        assert torch.allclose(stem(x), want, atol=ATOL)


def test_aifi_layer_matches_its_equations():
    torch.manual_seed(4)
    layer = EncoderLayer(16, 8, 24).eval()
    src, pos = torch.randn(2, 6, 16), sincos_position(3, 2, 16)
    sa = layer.self_attn
    q = (src + pos) @ sa.q_proj.weight.T + sa.q_proj.bias
    k = (src + pos) @ sa.k_proj.weight.T + sa.k_proj.bias
    v = src @ sa.v_proj.weight.T + sa.v_proj.bias
    heads = []
    for h in range(8):
        s = slice(2 * h, 2 * h + 2)
        heads.append(torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(2), -1) @ v[..., s])
    attn = torch.cat(heads, -1) @ sa.out_proj.weight.T + sa.out_proj.bias
    x = F.layer_norm(src + attn, (16,), layer.norm1.weight, layer.norm1.bias)
    ff = F.gelu(x @ layer.linear1.weight.T + layer.linear1.bias) @ layer.linear2.weight.T + layer.linear2.bias
    want = F.layer_norm(x + ff, (16,), layer.norm2.weight, layer.norm2.bias)
    with torch.no_grad():
        assert torch.allclose(layer(src, pos), want, atol=ATOL)


def test_position_embedding_and_anchors():
    pe = sincos_position(4, 3, 8)  # 4 columns, 3 rows: entry i is (x, y) = (i // 3, i % 3)
    assert pe.shape == (1, 12, 8)
    i, x, y = 7, 7 // 3, 7 % 3
    omega = [1.0, 1.0 / 100.0]  # 10000 ** (-j / 2), j = 0, 1
    want = [math.sin(x * o) for o in omega] + [math.cos(x * o) for o in omega] + \
           [math.sin(y * o) for o in omega] + [math.cos(y * o) for o in omega]
    assert torch.allclose(pe[0, i], torch.tensor(want), atol=1e-6)

    anchors, valid = make_anchors(64, (8, 16, 32))
    assert anchors.shape == (1, 84, 4) and valid.shape == (1, 84, 1)
    # level 1 (4 x 4 cells of stride 16), cell (row 1, column 2): centre (2.5 / 4, 1.5 / 4), size 0.1
    box = torch.sigmoid(anchors[0, 64 + 1 * 4 + 2])
    assert torch.allclose(box, torch.tensor([2.5 / 4, 1.5 / 4, 0.1, 0.1]), atol=1e-6)
    assert bool(valid.all())  # no cell centre of a 64-px grid lies within 1% of an edge


def test_postprocess_is_comfyui_topk_over_queries_and_classes():
    network = RTv4(dataclasses.replace(tiny_config(), num_queries=3))
    logits = torch.full((1, 4, 80), -10.0)
    logits[0, 2, 5], logits[0, 0, 0], logits[0, 2, 7] = 3.0, 2.0, 1.0
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.4], [0.1, 0.1, 0.1, 0.1], [0.25, 0.75, 0.5, 0.5], [0, 0, 0, 0]]])
    (out,) = network.postprocess({"pred_logits": logits, "pred_boxes": boxes}, (200, 100))
    assert out["labels"].tolist() == [5, 0, 7]
    assert torch.allclose(out["scores"], torch.sigmoid(torch.tensor([3.0, 2.0, 1.0])))
    assert torch.allclose(out["boxes"][0], torch.tensor([0.0, 50.0, 100.0, 100.0]))  # query 2, x1 y1 x2 y2
    assert torch.allclose(out["boxes"][1], torch.tensor([80.0, 30.0, 120.0, 70.0]))  # query 0
    assert COCO_CLASSES[5] == "bus" and len(COCO_CLASSES) == 80


def test_forward_shapes_and_finite_scores():
    network = RTv4(dataclasses.replace(tiny_config(), spatial_size=64, num_queries=10)).eval()
    with torch.inference_mode():
        raw = network.raw(torch.rand(2, 3, 64, 64))
    assert raw["pred_logits"].shape == (2, 10, 80) and raw["pred_boxes"].shape == (2, 10, 4)
    assert bool(torch.isfinite(raw["pred_logits"]).all()) and bool(((raw["pred_boxes"][..., 2:]) > 0).all())


@pytest.mark.parametrize("missing", ["decoder.anchors", "backbone.stem.stem1.bn.running_mean"])
def test_a_file_missing_tensors_is_refused(missing):
    from comfy_core.models.rtdetr import build_rtdetr

    state = tiny_rtdetr_state_dict()
    state.pop(missing)
    with pytest.raises((KeyError, RuntimeError)):
        build_rtdetr(state)
