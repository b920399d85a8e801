"""SAM 3 / 3.1 (comfy_core/models/sam3) on tiny random weights in ComfyUI's key layout: the ViT
trunk and the text tower against transformers' own modules (1e-4), the other pieces against their
equations written here, and the loaders (CheckpointLoaderSimple -> MODEL + CLIP, UNETLoader -> MODEL)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.models.sam3.backbone import PositionEmbeddingSine, apply_rope, axial_rope
from comfy_core.text_encoders.sam3_clip import BOS, EOS, Sam3Clip, Sam3TextModel, parse_prompts, text_config
from comfy_core.models.sam3.config import Sam3Config, is_sam3
from comfy_core.models.sam3.detector import DotProductScoring, sine_embed
from comfy_core.loading import load_sam3
from comfy_core.models.sam3.model import Sam3Model
from tests.fixtures.template_models_sam3 import (tiny_config, tiny_sam3_file_state, tiny_sam3_state_dict,
                                                 tiny_text_state_dict)

VIT_DIM = 48  # one ViT head (Sam3Config's reading): see `loaded_one_head`


@pytest.fixture(scope="module")
def loaded():
    with CheckpointFile(tiny_sam3_file_state(seed=3)) as file:
        return load_sam3(file)


@pytest.fixture(scope="module")
def loaded_one_head():
    """The tiny file with a one-head ViT (vit_dim 48, text tower as wide): for the tests of shapes and
    prompts, which do not depend on the trunk's heads (test_the_vit_trunk_is_transformers_sam3_vit
    checks the 16-head trunk); its 1008-pixel trunk runs ~10x faster. Seed 6: as with the 16-head file's
    seed 3, its random boxes stay inside the image and a mask prompt changes SAM's output."""
    with CheckpointFile(tiny_sam3_file_state(seed=6, vit_dim=VIT_DIM)) as file:
        return load_sam3(file)


def test_the_config_is_read_from_the_names_and_shapes():
    state = tiny_sam3_file_state()
    assert is_sam3(state)
    config = Sam3Config.detect_from_weights(state)
    assert config == tiny_config()
    sam3 = Sam3Config.detect_from_weights(tiny_sam3_state_dict(multiplex=False))
    assert not sam3.multiplex and sam3.vit_depth == 2
    # ComfyUI's global-attention blocks for the released 32-block trunk
    big = {k: v for k, v in state.items()}
    for i in range(2, 32):
        big[f"detector.backbone.vision_backbone.trunk.blocks.{i}.attn.qkv.weight"] = torch.empty(0)
    assert Sam3Config.detect_from_weights({k: tuple(v.shape) for k, v in big.items()}).global_blocks == (7, 15, 23, 31)


