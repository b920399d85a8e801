"""HiDream-O1: the network on tiny random weights against transformers' Qwen3-VL text model and
against the equations written here; the sequence / position assembly; detection."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.hidream_o1 import definition
from comfy_core.families.hidream_o1.conditioning import (FIX_POINT, VISION_END_ID, VISION_START_ID, build_inputs,
                                                         position_ids)
from comfy_core.families.hidream_o1.dit import (IMAGE_TOKEN_ID, TMS_TOKEN_ID, HiDreamO1Config, HiDreamO1Transformer,
                                                mrope_sections)
from comfy_core.text_encoders.qwen3vl_vision import Qwen3VLVisionConfig

VOCAB = 151700


def tiny_config(vision: bool = True) -> HiDreamO1Config:
    vis = Qwen3VLVisionConfig(hidden_size=64, intermediate_size=48, depth=2, out_hidden_size=64,
                              num_position_embeddings=16, deepstack_visual_indexes=()) if vision else None
    return HiDreamO1Config(hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2,
                           head_dim=16, vocab_size=VOCAB, patch_size=32, bottleneck=16, vision=vis)


def random_network(config: HiDreamO1Config, seed: int = 0) -> HiDreamO1Transformer:
    torch.manual_seed(seed)
    net = HiDreamO1Transformer(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(torch.randn_like(p) * (0.02 if p.dim() > 1 else 0.1) + (1.0 if "norm" in name and p.dim() == 1
                                                                                 else 0.0))
    return net.eval()


# --- independent equations ---

def ref_rotary(x: torch.Tensor, pos: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """x [B, T, H, d]; pos [3, T]; Qwen3-VL interleaved M-RoPE, rotate-half."""
    t_pairs, h_pairs, w_pairs = mrope_sections(head_dim)
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = torch.empty(pos.shape[1], head_dim // 2, dtype=torch.float64)
    for j in range(head_dim // 2):
        axis = 0
        if j % 3 == 1 and j < 3 * h_pairs:
            axis = 1
        elif j % 3 == 2 and j < 3 * w_pairs:
            axis = 2
        angle[:, j] = pos[axis].double() * inv[j]
    cos = torch.cat([angle.cos(), angle.cos()], -1).float()[None, :, None]
    sin = torch.cat([angle.sin(), angle.sin()], -1).float()[None, :, None]
    half = head_dim // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def ref_forward(net: HiDreamO1Transformer, x: torch.Tensor, t: torch.Tensor, inputs: dict) -> torch.Tensor:
    """The network's output by the equations of the family's description, with a full attention mask."""
    cfg = net.config
    lm = net.language_model
    ids, pos, ar = inputs["input_ids"], inputs["position_ids"][0], inputs["ar_len"]
    b, _, h, w = x.shape
    p = cfg.patch_size
    patches = [x[:, :, r * p:(r + 1) * p, c * p:(c + 1) * p].reshape(b, -1)
               for r in range(h // p) for c in range(w // p)]
    z = torch.stack(patches, 1)
    emb = lm.embed_tokens.weight[ids[0]][None].expand(b, -1, -1).clone()
    sigma = t / 1000.0
    tt = (1 - sigma) * 1000
    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half) / half)
    tf = torch.cat([torch.cos(tt[:, None] * freqs), torch.sin(tt[:, None] * freqs)], -1)
    m = net.t_embedder1.mlp
    temb = m[2](torch.nn.functional.silu(m[0](tf)))
    emb[:, ids[0] == TMS_TOKEN_ID] = temb[:, None]
    xe = net.x_embedder.proj2(net.x_embedder.proj1(z))
    hs = torch.cat([emb, xe], 1)
    n = hs.shape[1]
    mask = torch.zeros(n, n)
    for i in range(min(ar, n)):
        mask[i, i + 1:] = float("-inf")
    for blk in lm.layers:
        a = blk.self_attn
        y = rms(hs, blk.input_layernorm.weight)
        q = a.q_proj(y).view(b, n, cfg.num_heads, cfg.head_dim)
        k = a.k_proj(y).view(b, n, cfg.num_kv_heads, cfg.head_dim)
        v = a.v_proj(y).view(b, n, cfg.num_kv_heads, cfg.head_dim)
        q = ref_rotary(rms(q, a.q_norm.weight), pos, cfg.head_dim, cfg.rope_theta)
        k = ref_rotary(rms(k, a.k_norm.weight), pos, cfg.head_dim, cfg.rope_theta)
        rep = cfg.num_heads // cfg.num_kv_heads
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.head_dim) + mask
        o = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, n, -1)
        hs = hs + a.o_proj(o)
        y = rms(hs, blk.post_attention_layernorm.weight)
        hs = hs + blk.mlp.down_proj(torch.nn.functional.silu(blk.mlp.gate_proj(y)) * blk.mlp.up_proj(y))
    hs = rms(hs, lm.norm.weight)
    start = ids.shape[1]
    out = net.final_layer2.linear(hs[:, start:start + (h // p) * (w // p)])
    x0 = torch.zeros_like(x)
    i = 0
    for r in range(h // p):
        for c in range(w // p):
            x0[:, :, r * p:(r + 1) * p, c * p:(c + 1) * p] = out[:, i].view(b, 3, p, p)
            i += 1
    return (x - x0) / sigma.clamp_min(1e-3).view(b, 1, 1, 1)


def prompt_ids(n: int = 9, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(1000, 150000, (n,), generator=g).tolist()
    return torch.tensor([[151644, 872, 198] + body + [151645, 198, 151644, 77091, 198, 151669, TMS_TOKEN_ID]])


def test_text_to_image_forward_matches_the_equations():
    net = random_network(tiny_config(vision=False))
    x = torch.randn(2, 3, 64, 96)
    inputs = build_inputs(prompt_ids(), x)
    t = torch.tensor([700.0, 250.0])
    with torch.no_grad():
        got = net(x, t, input_ids=inputs["input_ids"], position_ids=inputs["position_ids"],
                  vinput_mask=inputs["vinput_mask"], ar_len=inputs["ar_len"])
        want = ref_forward(net, x, t, inputs)
    assert got.dtype == torch.float32 and got.shape == x.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_the_two_pass_boundary_matters():
    """Moving ar_len changes the output: the prefix is causal, the rest attends everything."""
    net = random_network(tiny_config(vision=False))
    x = torch.randn(1, 3, 64, 64)
    inputs = build_inputs(prompt_ids(), x)
    t = torch.tensor([500.0])
    with torch.no_grad():
        a = net(x, t, **{k: inputs[k] for k in ("input_ids", "position_ids", "vinput_mask", "ar_len")})
        inputs2 = dict(inputs, ar_len=0)
        b = net(x, t, **{k: inputs2[k] for k in ("input_ids", "position_ids", "vinput_mask", "ar_len")})
        want = ref_forward(net, x, t, inputs2)
    torch.testing.assert_close(b, want, rtol=1e-4, atol=1e-4)
    assert (a - b).abs().max() > 1e-4


def test_decoder_matches_transformers_qwen3vl_text_model():
    """With a fully causal mask (ar_len = T) the block stack is Qwen3-VL's text model."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

    config = tiny_config(vision=False)
    net = random_network(config)
    hf_config = Qwen3VLTextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                  rope_theta=config.rope_theta, attn_implementation="eager",
                                  rope_scaling={"rope_type": "default", "mrope_section": list(mrope_sections(16)),
                                                "mrope_interleaved": True})
    hf = Qwen3VLTextModel(hf_config).eval()
    ours = {"language_model." + k: v for k, v in hf.state_dict().items()}
    net.load_state_dict({**net.state_dict(), **{k: ours[k] for k in net.state_dict() if k in ours}})
    x = torch.randn(1, 3, 64, 64)
    inputs = build_inputs(prompt_ids(), x)
    pos = inputs["position_ids"][0]
    n = pos.shape[1]
    embeds = torch.randn(1, n, 64)
    from comfy_core.text_encoders.qwen3vl import interleaved_mrope_tables

    cos, sin = interleaved_mrope_tables(pos, 16, config.rope_theta, config.mrope_section, torch.device("cpu"))
    with torch.no_grad():
        h = embeds
        for block in net.language_model.layers:
            h = block(h, cos, sin, n, {})
        got = net.language_model.norm(h)
        want = hf(inputs_embeds=embeds, position_ids=pos[:, None]).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_text_to_image_positions_and_masks():
    ids = prompt_ids(5)
    x = torch.zeros(2, 3, 96, 64)
    out = build_inputs(ids, x)
    text = ids.shape[1]
    pos = out["position_ids"][0]
    assert pos.shape == (3, text + 6)
    assert torch.equal(pos[:, :text], torch.arange(text).expand(3, -1))
    rows, cols = torch.meshgrid(torch.arange(3), torch.arange(2), indexing="ij")
    assert torch.equal(pos[0, text:], torch.full((6,), FIX_POINT))
    assert torch.equal(pos[1, text:], FIX_POINT + rows.flatten())
    assert torch.equal(pos[2, text:], FIX_POINT + cols.flatten())
    assert out["ar_len"] == text - 1
    assert out["vinput_mask"].shape == (2, text + 6) and out["vinput_mask"][:, text:].all()
    assert not out["vinput_mask"][:, :text].any()
    assert torch.equal(out["token_types"][0], (torch.arange(text + 6) >= text - 1).long())
    assert torch.equal(out["input_ids"], ids)


