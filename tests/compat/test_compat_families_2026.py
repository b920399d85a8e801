"""Today's (2026) ComfyUI names of families built here that packs import (survey 2026-12-07):
`comfy.ldm.lightricks.model`'s LTX-2 RoPE enums, frequency grids and `Timesteps`,
`comfy.ldm.lightricks.av_model.LTXAVModel`, `comfy.model_base.{Anima, CosmosPredict2,
HunyuanVideoI2V, HunyuanVideoSkyreelsI2V}`, `comfy.latent_formats.HunyuanVideo` (and the other
formats of our families), `comfy.ldm.cosmos.predict2` over the Anima network (comfyui-tooling-nodes'
regional-prompt attention patch), `comfy.sd1_clip.safe_load_embed_zip` with `load_embed`'s fallback,
and `comfy.diffusers_load.load_diffusers`."""
from __future__ import annotations

import math
import zipfile
from functools import partial

import numpy as np
import pytest
import torch

from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_anima import ADAPTER_WIDTH, TINY_BLOCKS, tiny_anima_state_dict
from tests.fixtures.template_models_hunyuan_video import tiny_hunyuan_video_state_dict


# --- comfy.ldm.lightricks.model ---------------------------------------------------------------------

def _numpy_grid(theta: float, axes: int, dim: int) -> np.ndarray:
    """LTX-2's frequency grid written from its definition: theta ** linspace(log_theta 1, log_theta
    theta) in float64, times pi / 2."""
    steps = dim // (2 * axes)
    exponents = np.linspace(np.log(1.0) / np.log(theta), np.log(theta) / np.log(theta), steps, dtype=np.float64)
    return (np.power(theta, exponents) * math.pi / 2).astype(np.float32)