def test_the_vit_trunk_is_transformers_sam3_vit():
    from transformers.models.sam3.configuration_sam3 import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    model = Sam3Model(tiny_config())
    model.load_state_dict(tiny_sam3_state_dict(seed=5))
    trunk = model.detector.backbone["vision_backbone"].trunk.eval()
    config = Sam3ViTConfig(hidden_size=64, intermediate_size=296, num_hidden_layers=2, num_attention_heads=16,
                           image_size=1008, patch_size=14, window_size=24, global_attn_indexes=[1],
                           pretrain_image_size=336, layer_norm_eps=1e-5, hidden_act="gelu",
                           rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
    config._attn_implementation = "sdpa"
    theirs = Sam3ViTModel(config).eval()
    ours = trunk.state_dict()
    mapped = {"embeddings.patch_embeddings.projection.weight": ours["patch_embed.proj.weight"],
              "embeddings.position_embeddings": ours["pos_embed"][:, 1:],
              "layer_norm.weight": ours["ln_pre.weight"], "layer_norm.bias": ours["ln_pre.bias"]}
    for i in range(2):
        b = f"blocks.{i}."
        q, k, v = ours[b + "attn.qkv.weight"].chunk(3)
        qb, kb, vb = ours[b + "attn.qkv.bias"].chunk(3)
        layer = f"layers.{i}."
        mapped.update({layer + "attention.q_proj.weight": q, layer + "attention.k_proj.weight": k,
                       layer + "attention.v_proj.weight": v, layer + "attention.q_proj.bias": qb,
                       layer + "attention.k_proj.bias": kb, layer + "attention.v_proj.bias": vb,
                       layer + "attention.o_proj.weight": ours[b + "attn.proj.weight"],
                       layer + "attention.o_proj.bias": ours[b + "attn.proj.bias"]})
        for a, t in (("norm1", "layer_norm1"), ("norm2", "layer_norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            mapped[layer + t + ".weight"] = ours[b + a + ".weight"]
            mapped[layer + t + ".bias"] = ours[b + a + ".bias"]
    missing, unexpected = theirs.load_state_dict(mapped, strict=False)
    assert not unexpected and all("position_ids" in m or "freq" in m for m in missing)
    image = torch.rand(1, 3, 1008, 1008, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = trunk(image)  # [1, C, 72, 72]
        want = theirs(image).last_hidden_state.view(1, 72, 72, 64).permute(0, 3, 1, 2)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


def test_the_text_tower_is_transformers_clip_with_the_padding_masked():
    from transformers import CLIPTextConfig, CLIPTextModel

    state = tiny_text_state_dict(seed=2)
    config = text_config(state, "")
    ours = Sam3TextModel(config)
    ours.load_state_dict(state)
    theirs_config = CLIPTextConfig(vocab_size=49408, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=1, max_position_embeddings=32, hidden_act="quick_gelu",
                                   layer_norm_eps=1e-5, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0)
    theirs_config._attn_implementation = "eager"
    theirs = CLIPTextModel(theirs_config).eval()
    missing, unexpected = theirs.load_state_dict({k.removeprefix("text_model."): v for k, v in state.items()},
                                                 strict=False)
    assert not unexpected and all("position_ids" in m for m in missing)
    ids = torch.tensor([[BOS, 320, 1929, 2368, EOS] + [0] * 27])
    mask = (torch.arange(32) < 5).long()[None]
    with torch.no_grad():
        got, pooled = ours(ids, mask)
        want = theirs(input_ids=ids, attention_mask=mask)
    valid = mask[0].bool()
    assert torch.allclose(got[0, valid], want.last_hidden_state[0, valid], atol=1e-4)
    assert torch.allclose(pooled, want.pooler_output, atol=1e-4)
    # the padding does not reach the valid tokens: another padding id changes nothing there
    with torch.no_grad():
        other, _ = ours(torch.where(valid, ids, torch.full_like(ids, 7)), mask)
    assert torch.allclose(other[0, valid], got[0, valid], atol=1e-6)


def test_tokenization_and_conditioning_as_comfyui(loaded):
    _model, clip = loaded
    assert parse_prompts("(cat), dog:2 , , bird: 3.4") == [("cat", 1), ("dog", 2), ("bird", 3)]
    one = clip.tokenize("person")
    ids = [t for t, _ in one["sam3_clip"][0]]
    assert len(ids) == 32 and ids[0] == BOS and ids[1:ids.index(EOS)] == clip.tokenizer.encode("person")
    assert all(t == 0 for t in ids[ids.index(EOS) + 1:])
    assert clip.tokenize("person:1") == one and clip.tokenize("(person)") == one  # newer ComfyUI's fast path
    cond = clip.encode_from_tokens_scheduled(one)
    emb, meta = cond[0]
    assert emb.shape == (1, 32, 64) and "sam3_multi_cond" not in meta
    assert meta["attention_mask"].tolist() == [[1] * (ids.index(EOS) + 1) + [0] * (31 - ids.index(EOS))]
    multi = clip.encode_from_tokens_scheduled(clip.tokenize("cat, dog:3"))[0][1]["sam3_multi_cond"]
    assert [m["max_detections"] for m in multi] == [1, 3]
    assert torch.allclose(multi[0]["cond"], clip.encode_from_tokens_scheduled(clip.tokenize("cat"))[0][0])
    long = clip.tokenize(" ".join(["cat"] * 40))["sam3_clip"]
    assert len(long) == 2 and clip.encode_from_tokens(clip.tokenize(" ".join(["cat"] * 40))).shape == (1, 64, 64)


def test_rope_rotates_pairs_by_column_then_row_angles():
    angles = axial_rope(3, 2, 8, scale=0.5)  # 2 rows x 3 columns, head dim 8: 2 frequencies per axis
    omega = [1.0, 1.0 / 10000 ** 0.5]
    for index in range(6):
        col, row = index % 3, index // 3
        want = [0.5 * col * w for w in omega] + [0.5 * row * w for w in omega]
        assert torch.allclose(angles[index], torch.tensor(want), atol=1e-6)
    x = torch.randn(6, 8)
    got = apply_rope(x, angles)
    z = torch.view_as_complex(x.reshape(6, 4, 2).contiguous()) * torch.polar(torch.ones_like(angles), angles)
    assert torch.allclose(got, torch.view_as_real(z).reshape(6, 8), atol=1e-6)


def test_tiled_positions_and_sine_encodings():
    model = Sam3Model(tiny_config())
    trunk = model.detector.backbone["vision_backbone"].trunk
    with torch.no_grad():
        trunk.pos_embed.copy_(torch.randn(trunk.pos_embed.shape))
    pos = trunk._positions(72).view(72, 72, -1)
    grid = trunk.pos_embed[0, 1:].view(24, 24, -1)
    assert torch.equal(pos[30, 50], grid[30 % 24, 50 % 24]) and torch.equal(pos[71, 0], grid[71 % 24, 0])
    enc = PositionEmbeddingSine(8)
    out = enc(torch.zeros(1, 1, 3, 5))  # [1, 8, 3, 5]: y features then x
    y, x = 2 / (2 + 1e-6), 4 / (4 + 1e-6)
    freqs = [10000 ** (2 * (i // 2) / 4) for i in range(4)]
    want_y = [math.sin(y * 2 * math.pi / freqs[0]), math.cos(y * 2 * math.pi / freqs[1]),
              math.sin(y * 2 * math.pi / freqs[2]), math.cos(y * 2 * math.pi / freqs[3])]
    assert torch.allclose(out[0, :4, 2, 4], torch.tensor(want_y), atol=1e-5)
    assert torch.allclose(out[0, 4:, 2, 4], out[0, :4, 2, 4] * 0 + torch.tensor(
        [math.sin(x * 2 * math.pi / freqs[0]), math.cos(x * 2 * math.pi / freqs[1]),
         math.sin(x * 2 * math.pi / freqs[2]), math.cos(x * 2 * math.pi / freqs[3])]), atol=1e-5)
    boxes = sine_embed(torch.tensor([[0.25, 0.5]]), 4)  # 2 coordinates x 2 features
    assert torch.allclose(boxes, torch.tensor([[math.sin(0.5 * math.pi), math.cos(0.5 * math.pi / 10000 ** 0),
                                                math.sin(math.pi), math.cos(math.pi)]]), atol=1e-6)


def test_scoring_is_the_masked_mean_prompt_dot_product():
    torch.manual_seed(0)
    scoring = DotProductScoring(8, 16).eval()
    queries, prompt = torch.randn(1, 5, 8), torch.randn(1, 4, 8)
    mask = torch.tensor([[True, True, False, False]])
    with torch.no_grad():
        got = scoring(queries, prompt, mask)
        p = scoring.prompt_mlp.layers[1](F.relu(scoring.prompt_mlp.layers[0](prompt))) + prompt
        p = scoring.prompt_mlp.out_norm(p)[:, :2].mean(1)
        want = (scoring.hs_proj(queries) @ scoring.prompt_proj(p).T).squeeze(-1) / math.sqrt(8)
    assert torch.allclose(got, want.clamp(-12, 12), atol=1e-5)


def test_detection_and_segmentation_shapes_and_prompts(loaded_one_head):
    model, clip = loaded_one_head
    network = model.model.diffusion_model
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("cat"))[0]
    image = torch.rand(1, 3, 1008, 1008, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = network(image, text_embeddings=cond[0], text_mask=cond[1]["attention_mask"], orig_size=(40, 60))
        with_box = network(image, text_embeddings=cond[0], text_mask=cond[1]["attention_mask"],
                           boxes=torch.tensor([[[0.5, 0.5, 0.4, 0.4]]]))
        no_prompt = network(image)
    assert out["boxes"].shape == (1, 6, 4) and out["masks"].shape == (1, 6, 40, 60) and out["presence"].shape == (1, 1)
    assert (out["boxes"][..., 2] >= out["boxes"][..., 0]).all() and out["boxes"].max() <= 60
    assert not torch.allclose(with_box["scores"], network(image, text_embeddings=cond[0],
                                                          text_mask=cond[1]["attention_mask"])["scores"])
    assert torch.equal(no_prompt["scores"], torch.zeros(1, 6))
    with torch.no_grad():
        one_point = network.forward_segment(image, point_inputs={"point_coords": torch.tensor([[[300.0, 200.0]]]),
                                                                 "point_labels": torch.tensor([[1]], dtype=torch.int32)})
        box = network.forward_segment(image, box_inputs=torch.tensor([[[100.0, 100.0], [600.0, 700.0]]]))
        refined = network.forward_segment(image, mask_inputs=box)
    for m in (one_point, box, refined):
        assert m.shape == (1, 1, 1008, 1008) and torch.isfinite(m).all()
    assert not torch.equal(box, refined)


def test_checkpoint_loader_returns_model_and_clip_without_vae(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.loading import load_checkpoint
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path / "sam3.1_multiplex_fp16.safetensors"
    save_file({k: v.half().contiguous() for k, v in tiny_sam3_file_state(seed=1).items()}, str(path))
    model, clip, vae = load_checkpoint(path)
    assert vae is None and isinstance(clip, Sam3Clip) and isinstance(model.model.diffusion_model, Sam3Model)
    assert model.model.get_dtype() == torch.float32  # on a CPU
    alone = load_diffusion_model(path)
    assert isinstance(alone.model.diffusion_model, Sam3Model)
    a = model.model.diffusion_model.state_dict()
    b = alone.model.diffusion_model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_neck_and_an_encoder_layer_are_transformers_sam3():
    from transformers.models.sam3.configuration_sam3 import Sam3DETREncoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrEncoderLayer, Sam3FPNLayer

    model = Sam3Model(tiny_config(multiplex=False))
    model.load_state_dict(tiny_sam3_state_dict(seed=6, multiplex=False))
    neck = model.detector.backbone["vision_backbone"].convs
    trunk_out = torch.randn(1, 64, 12, 12, generator=torch.Generator().manual_seed(1))
    for ours, scale in zip(neck, (4.0, 2.0, 1.0, 0.5)):
        theirs = Sam3FPNLayer(64, 32, scale).eval()
        names = {4.0: ["dconv_2x2_0", None, "dconv_2x2_1"], 2.0: ["dconv_2x2"], 1.0: [], 0.5: [None]}[scale]
        state = {}
        for i, name in enumerate(names):
            if name is not None:
                state[f"scale_layers.{i}.weight"] = getattr(ours, name).weight
                state[f"scale_layers.{i}.bias"] = getattr(ours, name).bias
        for a, b in (("proj1", "conv_1x1"), ("proj2", "conv_3x3")):
            state[f"{a}.weight"], state[f"{a}.bias"] = getattr(ours, b).weight, getattr(ours, b).bias
        theirs.load_state_dict(state)
        with torch.no_grad():
            assert torch.allclose(ours(trunk_out), theirs(trunk_out), atol=1e-4)

    layer = model.detector.transformer.encoder.layers[0].eval()
    config = Sam3DETREncoderConfig(hidden_size=32, num_attention_heads=8, intermediate_size=48, dropout=0.0)
    config._attn_implementation = "eager"
    theirs = Sam3DetrEncoderLayer(config).eval()
    ours = layer.state_dict()
    state = {}
    for a, b in (("self_attn", "self_attn"), ("cross_attn", "cross_attn_image")):
        for p in ("q_proj", "k_proj", "v_proj"):
            for t in ("weight", "bias"):
                state[f"{a}.{p}.{t}"] = ours[f"{b}.{p}.{t}"]
        state[f"{a}.o_proj.weight"], state[f"{a}.o_proj.bias"] = ours[f"{b}.out_proj.weight"], ours[f"{b}.out_proj.bias"]
    for i in (1, 2, 3):
        state[f"layer_norm{i}.weight"], state[f"layer_norm{i}.bias"] = ours[f"norm{i}.weight"], ours[f"norm{i}.bias"]
    for p in ("fc1", "fc2"):
        src = {"fc1": "linear1", "fc2": "linear2"}[p]
        state[f"mlp.{p}.weight"], state[f"mlp.{p}.bias"] = ours[f"{src}.weight"], ours[f"{src}.bias"]
    theirs.load_state_dict(state)
    g = torch.Generator().manual_seed(3)
    x, pos, prompt = torch.randn(2, 10, 32, generator=g), torch.randn(2, 10, 32, generator=g), torch.randn(2, 5, 32, generator=g)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    additive = torch.zeros(2, 1, 1, 5).masked_fill(~keep[:, None, None, :], float("-inf"))
    with torch.no_grad():
        got = layer(x, pos, prompt, keep)
        want = theirs(x, prompt, pos, additive)
    assert torch.allclose(got, want, atol=1e-4)
