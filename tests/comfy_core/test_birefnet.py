"""BiRefNet (comfy_core/models/birefnet/): the Swin backbone against transformers' SwinBackbone
(an independent implementation) on random weights mapped from ComfyUI's key layout, the
modulated deformable convolution against torchvision's, the tile split against a direct loop,
loading ComfyUI's layout (detection, unused keys, errors), and the mask pre- / post-processing
against its equations."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.models.birefnet.model import BackgroundRemovalModel, load_background_removal, preprocess
from comfy_core.models.birefnet.network import (BiRefNetConfig, BiRefNetWeightsError, deform_conv2d, image_tiles,
                                                network_from_state_dict)
from comfy_core.models.birefnet.swin import SwinConfig, SwinTransformer, relative_position_index, shift_mask
from tests.fixtures.template_models_bgremoval import random_state, tiny_birefnet_config, tiny_birefnet_state_dict


def _transformers_state(ours: dict[str, torch.Tensor], config: SwinConfig) -> dict[str, torch.Tensor]:
    """ComfyUI's Swin names -> transformers' SwinBackbone names (qkv split into q / k / v)."""
    out = {"swin.embeddings.patch_embeddings.projection.weight": ours["patch_embed.proj.weight"],
           "swin.embeddings.patch_embeddings.projection.bias": ours["patch_embed.proj.bias"],
           "swin.embeddings.norm.weight": ours["patch_embed.norm.weight"],
           "swin.embeddings.norm.bias": ours["patch_embed.norm.bias"]}
    for i, depth in enumerate(config.depths):
        out[f"hidden_states_norms.stage{i + 1}.weight"] = ours[f"norm{i}.weight"]
        out[f"hidden_states_norms.stage{i + 1}.bias"] = ours[f"norm{i}.bias"]
        if i < len(config.depths) - 1:
            for name in ("reduction.weight", "norm.weight", "norm.bias"):
                out[f"swin.encoder.layers.{i}.downsample.{name}"] = ours[f"layers.{i}.downsample.{name}"]
        for j in range(depth):
            a, t = f"layers.{i}.blocks.{j}.", f"swin.encoder.layers.{i}.blocks.{j}."
            for kind in ("weight", "bias"):
                q, k, v = ours[f"{a}attn.qkv.{kind}"].chunk(3, dim=0)
                out[f"{t}attention.q_proj.{kind}"], out[f"{t}attention.k_proj.{kind}"] = q, k
                out[f"{t}attention.v_proj.{kind}"] = v
                out[f"{t}attention.o_proj.{kind}"] = ours[f"{a}attn.proj.{kind}"]
                out[f"{t}layernorm_before.{kind}"] = ours[f"{a}norm1.{kind}"]
                out[f"{t}layernorm_after.{kind}"] = ours[f"{a}norm2.{kind}"]
                out[f"{t}mlp.fc1.{kind}"] = ours[f"{a}mlp.fc1.{kind}"]
                out[f"{t}mlp.fc2.{kind}"] = ours[f"{a}mlp.fc2.{kind}"]
            out[f"{t}attention.relative_position_bias.relative_position_bias_table"] = \
                ours[f"{a}attn.relative_position_bias_table"]
    return out


@pytest.mark.parametrize("size", [(96, 96), (84, 100)])  # stages 24/12/6/3 (padded, shifted); odd grids
def test_swin_backbone_matches_transformers(size):
    transformers = pytest.importorskip("transformers")
    config = SwinConfig(embed_dim=8, depths=(2, 2, 2, 2), num_heads=(1, 2, 2, 4), window_size=2)
    ours = SwinTransformer(config).eval()
    state = {k: v for k, v in random_state(ours, seed=1).items()}
    for key in state:
        if key.endswith("relative_position_bias_table"):
            state[key] = torch.randn(state[key].shape, generator=torch.Generator().manual_seed(len(key)))
    ours.load_state_dict(state)
    theirs_config = transformers.SwinConfig(image_size=size[0], patch_size=4, num_channels=3, embed_dim=8,
                                            depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4], window_size=2,
                                            hidden_act="gelu",
                                            out_features=["stage1", "stage2", "stage3", "stage4"])
    theirs = transformers.SwinBackbone(theirs_config).eval()
    missing, unexpected = theirs.load_state_dict(_transformers_state(state, config), strict=False)
    assert unexpected == [] and all(k.startswith("swin.layernorm") for k in missing), (missing, unexpected)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = ours(x)
        want = theirs(pixel_values=x).feature_maps
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_relative_position_index_and_shift_mask_equations():
    w = 3
    index = relative_position_index(w)
    for qi in range(w * w):
        for ki in range(w * w):
            (qy, qx), (ky, kx) = divmod(qi, w), divmod(ki, w)
            assert index[qi, ki] == (qy - ky + w - 1) * (2 * w - 1) + (qx - kx + w - 1)
    # a 6x6 grid, window 3, shift 1: tokens of one window are in one region unless bands differ
    mask = shift_mask(6, 6, 3, 1)
    bands = lambda p: 0 if p < 3 else (1 if p < 5 else 2)  # noqa: E731 -- [0, H-w), [H-w, H-s), [H-s, H)
    for win in range(4):
        wy, wx = divmod(win, 2)
        for qi in range(9):
            for ki in range(9):
                (qy, qx), (ky, kx) = divmod(qi, 3), divmod(ki, 3)
                same = (bands(3 * wy + qy), bands(3 * wx + qx)) == (bands(3 * wy + ky), bands(3 * wx + kx))
                assert mask[win, qi, ki] == (0.0 if same else -100.0)


@pytest.mark.parametrize("kernel", [1, 3, 7])
def test_deform_conv2d_matches_torchvision(kernel):
    tv_ops = pytest.importorskip("torchvision.ops")
    gen = torch.Generator().manual_seed(kernel)
    x = torch.randn(2, 5, 9, 11, generator=gen)
    offset = 3.0 * torch.randn(2, 2 * kernel * kernel, 9, 11, generator=gen)  # some taps leave the image
    mask = 2 * torch.sigmoid(torch.randn(2, kernel * kernel, 9, 11, generator=gen))
    weight = torch.randn(4, 5, kernel, kernel, generator=gen)
    want = tv_ops.deform_conv2d(x, offset, weight, None, padding=kernel // 2, mask=mask)
    torch.testing.assert_close(deform_conv2d(x, offset, mask, weight, kernel // 2), want, atol=1e-4, rtol=1e-4)


def test_deform_conv2d_with_zero_offsets_and_unit_mask_is_a_convolution():
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(1, 3, 8, 8, generator=gen), torch.randn(2, 3, 3, 3, generator=gen)
    got = deform_conv2d(x, torch.zeros(1, 18, 8, 8), torch.ones(1, 9, 8, 8), weight, 1)
    torch.testing.assert_close(got, F.conv2d(x, weight, padding=1), atol=1e-5, rtol=1e-5)


def test_image_tiles_are_columns_of_rows_along_channels():
    image = torch.randn(2, 3, 8, 12, generator=torch.Generator().manual_seed(0))
    got = image_tiles(image, 4, 3)
    for b in range(2):
        tiles = [row_tile for column in torch.split(image[b], 3, dim=-1) for row_tile in torch.split(column, 4, dim=-2)]
        torch.testing.assert_close(got[b], torch.cat(tiles, dim=0), atol=0, rtol=0)
    with pytest.raises(ValueError, match="multiple of 32"):
        image_tiles(image, 5, 3)


def test_config_read_from_comfyui_layout_and_unused_keys_dropped():
    config = tiny_birefnet_config()
    state = tiny_birefnet_state_dict(config, seed=0)
    assert "bb.layers.1.blocks.0.attn.relative_position_index" in state
    network = network_from_state_dict(state)
    assert network.config == config
    assert network.config.channels == (128, 64, 32, 16)
    torch.testing.assert_close(network.state_dict()["decoder.ipt_blk5.conv1.weight"],
                               state["decoder.ipt_blk5.conv1.weight"])


def test_default_config_is_comfyuis_swin_l_birefnet():
    config = BiRefNetConfig()
    assert config.backbone.widths == (192, 384, 768, 1536) and config.channels == (3072, 1536, 768, 384)
    assert config.backbone.depths == (2, 2, 18, 2) and config.backbone.window_size == 12
    assert config.tile_out == tuple(c // 8 for c in (3072, 3072, 1536, 768, 384))


def test_refuses_other_files_and_missing_weights(tmp_path):
    with pytest.raises(BiRefNetWeightsError, match="not a background removal model"):
        network_from_state_dict({"x.weight": torch.zeros(1)}, "other.safetensors")
    state = tiny_birefnet_state_dict()
    state["bb.absolute_pos_embed"] = torch.zeros(1, 8, 2, 2)  # not held by the network: dropped, as ComfyUI
    assert network_from_state_dict(state).config == tiny_birefnet_config()
    del state["decoder.conv_out1.0.weight"]
    with pytest.raises(BiRefNetWeightsError, match="conv_out1"):
        network_from_state_dict(state, "broken.safetensors")


def test_preprocess_equations():
    image = torch.rand(1, 20, 30, 4, generator=torch.Generator().manual_seed(0))
    got = preprocess(image, 32)
    resized = F.interpolate(image[..., :3].movedim(-1, 1), size=(32, 32), mode="bicubic", antialias=True)
    quant = torch.round(torch.clamp(resized * 255, 0, 255)) / 255
    want = (quant - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    square = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(1))  # already the size: no resize
    torch.testing.assert_close(preprocess(square, 32)[0, 0], (torch.round(square[0, ..., 0] * 255) / 255 - 0.485) / 0.229)


def test_encode_image_is_the_resized_sigmoid_per_image(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "birefnet.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_birefnet_state_dict(seed=2).items()}, str(path))
    model = load_background_removal(path)
    assert isinstance(model, BackgroundRemovalModel) and model.image_size == 1024
    images = torch.rand(2, 40, 56, 3, generator=torch.Generator().manual_seed(3))
    seen = []
    mask = model.encode_image(images, image_size=64, on_image=lambda d, t: seen.append((d, t)))
    assert mask.shape == (2, 40, 56) and mask.dtype == torch.float32 and seen == [(1, 2), (2, 2)]
    with torch.no_grad():
        logits = model.model(preprocess(images[1:], 64))
    want = torch.sigmoid(F.interpolate(logits, size=(40, 56), mode="bicubic", antialias=False))[:, 0]
    torch.testing.assert_close(mask[1:], want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mask[:1], model.encode_image(images[:1], image_size=64), atol=1e-6, rtol=1e-6)
    assert 0.0 < float(mask.min()) and float(mask.max()) < 1.0


def test_decoder_block_against_its_equations():
    """conv -> BN -> ReLU -> deformable ASPP (branches: deform conv, BN, ReLU; pooled 1x1 conv, BN,
    ReLU broadcast; concat, 1x1, BN, ReLU) -> conv -> BN, written out with torchvision's deform conv."""
    tv_ops = pytest.importorskip("torchvision.ops")
    from comfy_core.models.birefnet.network import DecoderBlock

    config = tiny_birefnet_config()
    block = DecoderBlock(6, 5, config).eval()
    block.load_state_dict(random_state(block, seed=4))
    sd = {k: v for k, v in block.state_dict().items()}
    x = torch.randn(2, 6, 9, 10, generator=torch.Generator().manual_seed(1))

    def bn(t, p):
        return F.batch_norm(t, sd[f"{p}.running_mean"], sd[f"{p}.running_var"], sd[f"{p}.weight"], sd[f"{p}.bias"],
                            False, 0.0, 1e-5)

    def branch(t, p, k):
        offset = F.conv2d(t, sd[f"{p}.atrous_conv.offset_conv.weight"], sd[f"{p}.atrous_conv.offset_conv.bias"], padding=k // 2)
        mod = 2 * torch.sigmoid(F.conv2d(t, sd[f"{p}.atrous_conv.modulator_conv.weight"],
                                         sd[f"{p}.atrous_conv.modulator_conv.bias"], padding=k // 2))
        y = tv_ops.deform_conv2d(t, offset, sd[f"{p}.atrous_conv.regular_conv.weight"], None, padding=k // 2, mask=mod)
        return F.relu(bn(y, f"{p}.bn"))

    h = F.relu(bn(F.conv2d(x, sd["conv_in.weight"], sd["conv_in.bias"], padding=1), "bn_in"))
    parts = [branch(h, "dec_att.aspp1", 1)] + [branch(h, f"dec_att.aspp_deforms.{i}", k) for i, k in enumerate((1, 3, 7))]
    pooled = F.relu(bn(F.conv2d(h.mean(dim=(2, 3), keepdim=True), sd["dec_att.global_avg_pool.1.weight"]),
                       "dec_att.global_avg_pool.2"))
    parts.append(pooled.expand(-1, -1, 9, 10))
    h = F.relu(bn(F.conv2d(torch.cat(parts, dim=1), sd["dec_att.conv1.weight"]), "dec_att.bn1"))
    want = bn(F.conv2d(h, sd["conv_out.weight"], sd["conv_out.bias"], padding=1), "bn_out")
    with torch.no_grad():
        torch.testing.assert_close(block(x), want, atol=1e-4, rtol=1e-4)