def test_position_ids_of_a_vit_block_then_patch_blocks():
    """A ViT image (2x2 merged) after 3 text tokens, then the target (skip start, fixed point)
    and a reference patch block after it."""
    ids = [1, 2, 3, VISION_START_ID] + [IMAGE_TOKEN_ID] * 4 + [VISION_END_ID, 5, 6]
    seq = ids + [VISION_START_ID] + [IMAGE_TOKEN_ID] * 3 + [VISION_START_ID] + [IMAGE_TOKEN_ID] * 1
    pos = position_ids(seq, [(1, 2, 2), (1, 2, 2), (1, 1, 2)], [0, 1, 1])
    assert pos.shape == (3, len(seq))
    # text 1 2 3 <vs>: 0..3; the ViT grid after 4 text positions
    assert pos[:, :4].tolist() == [[0, 1, 2, 3]] * 3
    assert pos[:, 4:8].tolist() == [[4, 4, 4, 4], [4, 4, 5, 5], [4, 5, 4, 5]]
    # <ve> 5 6: 6, 7, 8 (after the grid's max 5)
    assert pos[:, 8:11].tolist() == [[6, 7, 8]] * 3
    # target at the fixed point
    assert pos[:, 11:15].tolist() == [[4096] * 4, [4096, 4096, 4097, 4097], [4096, 4097, 4096, 4097]]
    # the reference patches after the target's max (4097)
    assert pos[:, 15:17].tolist() == [[4098, 4098], [4098, 4098], [4098, 4099]]