@pytest.mark.parametrize("theta, axes, dim", [(10000.0, 3, 4096), (10000.0, 1, 3840), (2000.0, 3, 100)])
def test_generate_freq_grid_np_is_the_float64_grid(session, theta, axes, dim):
    from comfy.ldm.lightricks.model import generate_freq_grid_np

    grid = generate_freq_grid_np(theta, axes, dim)
    assert grid.dtype == torch.float32 and grid.device.type == "cpu" and grid.shape == (dim // (2 * axes),)
    torch.testing.assert_close(grid, torch.from_numpy(_numpy_grid(theta, axes, dim)), rtol=1.2e-7, atol=0)
    assert generate_freq_grid_np(theta, axes, dim, "cpu") is generate_freq_grid_np(theta, axes, dim, "cpu")


def test_generate_freq_grid_pytorch_is_the_float32_twin(session):
    from comfy.ldm.lightricks.model import generate_freq_grid_pytorch

    grid = generate_freq_grid_pytorch(10000.0, 3, 2048, torch.device("cpu"))
    assert grid.dtype == torch.float32 and grid.shape == (2048 // 6,)
    torch.testing.assert_close(grid, torch.from_numpy(_numpy_grid(10000.0, 3, 2048)), rtol=2e-5, atol=0)


def test_rope_enums_read_network_configs(session):
    from comfy.ldm.lightricks.model import LTXFrequenciesPrecision, LTXRopeType

    assert LTXRopeType.from_dict({"rope_type": "split"}) is LTXRopeType.SPLIT
    assert LTXRopeType.from_dict({}) is LTXRopeType.INTERLEAVED
    assert LTXRopeType.from_dict({}, default="split") is LTXRopeType.SPLIT
    assert LTXRopeType.SPLIT == "split" and LTXRopeType.KEY == "rope_type"  # str enums
    assert LTXFrequenciesPrecision.from_dict({"frequencies_precision": "float64"}) is LTXFrequenciesPrecision.FLOAT64
    assert LTXFrequenciesPrecision.from_dict({"rope_type": "split"}) is LTXFrequenciesPrecision.FLOAT32
    with pytest.raises(ValueError):
        LTXRopeType.from_dict({"rope_type": "diagonal"})


@pytest.mark.parametrize("flip, shift, scale", [(True, 0, 1), (False, 1, 2)])
def test_timesteps_is_the_sinusoidal_embedding(session, flip, shift, scale):
    from comfy.ldm.lightricks.model import Timesteps

    t = np.array([0.0, 1.5, 25.0])  # float32 angles stay exact to ~1e-5
    half = 128
    freqs = np.exp(-math.log(10000) * np.arange(half) / (half - shift))
    angles = scale * t[:, None] * freqs[None]
    parts = [np.cos(angles), np.sin(angles)] if flip else [np.sin(angles), np.cos(angles)]
    want = torch.from_numpy(np.concatenate(parts, axis=1).astype(np.float32))
    module = Timesteps(num_channels=256, flip_sin_to_cos=flip, downscale_freq_shift=shift, scale=scale)
    assert isinstance(module, torch.nn.Module) and not list(module.parameters())
    torch.testing.assert_close(module(torch.tensor(t, dtype=torch.float32)), want, rtol=1e-5, atol=1e-4)
    assert Timesteps(7, True, 0)(torch.tensor([3.0])).shape == (1, 7)  # odd widths are zero-padded


def test_timestep_embedding_has_comfyuis_constructor(session):
    from comfy.ldm.lightricks.model import TimestepEmbedding

    from comfy_core.families.ltxv.dit import TimestepEmbedder

    module = TimestepEmbedding(in_channels=8, time_embed_dim=6, out_dim=4, cond_proj_dim=3)
    assert (module.linear_1.in_features, module.linear_1.out_features, module.linear_2.out_features) == (8, 6, 4)
    sample, condition = torch.randn(2, 8), torch.randn(2, 3)
    with torch.no_grad():
        hidden = sample + condition @ module.cond_proj.weight.T
        want = module.linear_2(torch.nn.functional.silu(module.linear_1(hidden)))
        assert torch.equal(module(sample, condition), want)
    assert TimestepEmbedding(4, 4, sample_proj_bias=False).linear_1.bias is None
    assert isinstance(TimestepEmbedder(8, torch.nn, {}), TimestepEmbedding)  # the LTXV network's


def test_early_2026_rope_layouts(session):
    from comfy.ldm.lightricks.model import interleaved_freqs_cis, split_freqs_cis

    freqs = torch.tensor([[[0.1, 0.2], [0.3, 0.4]]])  # [B=1, T=2, F=2]
    cos, sin = interleaved_freqs_cis(freqs, 2)
    assert cos.shape == (1, 2, 6)
    torch.testing.assert_close(cos[0, 1], torch.tensor([1.0, 1.0] + [math.cos(0.3)] * 2 + [math.cos(0.4)] * 2))
    torch.testing.assert_close(sin[0, 0], torch.tensor([0.0, 0.0] + [math.sin(0.1)] * 2 + [math.sin(0.2)] * 2))
    cos, sin = split_freqs_cis(freqs, 2, num_attention_heads=2)  # 4 angles -> 2 heads x 2, [B, H, T, 2]
    assert cos.shape == (1, 2, 2, 2)
    torch.testing.assert_close(cos[0, 0, 1], torch.tensor([1.0, 1.0]))  # head 0: the padding
    torch.testing.assert_close(sin[0, 1, 1], torch.tensor([math.sin(0.3), math.sin(0.4)]))


def test_av_model_is_the_ltx2_network(session):
    from comfy.ldm.lightricks import av_model

    from comfy_core.families.ltx2 import dit

    assert av_model.LTXAVModel is dit.LTXAVModel and av_model.LTXAVModel.__name__ == "LTXAVModel"
    assert av_model.BasicAVTransformerBlock is dit.BasicAVTransformerBlock


# --- comfy.model_base / comfy.latent_formats over loaded models -------------------------------------

@pytest.fixture(scope="module")
def anima(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("anima") / "anima.safetensors"
    return load_diffusion_model(save(tiny_anima_state_dict(seed=2), path))


def _hunyuan_video(folder, in_channels):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_hunyuan_video_state_dict(in_channels=in_channels)
    return load_diffusion_model(save(state, folder / f"hunyuan_video_{in_channels}.safetensors"))


def test_an_anima_model_is_comfyuis_anima_not_a_cosmos_predict2(session, anima):
    import comfy.model_base as mb

    model = anima.model
    assert type(model) is mb.Anima and isinstance(model, mb.Anima) and isinstance(model, mb.BaseModel)
    assert not isinstance(model, mb.CosmosPredict2)  # ComfyUI's Anima is a BaseModel of its own
    assert issubclass(type(model), (mb.Anima, mb.CosmosPredict2))  # comfyui-tooling-nodes' check


def test_hunyuan_video_i2v_models_are_their_comfyui_classes(session, tmp_path):
    import comfy.latent_formats
    import comfy.model_base as mb

    i2v = _hunyuan_video(tmp_path, 33).model  # latent + image latent + mask
    assert type(i2v) is mb.HunyuanVideoI2V and isinstance(i2v, mb.HunyuanVideo)
    assert not isinstance(i2v, mb.HunyuanVideoSkyreelsI2V)
    skyreels = _hunyuan_video(tmp_path, 32).model  # latent + image latent
    assert type(skyreels) is mb.HunyuanVideoSkyreelsI2V and isinstance(skyreels, mb.HunyuanVideo)
    assert not isinstance(skyreels, mb.HunyuanVideoI2V)
    t2v = _hunyuan_video(tmp_path, 16).model
    assert type(t2v) is mb.HunyuanVideo and not isinstance(t2v, (mb.HunyuanVideoI2V, mb.HunyuanVideoSkyreelsI2V))
    for model in (i2v, skyreels, t2v):
        assert isinstance(model.latent_format, comfy.latent_formats.HunyuanVideo)


def test_latent_formats_of_our_families_have_comfyuis_values(session):
    import comfy.latent_formats as lf

    expected = {  # ComfyUI's latent_channels, latent_dimensions, scale_factor (comfy/latent_formats.py)
        "HunyuanVideo": (16, 3, 0.476986), "HunyuanVideo15": (32, 3, 1.03682),
        "Hunyuan3Dv2": (64, 1, 0.9990943042622529), "Hunyuan3Dv2_1": (64, 1, 1.0039506158752403),
        "Hunyuan3Dv2mini": (64, 1, 1.0188137142395404), "StableAudio1": (64, 1, 1.0), "StableAudio3": (256, 1, 1.0),
        "ACEAudio15": (64, 1, 1.0), "Flux2": (128, 2, 1.0), "ChromaRadiance": (3, 2, 1.0),
        "HiDreamO1Pixel": (3, 2, 1.0), "SeedVR2": (16, 3, 1.0), "MiniMaxMusic3": (128, 1, 1.0),
        "MiniMaxH3AV": (32, 3, 1.0), "QwenImage21": (64, 2, 1.0),
    }
    for name, values in expected.items():
        fmt = getattr(lf, name)()
        assert isinstance(fmt, lf.LatentFormat), name
        assert (fmt.latent_channels, fmt.latent_dimensions, fmt.scale_factor) == values, name
    assert lf.HunyuanVideo().temporal_downscale_ratio == 4
    assert (lf.CogVideoX().latent_channels, lf.CogVideoX().latent_dimensions) == (16, 3)
    assert isinstance(lf.HiDreamO1Pixel(), lf.ChromaRadiance)  # a ChromaRadiance subclass there too


# --- comfy.ldm.cosmos.predict2 over the Anima network -------------------------------------------------

def _regional_forward(calls, self, x, context=None, rope_emb=None, transformer_options=None):
    """comfyui-tooling-nodes' replacement of the Cosmos attention's forward (region.py), reduced
    to what it calls on the module."""
    calls.append(context is None)
    q, k, v = self.compute_qkv(x, context, rope_emb=rope_emb)
    return self.compute_attention(q, k, v, transformer_options=transformer_options or {})


def test_cosmos_predict2_names_are_the_anima_networks_modules(session, anima):
    from comfy.ldm.cosmos import predict2

    network = anima.model.diffusion_model
    assert isinstance(network, predict2.MiniTrainDIT) and network.patch_spatial == 2
    attentions = [(n, m) for n, m in network.named_modules()
                  if ("cross_attn" in n or "self_attn" in n) and isinstance(m, predict2.Attention)]
    assert [n for n, _ in attentions] == [f"blocks.{i}.{kind}" for i in range(TINY_BLOCKS)
                                          for kind in ("self_attn", "cross_attn")]
    assert all(isinstance(b, predict2.Block) for b in network.blocks)
    assert isinstance(network.final_layer, predict2.FinalLayer) and isinstance(network.x_embedder, predict2.PatchEmbed)
    assert isinstance(network.blocks[0].mlp, predict2.GPT2FeedForward)
    assert isinstance(network.t_embedder[0], predict2.Timesteps)


def test_a_forward_over_compute_qkv_and_compute_attention_is_the_attention(session, anima):
    """The regional-prompt patch replaces each attention's `forward` through the patcher's object
    patches (`diffusion_model.blocks.N.self_attn.forward`); rebuilt from `compute_qkv` and
    `compute_attention`, the network's output is unchanged and every attention went through it."""
    from comfy.ldm.cosmos.predict2 import Attention

    patcher = anima.clone()
    network = patcher.get_model_object("diffusion_model")
    calls: list[bool] = []
    for name, module in network.named_modules():
        if isinstance(module, Attention):
            patcher.add_object_patch(f"diffusion_model.{name}.forward", partial(_regional_forward, calls, module))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 16, 1, 8, 8, generator=gen)
    context = torch.randn(1, 7, ADAPTER_WIDTH, generator=gen)
    sigma = torch.tensor([0.6])
    with torch.no_grad():
        with anima.applied("cpu") as plain:
            want = plain.diffusion_model(x, sigma, context)
        with patcher.applied("cpu") as patched:
            got = patched.diffusion_model(x, sigma, context)
    assert calls == [True, False] * TINY_BLOCKS  # self-, then cross-attention, in every block
    assert torch.equal(got, want)
    assert network.blocks[0].self_attn.forward.__func__ is Attention.forward  # restored after the run


def test_attention_hooks_run_in_compute_qkv(session, anima):
    from comfy.ldm.cosmos.predict2 import Attention

    attention = anima.model.diffusion_model.blocks[0].cross_attn
    assert isinstance(attention, Attention)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, attention.q_proj.in_features, generator=gen).to(attention.q_proj.weight.dtype)
    context = torch.randn(2, 3, ADAPTER_WIDTH, generator=gen).to(x.dtype)
    seen = []

    def attn2_patch(q, k, v, pe=None, attn_mask=None, extra_options=None):
        seen.append((extra_options["n_heads"], extra_options["dim_head"]))
        return {"k": k * 0, "v": v * 0}

    options = {"patches": {"attn2_patch": [attn2_patch]}}
    with torch.no_grad():
        q, k, v = attention.compute_qkv(x, context, transformer_options=options)
        out = attention(x, context, transformer_options=options)
    assert seen == [(attention.n_heads, attention.head_dim)] * 2
    assert q.shape == (2, 5, attention.n_heads, attention.head_dim) and k.shape[1] == 3
    assert torch.count_nonzero(v) == 0 and torch.count_nonzero(out) == 0  # zero values attend to zero


# --- comfy.sd1_clip.safe_load_embed_zip / load_embed -------------------------------------------------

class _TrainingStep:  # a class outside torch.load's allow-list, as A1111's saved hypernetwork/step objects
    def __init__(self, step: int) -> None:
        self.step = step


def _a1111_embedding(path, vectors):
    torch.save({"string_to_token": {"*": 265}, "string_to_param": {"*": vectors}, "name": "style",
                "step": _TrainingStep(500)}, str(path))
    return path


def test_safe_load_embed_zip_reads_a1111_pickles_without_unpickling(session, tmp_path):
    from comfy.sd1_clip import safe_load_embed_zip

    sd1 = torch.randn(3, 768)
    got = safe_load_embed_zip(_a1111_embedding(tmp_path / "sd1.pt", sd1))
    assert torch.equal(got, sd1)
    sd2 = torch.randn(2, 1024)
    assert torch.equal(safe_load_embed_zip(_a1111_embedding(tmp_path / "sd2.pt", sd2)), sd2)


def test_safe_load_embed_zip_takes_the_last_large_record(session, tmp_path):
    from comfy.sd1_clip import safe_load_embed_zip

    first, second = torch.randn(2, 768), torch.randn(1, 768)
    path = tmp_path / "hand.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("emb/data.pkl", b"not read")
        archive.writestr("emb/data/0", first.numpy().tobytes())
        archive.writestr("emb/data/1", second.numpy().tobytes())
        archive.writestr("emb/data/2", torch.ones(5).numpy().tobytes())  # under 768 values: skipped
    assert torch.equal(safe_load_embed_zip(path), second)
    empty = tmp_path / "empty.pt"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("emb/data.pkl", b"")
    assert safe_load_embed_zip(empty) is None
    odd = tmp_path / "odd.pt"
    with zipfile.ZipFile(odd, "w") as archive:
        archive.writestr("emb/data/0", torch.ones(1000).numpy().tobytes())
    with pytest.raises(ValueError, match="1024"):
        safe_load_embed_zip(odd)


def test_load_embed_falls_back_to_the_zip_reader(session, tmp_path):
    from comfy.sd1_clip import load_embed

    folder = tmp_path / "embeddings"
    folder.mkdir()
    vectors = torch.randn(2, 768)
    _a1111_embedding(folder / "legacy.pt", vectors)
    with pytest.raises(Exception):
        torch.load(str(folder / "legacy.pt"), weights_only=True)  # what makes the fallback needed
    assert torch.equal(load_embed("legacy", str(folder), 768), vectors)
    plain = torch.randn(4, 768)
    torch.save({"string_to_param": {"*": plain}}, str(folder / "plain.pt"))
    assert torch.equal(load_embed("plain", [str(folder)], 768), plain)
    (folder / "broken.pt").write_bytes(b"neither a pickle nor a zip")
    assert load_embed("broken", str(folder), 768) is None
    assert load_embed("missing", str(folder), 768) is None


# --- comfy.diffusers_load -----------------------------------------------------------------------------

def test_load_diffusers_loads_a_diffusers_folder(session, tmp_path):
    import comfy.diffusers_load
    import comfy.model_base

    from tests.fixtures.split_files import split_state_dict, write_diffusers_folder

    folder = write_diffusers_folder(split_state_dict("sd1"), "sd1", tmp_path / "pipeline")
    names = ["missing.bin", "diffusion_pytorch_model.safetensors"]
    assert comfy.diffusers_load.first_file(str(folder / "unet"), names) == str(folder / "unet" / names[1])
    assert comfy.diffusers_load.first_file(str(folder / "unet"), ["missing.bin"]) is None
    embeddings = tmp_path / "embeddings"
    embeddings.mkdir()
    unet, clip, vae = comfy.diffusers_load.load_diffusers(str(folder), embedding_directory=str(embeddings))
    assert isinstance(unet.model, comfy.model_base.BaseModel) and unet.model.family.name == "sd1"
    assert clip is not None and vae is not None
    width = clip.encode_from_tokens(clip.tokenize("a cat")).shape[-1]
    vector = torch.randn(1, width)
    torch.save({"string_to_param": {"*": vector}}, str(embeddings / "style.pt"))
    tokens = clip.tokenize("a embedding:style cat")
    found = [t for row in next(iter(tokens.values())) for t, *_ in row if isinstance(t, torch.Tensor)]
    assert len(found) == 1 and torch.equal(found[0].reshape(vector.shape), vector)  # read from embedding_directory
    pixels = torch.rand(1, 64, 64, 3)
    assert vae.decode(vae.encode(pixels)).shape == pixels.shape
    only_unet = comfy.diffusers_load.load_diffusers(str(folder), output_vae=False, output_clip=False)
    assert only_unet[1] is None and only_unet[2] is None and only_unet[0].model.family.name == "sd1"


# --- comfy.ldm.aura (AuraFlow: not implemented here) ---------------------------------------------------

def test_aura_mmdit_classes_import_and_subclass_but_refuse_to_build(session):
    # RES4LYF subclasses these at import; building one names the missing family.
    from comfy.ldm.aura.mmdit import DiTBlock, MMDiT, find_multiple, modulate
    from compat.unsupported_networks import UnsupportedNetworkError

    class ReMMDiT(MMDiT):  # what the pack does
        pass

    assert issubclass(ReMMDiT, torch.nn.Module)
    with pytest.raises(UnsupportedNetworkError, match="AuraFlow"):
        ReMMDiT(dim=8)
    with pytest.raises(UnsupportedNetworkError, match="DiTBlock"):
        DiTBlock()
    assert find_multiple(10, 4) == 12 and find_multiple(12, 4) == 12
    x, shift, scale = torch.randn(2, 3, 4), torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(modulate(x, shift, scale), x * (1 + scale[:, None]) + shift[:, None])
