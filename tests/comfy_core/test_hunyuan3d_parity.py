"""Hunyuan3D side by side with ComfyUI 0.3.64's own modules on the same tiny random weights (the
real key layouts, tests/fixtures/template_models_hunyuan3d.py): the 2.0 DiT (with its guidance
embedding) and the 2.1 DiT (U-ViT skips, mixture of experts) forward within 1e-4, the ShapeVAE's
decoded occupancy grid within 1e-4 (through ComfyUI's `VAE.decode` output rule and axis moves),
the DINOv2 image encoder's `encode_image` outputs, and VoxelToMesh's two algorithms (faces equal,
vertices within float rounding).

ComfyUI runs in a subprocess from its checkout (`COMFYUI_DIR`, default /work/scratch/comfyui) with
its own Python (`COMFYUI_PYTHON`, default /work/scratch/packvenv/bin/python); without them the tests
are skipped. ComfyUI's detection fixes what the tiny widths cannot follow, so its modules are built
with the tiny sizes given explicitly: 2.1's `context_dim` (1024 there), the ShapeVAE's width and
depth (`ShapeVAE()` takes its defaults there), the DINOv2 config (a JSON of the tiny sizes; its
position grid is the release's 37 x 37, which ComfyUI's module fixes; 128 wide, so that our rule
of 64-wide heads gives the JSON's 2). The Hunyuan3D families are loaded on a registry of their own.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.fixtures import template_models_hunyuan3d as tiny

COMFYUI_DIR = Path(os.environ.get("COMFYUI_DIR", "/work/scratch/comfyui"))
COMFYUI_PYTHON = Path(os.environ.get("COMFYUI_PYTHON", "/work/scratch/packvenv/bin/python"))
pytestmark = pytest.mark.skipif(not (COMFYUI_DIR / "comfy" / "ldm" / "hunyuan3d").is_dir()
                                or not COMFYUI_PYTHON.exists(),
                                reason="ComfyUI 0.3.64's checkout or its Python is not here "
                                       "(COMFYUI_DIR / COMFYUI_PYTHON)")

TOKENS, CONTEXT, RESOLUTION, GRID = 24, 17, 12, 14
DINO = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "layer_norm_eps": 1e-6,
        "use_swiglu_ffn": False, "model_type": "dinov2", "image_size": 518, "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225]}

COMFY_SCRIPT = r'''
import json, sys
comfy_dir, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, comfy_dir)
sys.argv = [sys.argv[0], "--cpu"]  # ComfyUI's own flag: no GPU here
import comfy.options
comfy.options.enable_args_parsing()
import torch
from safetensors.torch import load_file, save_file
import comfy.ops, comfy.utils, comfy.model_detection, comfy.clip_vision
from comfy.ldm.hunyuan3d.model import Hunyuan3Dv2
from comfy.ldm.hunyuan3d.vae import ShapeVAE
from comfy.ldm.hunyuan3dv2_1.hunyuandit import HunYuanDiTPlain
from comfy_extras.nodes_hunyuan3d import voxel_to_mesh, voxel_to_mesh_surfnet
ins = load_file(folder + "/inputs.safetensors")
out, report = {}, {}
ops = comfy.ops.disable_weight_init

def strip(sd, prefix):
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}

for name, version in (("v20", "2.0"), ("v21", "2.1")):
    sd = load_file(f"{folder}/{name}.safetensors")
    config = comfy.model_detection.detect_unet_config(sd, "model.")
    report[name] = {k: v for k, v in config.items() if isinstance(v, (int, float, str, bool, type(None)))}
    if version == "2.0":
        net = Hunyuan3Dv2(**config, operations=ops)
    else:
        config["context_dim"] = sd["model.blocks.0.attn2.to_k.weight"].shape[1]  # 1024 in ComfyUI's detection
        net = HunYuanDiTPlain(**config, operations=ops)
    missing, unexpected = net.load_state_dict(strip(sd, "model."), strict=True)
    net.eval()
    with torch.no_grad():
        if version == "2.0":
            out[name] = net(ins["x"], ins["t"], ins["context"], guidance=ins["guidance"], transformer_options={})
        else:
            out[name] = net(ins["x"], ins["t"], ins["context"], transformer_options={})
    vae = ShapeVAE(width=ins["vae_width"].item(), heads=16, num_decoder_layers=ins["vae_layers"].item())
    missing, unexpected = vae.load_state_dict(strip(sd, "vae."), strict=False)
    report[name + "_vae_missing"] = sorted(missing)
    report[name + "_vae_unexpected"] = sorted(unexpected)
    vae.eval()
    with torch.no_grad():
        grid = vae.decode(ins["latent"], num_chunks=1000, octree_resolution=int(ins["resolution"].item()),
                          enable_pbar=False)
    out[name + "_grid"] = torch.clamp((grid + 1.0) / 2.0, min=0.0, max=1.0).movedim(1, -1).contiguous()

clip = comfy.clip_vision.ClipVisionModel(folder + "/dino.json")
clip.load_sd(strip(load_file(folder + "/dino.safetensors"), ""))
for crop in (True, False):
    o = clip.encode_image(ins["image"], crop=crop)
    for key in ("last_hidden_state", "image_embeds", "penultimate_hidden_states"):
        out[f"dino_{crop}_{key}"] = o[key].float().clone()

for i, grid in enumerate(ins["voxels"]):
    for algo, fn in (("basic", voxel_to_mesh), ("surfnet", voxel_to_mesh_surfnet)):
        v, f = fn(grid, threshold=0.6)
        out[f"mesh_{algo}_{i}_v"] = v.float().contiguous()
        out[f"mesh_{algo}_{i}_f"] = f.long().contiguous()
save_file({k: v.contiguous().clone() for k, v in out.items()}, folder + "/outputs.safetensors")
json.dump(report, open(folder + "/report.json", "w"))
'''


def _sphere_grids() -> torch.Tensor:
    """Two occupancy grids [2, 13, 12, 11] (uneven sides): a noisy ball and an off-centre box."""
    gen = torch.Generator().manual_seed(7)
    z, y, x = torch.meshgrid(torch.arange(13.0), torch.arange(12.0), torch.arange(11.0), indexing="ij")
    noise = 0.05 * torch.randn(13, 12, 11, generator=gen)
    ball = 1.0 - ((z - 6) ** 2 + (y - 5.5) ** 2 + (x - 5) ** 2).sqrt() / 6 + noise
    box = ((z > 2) & (z < 9) & (y > 1) & (y < 7) & (x > 3)).float() * 0.9 + 0.05 * torch.rand(13, 12, 11, generator=gen)
    return torch.stack([ball.clamp(0, 1), box])


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hy3d_parity")
    gen = torch.Generator().manual_seed(3)
    inputs = {
        "x": torch.randn(2, tiny.LATENT_CHANNELS, TOKENS, generator=gen),
        "t": torch.tensor([0.3, 0.8]),
        "context": torch.randn(2, CONTEXT, tiny.DINO_WIDTH, generator=gen),
        "guidance": torch.tensor([5.0, 3.5]),
        "latent": torch.randn(1, tiny.LATENT_CHANNELS, TOKENS, generator=gen),
        "resolution": torch.tensor(RESOLUTION), "vae_width": torch.tensor(tiny.VAE_WIDTH),
        "vae_layers": torch.tensor(tiny.VAE_LAYERS),
        "image": torch.rand(1, 300, 410, 3, generator=gen),
        "voxels": _sphere_grids(),
    }
    save_file(inputs, str(folder / "inputs.safetensors"))
    save_file(tiny.checkpoint_state_dict("2.0", seed=11, guidance=True), str(folder / "v20.safetensors"))
    save_file(tiny.checkpoint_state_dict("2.1", seed=12), str(folder / "v21.safetensors"))
    from comfy_core.models.dinov2 import Dinov2Config, Dinov2Model

    dino = tiny._randomised(Dinov2Model(Dinov2Config(hidden_size=128, num_layers=2, num_heads=2, position_grid=37)),
                            torch.Generator().manual_seed(13))
    save_file(dino, str(folder / "dino.safetensors"))
    (folder / "dino.json").write_text(json.dumps(DINO))
    (folder / "comfy_side.py").write_text(COMFY_SCRIPT)
    run = subprocess.run([str(COMFYUI_PYTHON), str(folder / "comfy_side.py"), str(COMFYUI_DIR), str(folder)],
                         cwd=str(COMFYUI_DIR), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return folder, inputs, load_file(str(folder / "outputs.safetensors")), \
        json.loads((folder / "report.json").read_text())


def _load(path: Path):
    from comfy_core.families import FamilyRegistry
    from comfy_core.families import hunyuan3d
    from comfy_core.families.hunyuan3d import mini, v21
    from comfy_core.loading import load_checkpoint

    registry = FamilyRegistry([hunyuan3d.definition(), mini.definition(), v21.definition()])
    return load_checkpoint(path, output_clip=False, registry=registry)


@pytest.mark.parametrize("name", ["v20", "v21"])
def test_dit_forward_matches_comfyui(side_by_side, name):
    folder, inputs, theirs, report = side_by_side
    model, _, _ = _load(folder / f"{name}.safetensors")
    network = model.model.diffusion_model
    with torch.no_grad():
        if name == "v20":
            ours = network(inputs["x"], inputs["t"], inputs["context"], guidance=inputs["guidance"])
        else:
            ours = network(inputs["x"], inputs["t"], inputs["context"])
    assert ours.shape == theirs[name].shape
    torch.testing.assert_close(ours, theirs[name], atol=1e-4, rtol=1e-4)
    assert report[name]["image_model"] == ("hunyuan3d2" if name == "v20" else "hunyuan3d2_1")


@pytest.mark.parametrize("name", ["v20", "v21"])
def test_vae_decode_grid_matches_comfyui(side_by_side, name):
    folder, inputs, theirs, report = side_by_side
    assert report[name + "_vae_unexpected"] == []
    assert all(k.startswith("encoder.") for k in report[name + "_vae_missing"])  # the encoder half, unused
    _, _, vae = _load(folder / f"{name}.safetensors")
    ours = vae.decode(inputs["latent"], vae_options={"num_chunks": 1000, "octree_resolution": RESOLUTION})
    assert ours.shape == (1, RESOLUTION + 1, RESOLUTION + 1, RESOLUTION + 1)
    torch.testing.assert_close(ours, theirs[name + "_grid"], atol=1e-4, rtol=1e-4)
    assert 0 < float((ours > 0.6).float().mean()) < 1  # a surface crosses the grid (the test sees something)


@pytest.mark.parametrize("crop", [True, False])
def test_dinov2_clip_vision_matches_comfyui(side_by_side, crop):
    from comfy_core.clip_vision.load import load_clip_vision

    folder, inputs, theirs, _ = side_by_side
    clip = load_clip_vision(folder / "dino.safetensors", torch.float16)
    assert clip.image_size == 518 and clip.config.kind == "dinov2"
    out = clip.encode_image(inputs["image"], crop=crop)
    for key in ("last_hidden_state", "image_embeds", "penultimate_hidden_states"):
        torch.testing.assert_close(out[key], theirs[f"dino_{crop}_{key}"], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("algorithm", ["basic", "surfnet"])
def test_voxel_to_mesh_matches_comfyui(side_by_side, algorithm):
    from comfy_core.families.hunyuan3d.voxel_mesh import blocky_mesh, surface_net

    _, inputs, theirs, _ = side_by_side
    mesh = blocky_mesh if algorithm == "basic" else surface_net
    for i, grid in enumerate(inputs["voxels"]):
        vertices, faces = mesh(grid, 0.6)
        assert faces.shape[0] > 0
        assert torch.equal(faces, theirs[f"mesh_{algorithm}_{i}_f"])
        torch.testing.assert_close(vertices, theirs[f"mesh_{algorithm}_{i}_v"], atol=1e-6, rtol=0)
