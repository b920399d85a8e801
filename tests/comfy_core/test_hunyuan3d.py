"""Hunyuan3D 2.0 / 2.0 mini / 2.1 (comfy_core/families/hunyuan3d): detection from the checkpoint's
names and shapes, the sampling and latent formats ComfyUI's supported models set, the DINOv2 image
encoder found as CLIP vision, and the networks' conventions against equations written here (the
2.1 head split and mixture of experts, the ShapeVAE's grid order and chunking, the two meshing
algorithms). Side by side with ComfyUI: test_hunyuan3d_parity.py."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families import default_registry
from comfy_core.families.hunyuan3d import Hunyuan3DConditions
from comfy_core.families.hunyuan3d.dit21 import Hunyuan3D21DiTConfig, _MixtureOfExperts, _SelfAttention
from comfy_core.families.hunyuan3d.shape_vae import ShapeVAE, ShapeVAEConfig, fourier_features
from comfy_core.families.hunyuan3d.vae_patcher import ShapeVaeInputError
from comfy_core.families.hunyuan3d.voxel_mesh import blocky_mesh, surface_net
from comfy_core.loading import load_checkpoint
from tests.fixtures import template_models_hunyuan3d as tiny
from tests.fixtures.dit_checkpoints import save


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hy3d")
    paths = {}
    for name, version, guidance in (("v20", "2.0", False), ("turbo", "2.0", True), ("v21", "2.1", False)):
        paths[name] = save(tiny.checkpoint_state_dict(version, seed=5, guidance=guidance, dtype=torch.float16),
                           folder / f"{name}.safetensors")
    mini = tiny.checkpoint_state_dict("2.0", seed=6)
    for i in range(2, 8):  # 8 double blocks: ComfyUI's Hunyuan3Dv2mini
        mini.update({k.replace("double_blocks.0.", f"double_blocks.{i}."): v.clone() for k, v in mini.items()
                     if k.startswith("model.double_blocks.0.")})
    paths["mini"] = save(mini, folder / "mini.safetensors")
    return paths


@pytest.mark.parametrize("name, family, latent, scale", [
    ("v20", "hunyuan3d2", "Hunyuan3Dv2", 0.9990943042622529),
    ("mini", "hunyuan3d2_mini", "Hunyuan3Dv2mini", 1.0188137142395404),
    ("v21", "hunyuan3d2_1", "Hunyuan3Dv2_1", 1.0039506158752403)])
def test_detection_and_comfyuis_sampling(files, name, family, latent, scale):
    with CheckpointFile(files[name]) as checkpoint:
        detection = default_registry().detect(checkpoint.tensors, checkpoint.path)
    assert detection.family.name == family
    assert detection.family.clip_vision_prefix == "conditioner.main_image_encoder.model."
    assert detection.family.latent_format.name == latent and detection.family.latent_format.scale_factor == scale
    model, clip, vae = load_checkpoint(files[name], output_clip=False)
    assert clip is None and vae.latent_channels == 64 and vae.latent_dim == 1
    config = model.model.model_config  # ComfyUI's supported_models class (2.1 and mini subclass 2.0's there)
    assert type(config).__name__ == latent and config.sampling_settings == {"multiplier": 1.0, "shift": 1.0}
    assert config.memory_usage_factor == 3.5 and config.vae_key_prefix == ["vae."]
    sampling = model.model.model_sampling
    sigmas = torch.tensor([0.2, 0.7, 1.0])
    # ComfyUI's ModelSamplingDiscreteFlow with shift 1, multiplier 1: sigma(t) = t, timestep = sigma.
    torch.testing.assert_close(sampling.timestep(sigmas), sigmas)
    x = torch.randn(1, 64, 8)
    torch.testing.assert_close(model.model.process_latent_in(x), x * scale)


def test_configs_read_from_the_weights(files):
    with CheckpointFile(files["turbo"]) as checkpoint:
        config = default_registry().detect(checkpoint.tensors, checkpoint.path).unet_config
    assert (config.hidden_size, config.context_in_dim, config.depth, config.depth_single_blocks) == (64, 32, 2, 2)
    assert config.guidance_embed and config.num_heads == 16
    with CheckpointFile(files["v21"]) as checkpoint:
        config = default_registry().detect(checkpoint.tensors, checkpoint.path).unet_config
    assert config.moe_blocks == (2, 3, 4, 5, 6, 7) and config.num_experts == 8 and config.context_dim == 32
    assert not config.qkv_bias


def test_the_dinov2_is_the_checkpoints_clip_vision(files):
    from comfy_core.clip_vision.load import clip_vision_from_checkpoint, detect_clip_vision

    with CheckpointFile(files["v21"]) as checkpoint:
        config = detect_clip_vision(checkpoint, ("conditioner.main_image_encoder.model.",))
        assert config.kind == "dinov2" and config.width == 32 and config.image_size == 56
        clip = clip_vision_from_checkpoint(checkpoint, config, torch.float16)
    assert clip.image_mean == [0.485, 0.456, 0.406] and clip.image_std == [0.229, 0.224, 0.225]
    out = clip.encode_image(torch.rand(1, 40, 70, 3))
    assert out.last_hidden_state.shape == (1, 17, 32) and out.image_embeds.shape == (1, 32)
    torch.testing.assert_close(out.image_embeds, out.last_hidden_state[:, 0])  # the class token, after the norm
    assert out.penultimate_hidden_states.shape == (1, 17, 32)


def test_guidance_reaches_the_network_with_comfyuis_default():
    conditions = Hunyuan3DConditions()
    assert conditions.extra_conds(None)["guidance"].tolist() == [5.0]
    assert conditions.extra_conds(None, guidance=3.5)["guidance"].tolist() == [3.5]
    assert conditions.extra_conds(None, guidance=None) == {}


def test_the_turbo_files_guidance_changes_the_output(files):
    model, _, _ = load_checkpoint(files["turbo"], output_clip=False)
    network = model.model.diffusion_model
    x, t, ctx = torch.randn(1, 64, 6), torch.tensor([0.4]), torch.randn(1, 5, 32)
    with torch.no_grad():
        assert not torch.allclose(network(x, t, ctx, guidance=torch.tensor([5.0])),
                                  network(x, t, ctx, guidance=torch.tensor([1.0])))


def test_dit21_head_split_is_the_releases_per_head_cut():
    torch.manual_seed(0)
    attention = _SelfAttention(32, 4, False, torch.nn, {})
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 5, 32)
    d = 8
    packed = torch.cat([attention.to_q(x), attention.to_k(x), attention.to_v(x)], dim=-1)  # [B, N, 96]
    heads = []
    for h in range(4):  # head h reads [q | k | v][24 h : 24 (h + 1)] as (query, key, value)
        chunk = packed[..., 3 * d * h:3 * d * (h + 1)]
        q, k, v = chunk[..., :d], chunk[..., d:2 * d], chunk[..., 2 * d:]
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * attention.q_norm.weight
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * attention.k_norm.weight
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
        heads.append(weights @ v)
    expected = attention.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(attention(x), expected, atol=1e-5, rtol=1e-5)


def test_dit21_mixture_of_experts_routes_the_top_two_by_gate_score():
    torch.manual_seed(1)
    moe = _MixtureOfExperts(16, 4, torch.nn, {})
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 3, 16)
    expected = torch.zeros_like(x)
    for b in range(2):
        for n in range(3):
            token = x[b, n]
            scores = torch.softmax(moe.gate.weight @ token, dim=-1)
            top = torch.argsort(scores, descending=True)[:2]
            expected[b, n] = sum(scores[e] * moe.experts[int(e)](token) for e in top) + moe.shared_experts(token)
    torch.testing.assert_close(moe(x), expected, atol=1e-5, rtol=1e-5)


def test_dit21_config_needs_blocks():
    from comfy_core.families.hunyuan3d.dit import Hunyuan3DConfigError

    with pytest.raises(Hunyuan3DConfigError, match="no blocks"):
        Hunyuan3D21DiTConfig.detect_from_weights({"x_embedder.weight": torch.empty(64, 64)})


def test_fourier_features_are_the_point_then_sines_and_cosines():
    p = torch.tensor([[0.5, -0.25, 1.0]])
    freqs = 2.0 ** torch.arange(8)
    scaled = torch.cat([p[0, c] * freqs for c in range(3)])  # coordinate major
    torch.testing.assert_close(fourier_features(p, 8)[0], torch.cat([p[0], scaled.sin(), scaled.cos()]))


def test_vae_grid_order_and_chunking(files):
    _, _, vae = load_checkpoint(files["v20"], output_clip=False)
    latent = torch.randn(1, 64, 10)
    grid = vae.decode(latent, vae_options={"num_chunks": 1000, "octree_resolution": 16})
    assert grid.shape == (1, 17, 17, 17)
    module = vae.model
    with torch.no_grad():
        tokens = module.latent_set(latent.to(module.post_kl.weight.dtype))
        block = module.geo_decoder.cross_attn_decoder
        k, v = block.attn.keys_values(block.ln_2(tokens))
        axis = torch.linspace(-1.01, 1.01, 17)
        for (i, j, l) in ((0, 0, 0), (3, 7, 11), (16, 2, 9)):  # (x, y, z) indices
            point = torch.stack([axis[i], axis[j], axis[l]]).view(1, 1, 3).to(k.dtype)
            logit = module.query(point, k, v).float()
            expected = ((logit + 1) / 2).clamp(0, 1)
            torch.testing.assert_close(grid[0, l, j, i], expected[0, 0], atol=1e-3, rtol=1e-3)  # indexed (z, y, x)
    # the chunk size does not change a point's value
    small = module.decode(latent.to(module.post_kl.weight.dtype), num_chunks=7, octree_resolution=16)
    large = module.decode(latent.to(module.post_kl.weight.dtype), num_chunks=10 ** 6, octree_resolution=16)
    torch.testing.assert_close(small, large)
    with pytest.raises(ShapeVaeInputError, match=r"\[B, 64, N\]"):
        vae.decode(torch.randn(1, 32, 10))


def test_chunks_are_capped_by_the_memory_budget():
    from comfy_core.families.hunyuan3d.shape_vae import CHUNK_BUDGET_BYTES

    vae = ShapeVAE(ShapeVAEConfig(width=64, layers=0, heads=16, decoder_heads=16))
    assert vae.chunk_points(8000, 64) == 8000
    assert vae.chunk_points(10 ** 9, 3072) == CHUNK_BUDGET_BYTES // ((16 * 3072 + 6 * 64) * 4)
    released = ShapeVAE.chunk_points(type("V", (), {"config": ShapeVAEConfig()})(), 8000, 3072)
    assert 4000 < released < 8000  # the released decoder's 8000-point chunks are capped under 1 GiB


def test_blocky_mesh_of_one_voxel_is_a_cube():
    grid = torch.zeros(3, 3, 3)
    grid[1, 1, 1] = 1.0
    vertices, faces = blocky_mesh(grid, 0.5)
    assert vertices.shape == (24, 3) and faces.shape == (12, 3)
    # the voxel's corners (1..2 on each axis) centred on 1.5 and scaled by 1.5: 1/3 and -1/3
    assert sorted(set(vertices.flatten().tolist())) == pytest.approx([-1 / 3, 1 / 3])
    corners = {tuple(round(c, 4) for c in v) for v in vertices.tolist()}
    assert len(corners) == 8
    # each quad's two triangles share the diagonal (0, 2)
    assert torch.equal(faces[0], torch.tensor([0, 1, 2])) and torch.equal(faces[1], torch.tensor([0, 2, 3]))
    # the first direction ComfyUI emits is +x (index order z, y, x): all four corners at x = 2 -> 1/3
    assert torch.allclose(vertices[:4, 0], torch.full((4,), 1 / 3))
    v, f = blocky_mesh(torch.zeros(2, 2, 2), 0.5)
    assert v.shape == (1, 3) and f.shape == (1, 3)  # ComfyUI's placeholder for an empty grid


def test_surface_net_vertices_sit_on_the_interpolated_surface():
    z, y, x = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), torch.arange(16.0), indexing="ij")
    radius = ((z - 8) ** 2 + (y - 8) ** 2 + (x - 8) ** 2).sqrt()
    grid = (1 - radius / 10).clamp(0, 1)  # 0.6 at radius 4
    vertices, faces = surface_net(grid, 0.6)
    assert vertices.shape[0] > 50 and faces.shape[0] > 50
    assert int(faces.max()) < vertices.shape[0] and int(faces.min()) >= 0
    # back to padded grid coordinates: (x, y, z) * 8 + 8, one padding voxel -> the grid's
    points = torch.flip(vertices * 8 + 8, dims=[1]) - 1  # (z, y, x)
    distance = ((points - 8) ** 2).sum(dim=1).sqrt()
    assert (distance - 4).abs().max() < 0.3
    # every triangle's normal points away from the centre (outward winding from inside-minus-outside)
    tri = points[faces]
    normal = torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    outward = (normal * (tri.mean(dim=1) - 8)).sum(dim=1)
    assert (outward > 0).all() or (outward < 0).all()
    assert surface_net(torch.zeros(4, 4, 4), 0.5)[0].shape == (0, 3)


def test_a_shape_vae_file_alone_loads_as_vaeloader_does(files, tmp_path):
    from comfy_core.families.hunyuan3d.vae_patcher import ShapeVaePatcher
    from comfy_core.loading import load_vae

    state = {k[len("vae."):]: v for k, v in tiny.checkpoint_state_dict("2.0", seed=5, dtype=torch.float16).items()
             if k.startswith("vae.")}
    state["encoder.input_proj.weight"] = torch.zeros(64, 54)  # the encoder half ComfyUI's files carry: unread
    path = save(state, tmp_path / "shape_vae.safetensors")
    alone = load_vae(path)
    assert isinstance(alone, ShapeVaePatcher)
    _, _, packed = load_checkpoint(files["v20"], output_clip=False)
    latent = torch.randn(1, 64, 6)
    options = {"num_chunks": 1000, "octree_resolution": 16}
    torch.testing.assert_close(alone.decode(latent, vae_options=options), packed.decode(latent, vae_options=options),
                               atol=1e-4, rtol=1e-4)


def test_a_bare_dit_file_loads_as_unetloader_does(files, tmp_path):
    """ComfyUI's UNETLoader takes the DiT alone (`load_diffusion_model_state_dict` finds `latent_in.weight`
    without a prefix) or a whole checkpoint; the same network either way."""
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny.checkpoint_state_dict("2.1", seed=5, dtype=torch.float16)
    bare = save({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")},
                tmp_path / "hunyuan3d_dit_v2_1.safetensors")
    alone = load_diffusion_model(bare)
    whole = load_diffusion_model(files["v21"])
    packed, _, _ = load_checkpoint(files["v21"], output_clip=False)
    assert alone.model.family.name == whole.model.family.name == "hunyuan3d2_1"
    x, t, ctx = torch.randn(2, 64, 6), torch.tensor([0.3, 0.6]), torch.randn(2, 5, 32)
    with torch.no_grad():
        want = packed.model.diffusion_model(x, t, ctx)
        torch.testing.assert_close(alone.model.diffusion_model(x, t, ctx), want)
        torch.testing.assert_close(whole.model.diffusion_model(x, t, ctx), want)
