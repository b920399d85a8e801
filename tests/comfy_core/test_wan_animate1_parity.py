"""Wan 2.2 Animate side by side with ComfyUI 0.3.64's own `comfy/ldm/wan/model_animate.py` on the same
tiny random weights in the release's key layout (tests/fixtures/wan_animate1_files.py): ComfyUI's
detection (`model_type` "animate"), the motion encoder's codes, the face encoder's tokens and the
whole network's output (pose and face; a short face video padded to the latent's frames with more
pose frames than fit; neither) within 1e-4.

ComfyUI runs in a subprocess from its checkout (`COMFYUI_DIR`, default /work/scratch/comfyui) with
its own Python (`COMFYUI_PYTHON`, default /work/scratch/packvenv/bin/python); without them the tests
are skipped. ComfyUI's Wan detection fixes the text width (umT5's 4096) and its image embedding takes
1280 wide CLIP states: the tiny text width is given to its constructor, the tiny file's CLIP width is
1280. ComfyUI's StyleGAN blur kernels are buffers its state dict names; they are constants (the
files need not carry them), so its load is checked to miss nothing else.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from comfy_core.families.wan.animate import AnimateWanModel
from comfy_core.families.wan.dit import WanConfig
from tests.fixtures.wan_animate1_files import tiny_animate_state_dict

COMFYUI_DIR = Path(os.environ.get("COMFYUI_DIR", "/work/scratch/comfyui"))
COMFYUI_PYTHON = Path(os.environ.get("COMFYUI_PYTHON", "/work/scratch/packvenv/bin/python"))
pytestmark = pytest.mark.skipif(not (COMFYUI_DIR / "comfy" / "ldm" / "wan" / "model_animate.py").is_file()
                                or not COMFYUI_PYTHON.exists(),
                                reason="ComfyUI 0.3.64's checkout or its Python is not here "
                                       "(COMFYUI_DIR / COMFYUI_PYTHON)")

TOL = 1e-4
TEXT, CLIP, LAYERS = 32, 1280, 10

COMFY_SCRIPT = r'''
import json, sys
comfy_dir, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, comfy_dir)
sys.argv = [sys.argv[0], "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import torch
from safetensors.torch import load_file, save_file
import comfy.ops, comfy.model_detection
from comfy.ldm.wan.model_animate import AnimateWanModel
sd = load_file(folder + "/animate.safetensors")
ins = load_file(folder + "/inputs.safetensors")
config = comfy.model_detection.detect_unet_config(sd, "")
report = {"config": {k: v for k, v in config.items() if isinstance(v, (int, float, str, bool, type(None)))}}
config.pop("image_model", None)
net = AnimateWanModel(**config, text_dim=int(ins["text_dim"].item()), operations=comfy.ops.disable_weight_init)
missing, unexpected = net.load_state_dict(sd, strict=False)
report["missing"], report["unexpected"] = sorted(missing), sorted(unexpected)
net.eval()
out = {}
with torch.no_grad():
    out["motion"] = net.motion_encoder.get_motion(ins["faces_a"][0].movedim(1, 0))
    out["face_tokens"] = net.face_encoder(ins["motion_codes"])
    out["full"] = net(ins["x"], ins["t"], ins["context"], clip_fea=ins["clip"], pose_latents=ins["pose_a"],
                      face_pixel_values=ins["faces_a"], transformer_options={})
    out["short_face"] = net(ins["x"], ins["t"], ins["context"], clip_fea=ins["clip"], pose_latents=ins["pose_b"],
                            face_pixel_values=ins["faces_b"], transformer_options={})
    out["plain"] = net(ins["x"], ins["t"], ins["context"], clip_fea=ins["clip"], transformer_options={})
save_file({k: v.float().contiguous() for k, v in out.items()}, folder + "/outputs.safetensors")
json.dump(report, open(folder + "/report.json", "w"))
'''


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wan_animate1_parity")
    gen = torch.Generator().manual_seed(21)
    state = tiny_animate_state_dict(seed=17, num_layers=LAYERS, text_dim=TEXT, image_dim=CLIP)
    inputs = {
        "x": torch.randn(1, 36, 3, 8, 8, generator=gen), "t": torch.tensor([450.0]),
        "context": torch.randn(1, 6, TEXT, generator=gen), "clip": torch.randn(1, 4, CLIP, generator=gen),
        "pose_a": torch.randn(1, 16, 2, 8, 8, generator=gen),  # frames 1, 2
        "faces_a": torch.rand(1, 3, 5, 512, 512, generator=gen) * 2 - 1,  # 5 frames -> 2 face frames + the zero one
        "pose_b": torch.randn(1, 16, 4, 8, 8, generator=gen),  # more than fit: cut
        "faces_b": torch.rand(1, 3, 1, 512, 512, generator=gen) * 2 - 1,  # 1 frame -> padded with a zero frame
        "motion_codes": torch.randn(2, 9, 512, generator=gen),
        "text_dim": torch.tensor(TEXT),
    }
    save_file(inputs, str(folder / "inputs.safetensors"))
    save_file(state, str(folder / "animate.safetensors"))
    (folder / "comfy_side.py").write_text(COMFY_SCRIPT)
    run = subprocess.run([str(COMFYUI_PYTHON), str(folder / "comfy_side.py"), str(COMFYUI_DIR), str(folder)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    net = AnimateWanModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return dict(theirs=load_file(str(folder / "outputs.safetensors")), inputs=inputs, net=net.eval(),
                report=json.loads((folder / "report.json").read_text()))


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape
    assert (ours.float() - theirs).abs().max().item() < TOL


def test_comfy_detects_and_loads_the_same_file(side_by_side):
    report = side_by_side["report"]
    assert report["config"]["model_type"] == "animate" and report["config"]["num_layers"] == LAYERS
    assert report["unexpected"] == []
    assert report["missing"] and all(name.endswith(".kernel") for name in report["missing"])  # the blur constants


def test_motion_and_face_encoders_match(side_by_side):
    net, ins, theirs = side_by_side["net"], side_by_side["inputs"], side_by_side["theirs"]
    with torch.no_grad():
        _close(net.motion_encoder(ins["faces_a"][0].movedim(1, 0)), theirs["motion"])
        _close(net.face_encoder(ins["motion_codes"]), theirs["face_tokens"])


@pytest.mark.parametrize("case", ["full", "short_face", "plain"])
def test_network_matches(side_by_side, case):
    net, i, theirs = side_by_side["net"], side_by_side["inputs"], side_by_side["theirs"]
    extra = {"full": dict(pose_latents=i["pose_a"], face_pixel_values=i["faces_a"]),
             "short_face": dict(pose_latents=i["pose_b"], face_pixel_values=i["faces_b"]), "plain": {}}[case]
    with torch.no_grad():
        _close(net(i["x"], i["t"], i["context"], clip_fea=i["clip"], **extra), theirs[case])


def test_the_pose_and_face_paths_change_the_output(side_by_side):
    theirs = side_by_side["theirs"]
    assert (theirs["full"] - theirs["plain"]).abs().max().item() > 100 * TOL
    assert (theirs["short_face"] - theirs["full"]).abs().max().item() > 100 * TOL