def test_reference_images_run_through_the_vision_tower():
    net = random_network(tiny_config(vision=True))
    x = torch.randn(1, 3, 64, 64)
    ref = torch.rand(1, 80, 48, 3)
    inputs = build_inputs(prompt_ids(), x, [ref])
    ids = inputs["input_ids"][0].tolist()
    count = ids.count(IMAGE_TOKEN_ID)
    assert ids[3] == VISION_START_ID and ids[4 + count] == VISION_END_ID and count > 0
    grid = inputs["ref_image_grid_thw"][0]
    assert count == int(grid[0, 1] // 2) * int(grid[0, 2] // 2)
    patches = inputs["ref_patches"]
    total = len(ids) + 4 + patches.shape[1]
    assert inputs["position_ids"].shape == (1, 3, total) and inputs["vinput_mask"].shape == (1, total)
    assert patches.shape[-1] == 3 * 32 * 32  # in -1..1 but for bicubic overshoot, as ComfyUI
    t = torch.tensor([600.0])
    with torch.no_grad():
        out = net(x, t, **inputs)
        plain = net(x, t, **build_inputs(prompt_ids(), x))
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert (out - plain).abs().max() > 1e-4


def test_detection_reads_the_shapes():
    net = random_network(tiny_config(vision=True))
    tensors = {"model.diffusion_model." + k: v for k, v in net.state_dict().items()}
    fam = definition()
    config = fam.architecture.config(tensors, "model.diffusion_model.", fam)
    assert config == tiny_config(vision=True)
    assert fam.signature.matches(frozenset(tensors), fam.architecture.facts(config))


def test_registry_detects_the_family():
    from comfy_core.families import default_registry

    net = random_network(tiny_config(vision=False))
    tensors = {"model.diffusion_model." + k: v for k, v in net.state_dict().items()}
    assert default_registry().detect(tensors).family.name == "hidream_o1"


def test_missing_token_ids_is_a_clear_error():
    from comfy_core.families.hidream_o1.dit import HiDreamO1InputError

    net = random_network(tiny_config(vision=False))
    with pytest.raises(HiDreamO1InputError, match="input_ids"):
        net(torch.zeros(1, 3, 32, 32), torch.tensor([500.0]))


def test_tokenizer_wraps_the_prompt_in_the_chat_template():
    from comfy_core.families.hidream_o1.clip import tokenizer_only_clip

    clip = tokenizer_only_clip()
    tokens = clip.tokenize("a red fox (in snow:1.3)")
    ids = [pair[0] for pair in tokens["hidream_o1"][0]]
    assert ids[:3] == [151644, 872, 198] and ids[-7:] == [151645, 198, 151644, 77091, 198, 151669, TMS_TOKEN_ID]
    assert all(pair[1] == 1.0 for pair in tokens["hidream_o1"][0])  # weights disabled
    assert ids[3:-7] == clip.tokenizer.hidream_o1.encode("a red fox (in snow:1.3)")  # the parentheses kept
    [[cond, extra]] = clip.encode_from_tokens_scheduled(tokens)
    assert torch.equal(extra["text_input_ids"], torch.tensor([ids]))
    assert cond.shape == (1, len(ids), 1)


@pytest.mark.parametrize("name, kind", [("hidream_o1_image_bf16.safetensors", "ckpt_hidream_o1"),
                                        ("hidream_o1_image_dev_fp8_scaled.safetensors", "ckpt_hidream_o1_fp8")])
def test_checkpoint_loads_with_its_builtin_clip_and_pixel_vae(tmp_path, name, kind):
    from comfy_core.loading import load_checkpoint
    from comfy_core.models.pixel_space_vae import PixelSpaceVAE
    from tests.fixtures.template_models_hidream_o1 import WRITERS_HIDREAM_O1, tiny_hidream_o1_config

    path = tmp_path / name
    WRITERS_HIDREAM_O1[kind](path)
    model, clip, vae = load_checkpoint(path)
    assert model.model.family.name == "hidream_o1"
    assert model.model.diffusion_model.config == tiny_hidream_o1_config()
    assert isinstance(vae.model, PixelSpaceVAE)
    [[cond, extra]] = clip.encode_from_tokens_scheduled(clip.tokenize("a fox"))
    x = torch.randn(1, 3, 64, 64)
    inputs = build_inputs(extra["text_input_ids"], x)
    with torch.no_grad():
        dtype = model.model.manual_cast_dtype or model.model.get_dtype()
        out = model.model.diffusion_model(x.to(dtype), torch.tensor([500.0]), **inputs)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_lora_key_map_names_the_modules():
    from comfy_core.lora.dit_keymap import dit_key_map
    from comfy_core.models.diffusion import DiffusionModel

    fam = definition()
    model = DiffusionModel(random_network(tiny_config(vision=False)), fam.sampling.model_sampling("flow"),
                           fam.latent_format, family=fam)
    key_map = dit_key_map(model)
    target = "diffusion_model.language_model.layers.1.self_attn.q_proj.weight"
    assert key_map["diffusion_model.language_model.layers.1.self_attn.q_proj"] == target
    assert key_map["lora_unet_language_model_layers_1_self_attn_q_proj"] == target
