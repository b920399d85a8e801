"""RT-DETRv4 (comfy_core/models/rtdetr.py) against transformers' D-FINE (`DFineForObjectDetection`,
an independent implementation of the same inference network): a tiny random D-FINE with an HGNetv2
backbone is converted to ComfyUI's layout (the rename map below; BatchNorm folded into the encoder
and decoder convolutions and each RepVGG block's two branches merged into one 3x3 conv, as ComfyUI's
files store them) and both must give the same class logits and boxes.

ComfyUI's RTv4 runs every MLP head (query position, pre-box, box distributions, location quality)
with SiLU; transformers' D-FINE uses ReLU there, so those heads are switched to SiLU on the
transformers side before comparing (the rest is as transformers builds it)."""
from __future__ import annotations

import dataclasses
import re
import types

import torch
import torch.nn.functional as F

from comfy_core.models.rtdetr import RTv4, make_anchors
from tests.fixtures.template_models_rtdetr import tiny_config

# transformers is a pinned requirement (5.x, which has D-FINE): a missing class is a failure, not a skip.
from transformers import DFineConfig, DFineForObjectDetection, HGNetV2Config  # noqa: E402

SIDE = 64


def _dfine(config) -> "DFineForObjectDetection":
    stages = config.stages
    backbone = HGNetV2Config(
        stem_channels=list(config.stem), stage_in_channels=[s.in_ch for s in stages],
        stage_mid_channels=[s.mid_ch for s in stages], stage_out_channels=[s.out_ch for s in stages],
        hidden_sizes=[s.out_ch for s in stages], stage_num_blocks=[s.blocks for s in stages],
        stage_downsample=[s.downsample for s in stages], stage_light_block=[s.light for s in stages],
        stage_kernel_size=[s.kernel for s in stages], stage_numb_of_layers=[s.layers for s in stages],
        out_features=["stage2", "stage3", "stage4"], use_learnable_affine_block=False)
    dfine = DFineConfig(
        backbone_config=backbone, encoder_in_channels=config.backbone_channels, encoder_hidden_dim=config.enc_hidden,
        encoder_ffn_dim=config.enc_ff, d_model=config.dec_hidden, decoder_ffn_dim=config.dec_ff,
        decoder_in_channels=[config.enc_hidden] * 3, decoder_layers=config.dec_layers, num_queries=config.num_queries,
        max_num_bins=config.reg_max, reg_scale=config.reg_scale, num_labels=config.num_classes,
        hidden_expansion=config.csp_hidden / (config.enc_hidden // 2), depth_mult=config.csp_blocks / 3,
        anchor_image_size=[SIDE, SIDE], decoder_n_points=list(config.num_points))
    torch.manual_seed(11)
    model = DFineForObjectDetection(dfine).eval()
    g = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():  # random weights everywhere, plausible BatchNorm statistics
            if name.endswith("running_var"):
                tensor.copy_(torch.rand(tensor.shape, generator=g) + 0.5)
            elif name.endswith(("running_mean", ".bias")):
                tensor.copy_(torch.randn(tensor.shape, generator=g) * 0.1)
            elif tensor.is_floating_point() and not name.endswith(("reg_scale", ".up", "num_points_scale")):
                fan_in = tensor[0].numel() if tensor.ndim > 1 else 1
                tensor.copy_(torch.randn(tensor.shape, generator=g) / fan_in ** 0.5 if tensor.ndim > 1
                             else 1 + 0.1 * torch.randn(tensor.shape, generator=g))
    _silu_heads(model)
    return model


def _silu_forward(self, x):
    for i, layer in enumerate(self.layers):
        x = F.silu(layer(x)) if i < len(self.layers) - 1 else layer(x)
    return x


def _silu_heads(model) -> None:
    inner = model.model
    heads = [inner.enc_bbox_head, inner.decoder.query_pos_head, inner.decoder.pre_bbox_head,
             *inner.decoder.bbox_embed, *(lqe.reg_conf for lqe in inner.decoder.lqe_layers)]
    for head in heads:
        head.forward = types.MethodType(_silu_forward, head)


def _fold(state: dict, conv: str, norm: str, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """conv (no bias) then BatchNorm -> one conv with bias."""
    scale = state[norm + ".weight"] / torch.sqrt(state[norm + ".running_var"] + eps)
    weight = state[conv + ".weight"] * scale[:, None, None, None]
    return weight, state[norm + ".bias"] - state[norm + ".running_mean"] * scale


def _to_comfyui(model, config) -> dict[str, torch.Tensor]:
    src = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out: dict[str, torch.Tensor] = {}

    def folded(dst: str, conv: str, norm: str) -> None:
        out[dst + ".weight"], out[dst + ".bias"] = _fold(src, conv, norm)

    for k, v in src.items():  # the backbone: BatchNorm kept
        if k.startswith("model.backbone.model."):
            name = k.replace("model.backbone.model.embedder.", "backbone.stem.")
            name = name.replace("model.backbone.model.encoder.", "backbone.")
            out[name.replace(".convolution.", ".conv.").replace(".normalization.", ".bn.")] = v
    for k in list(out):
        if k.endswith(".bn.running_var"):
            out[k.replace("running_var", "num_batches_tracked")] = torch.tensor(0)
    for i in range(3):
        folded(f"encoder.input_proj.{i}.conv", f"model.encoder_input_proj.{i}.0", f"model.encoder_input_proj.{i}.1")
        folded(f"decoder.input_proj.{i}.conv", f"model.decoder_input_proj.{i}.0", f"model.decoder_input_proj.{i}.1")
    layer_names = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
                   "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
                   "self_attn_layer_norm": "norm1", "mlp.layers.0": "linear1", "mlp.layers.1": "linear2"}
    for k, v in src.items():
        m = re.match(r"model\.encoder\.aifi\.(\d+)\.layers\.(\d+)\.(.+)\.(weight|bias)$", k)
        if m:
            part = {**layer_names, "final_layer_norm": "norm2"}[m[3]]
            out[f"encoder.encoder.{m[1]}.layers.{m[2]}.{part}.{m[4]}"] = v
        m = re.match(r"model\.decoder\.layers\.(\d+)\.(.+)\.(weight|bias)$", k)
        if m:
            part = {**layer_names, "final_layer_norm": "norm3"}.get(m[2], m[2].replace("encoder_attn", "cross_attn"))
            out[f"decoder.decoder.layers.{m[1]}.{part}.{m[3]}"] = v
        m = re.match(r"model\.decoder\.lqe_layers\.(.+)$", k)
        if m:
            out[f"decoder.decoder.lqe_layers.{m[1]}"] = v
        for theirs, ours in (("model.enc_output.0.", "decoder.enc_output.proj."),
                             ("model.enc_output.1.", "decoder.enc_output.norm."),
                             ("model.enc_score_head.", "decoder.enc_score_head."),
                             ("model.enc_bbox_head.", "decoder.enc_bbox_head."),
                             ("model.decoder.query_pos_head.", "decoder.query_pos_head."),
                             ("model.decoder.pre_bbox_head.", "decoder.pre_bbox_head."),
                             ("model.decoder.class_embed.", "decoder.dec_score_head."),
                             ("model.decoder.bbox_embed.", "decoder.dec_bbox_head.")):
            if k.startswith(theirs):
                out[ours + k[len(theirs):]] = v
    for name in ("up", "reg_scale"):
        out[f"decoder.{name}"] = out[f"decoder.decoder.{name}"] = src[f"model.decoder.{name}"]
    for block in ("fpn_blocks", "pan_blocks"):
        for i in range(2):
            t, o = f"model.encoder.{block}.{i}.", f"encoder.{block}.{i}."
            for theirs, ours in (("conv1", "cv1"), ("conv2", "cv2.1"), ("conv3", "cv3.1"), ("conv4", "cv4")):
                folded(o + ours + ".conv", t + theirs + ".conv", t + theirs + ".norm")
            for theirs, ours in (("csp_rep1", "cv2.0"), ("csp_rep2", "cv3.0")):
                for conv in ("conv1", "conv2"):
                    folded(f"{o}{ours}.{conv}.conv", f"{t}{theirs}.{conv}.conv", f"{t}{theirs}.{conv}.norm")
                for b in range(config.csp_blocks):
                    rep = f"{t}{theirs}.bottlenecks.{b}."
                    w3, b3 = _fold(src, rep + "conv1.conv", rep + "conv1.norm")
                    w1, b1 = _fold(src, rep + "conv2.conv", rep + "conv2.norm")
                    out[f"{o}{ours}.bottlenecks.{b}.conv.weight"] = w3 + F.pad(w1, (1, 1, 1, 1))  # RepVGG merge
                    out[f"{o}{ours}.bottlenecks.{b}.conv.bias"] = b3 + b1
    for i in range(2):
        folded(f"encoder.lateral_convs.{i}.conv", f"model.encoder.lateral_convs.{i}.conv",
               f"model.encoder.lateral_convs.{i}.norm")
        for theirs, ours in (("conv1", "cv1"), ("conv2", "cv2")):
            folded(f"encoder.downsample_convs.{i}.0.{ours}.conv", f"model.encoder.downsample_convs.{i}.{theirs}.conv",
                   f"model.encoder.downsample_convs.{i}.{theirs}.norm")
    return out


def test_matches_transformers_dfine():
    config = dataclasses.replace(tiny_config(), spatial_size=SIDE, num_queries=20, dec_layers=3)
    reference = _dfine(config)
    state = _to_comfyui(reference, config)
    ours = RTv4(config).eval()
    own = ours.state_dict()
    # what ComfyUI's files hold besides the weights: anchors, the bins' values, the points' scales (ours)
    for name in own:
        if name not in state:
            assert name.endswith(("anchors", "valid_mask", "project", "num_points_scale")), name
            state[name] = own[name]
    ours.load_state_dict(state)
    anchors, _ = make_anchors(SIDE, config.feat_strides)
    assert torch.isfinite(anchors).all()  # no invalid anchor: transformers' stand-in for +inf never used
    x = torch.rand(2, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        want = reference(pixel_values=x)
        got = ours.raw(x)
    assert got["pred_logits"].shape == want.logits.shape == (2, 20, 80)
    assert torch.allclose(got["pred_logits"], want.logits, atol=1e-4, rtol=1e-4)
    assert torch.allclose(got["pred_boxes"], want.pred_boxes, atol=1e-4, rtol=1e-4)
