"""WanAnimateToVideo (nodes/wan_animate_nodes.py, Wan 2.2 Animate) against ComfyUI's behaviour composed
here with a fake Wan VAE: the reference latent in front, the pose / face / background videos read
from `video_frame_offset`, the continued motion (its frames known, the offset moved back, trim_image),
the character mask's frame-to-row layout (today's: mask frame 0 on the rows of latent frame 0, frame
f >= 1 on row f + 3), and the outputs; and side by side with ComfyUI 0.3.64's own node where today's
behaves the same (no character mask), run in a subprocess (skipped without its checkout)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from nodes.wan_animate_nodes import wan_animate_to_video
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def _run(**kwargs):
    args = dict(positive=cond(1.0), negative=cond(2.0), width=16, height=16, length=9, batch_size=1,
                continue_motion_max_frames=5, video_frame_offset=0)
    args.update(kwargs)
    with running_node("WanAnimateToVideo", "1"):
        return wan_animate_to_video(**args)


def _rows(mask: torch.Tensor) -> torch.Tensor:
    """concat_mask `[1, 4, T, h, w]` after the reference frame -> one row per packed frame `[4 T, h, w]`."""
    return mask[0, :, 1:].transpose(0, 1).reshape(-1, *mask.shape[-2:])


def _nearest(mask: torch.Tensor) -> torch.Tensor:
    return F.interpolate(mask.unsqueeze(1), size=(2, 2), mode="nearest-exact")[:, 0]


def test_reference_pose_face_and_outputs():
    vae = FakeVideoVAE()
    ref, pose, face = frames(1, 16, 16, seed=1), frames(12, 16, 16, seed=2), frames(12, 16, 16, seed=3)
    clip = type("Out", (), {"penultimate_hidden_states": torch.ones(1, 3, 8)})()
    pos, neg, latent, trim_latent, trim_image, offset = _run(
        vae=vae, batch_size=2, video_frame_offset=3, reference_image=ref, pose_video=pose, face_video=face,
        clip_vision_output=clip)
    assert latent["samples"].shape == (2, 16, 1 + 3, 2, 2) and (trim_latent, trim_image, offset) == (1, 0, 12)
    p, n = pos[0][1], neg[0][1]
    want = torch.cat([vae.latent_of(ref), vae.latent_of(torch.full((9, 16, 16, 3), 0.5))], dim=2)
    for entry in (p, n):
        torch.testing.assert_close(entry["concat_latent_image"], want)
        assert entry["concat_mask"].shape == (1, 4, 4, 2, 2)
        assert entry["concat_mask"][:, :, 0].eq(0).all() and entry["concat_mask"][:, :, 1:].eq(1).all()
        torch.testing.assert_close(entry["pose_video_latent"], vae.latent_of(pose[3:12]))
        assert entry["clip_vision_output"] is clip
    faces = F.interpolate(face[3:12].movedim(-1, 1), size=(512, 512), mode="area") * 2 - 1
    torch.testing.assert_close(p["face_video_pixels"], faces.movedim(0, 1).unsqueeze(0))
    assert n["face_video_pixels"].shape == (1, 3, 9, 512, 512) and n["face_video_pixels"].eq(-1).all()
    assert p["keep"] == 1.0 and n["keep"] == 2.0


def test_continue_motion_moves_the_offset_back_and_keeps_its_frames():
    vae = FakeVideoVAE()
    previous, pose = frames(7, 16, 16, seed=4), frames(20, 16, 16, seed=5)
    pos, _, latent, trim_latent, trim_image, offset = _run(vae=vae, video_frame_offset=9, pose_video=pose,
                                                           continue_motion=previous)
    # the last 5 frames continue: the videos are read 5 frames earlier; 2 latent frames known
    assert (trim_latent, trim_image, offset) == (1, 5, 4 + 9)
    p = pos[0][1]
    video = torch.full((9, 16, 16, 3), 0.5)
    video[:5] = previous[-5:]
    torch.testing.assert_close(p["concat_latent_image"][:, :, 1:], vae.latent_of(video))
    assert p["concat_mask"][0, 0, :, 0, 0].tolist() == [0.0, 0.0, 0.0, 1.0]
    torch.testing.assert_close(p["pose_video_latent"], vae.latent_of(pose[4:13]))
    assert "face_video_pixels" not in p


def test_videos_shorter_than_the_offset_are_left_out_and_the_pose_holds_its_last_frame():
    vae = FakeVideoVAE()
    pos, *_ = _run(vae=vae, video_frame_offset=4, pose_video=frames(6, 16, 16, seed=6),
                   face_video=frames(4, 16, 16, seed=7), background_video=frames(3, 16, 16, seed=8))
    p = pos[0][1]
    pose = frames(6, 16, 16, seed=6)
    held = torch.cat([pose[4:], pose[-1:].expand(7, -1, -1, -1)])
    torch.testing.assert_close(p["pose_video_latent"], vae.latent_of(held))
    assert "face_video_pixels" not in p
    torch.testing.assert_close(p["concat_latent_image"][:, :, 1:], vae.latent_of(torch.full((9, 16, 16, 3), 0.5)))


def test_background_and_character_mask_rows():
    vae = FakeVideoVAE()
    background = frames(9, 16, 16, seed=9)
    mask = (torch.rand(9, 16, 16, generator=torch.Generator().manual_seed(10)) > 0.5).float()
    pos, *_ = _run(vae=vae, background_video=background, character_mask=mask)
    p = pos[0][1]
    torch.testing.assert_close(p["concat_latent_image"][:, :, 1:], vae.latent_of(background))
    small = _nearest(mask)
    want = torch.cat([small[:1].expand(4, -1, -1), small[1:9]])  # frame 0 on rows 0..3, frame f on row f + 3
    assert torch.equal(_rows(p["concat_mask"]), want)


def test_character_mask_after_continued_frames_and_a_single_mask_frame():
    vae = FakeVideoVAE()
    previous = frames(2, 16, 16, seed=11)
    mask = (torch.rand(1, 16, 16, generator=torch.Generator().manual_seed(12)) > 0.5).float()
    pos, _, _, _, trim_image, offset = _run(vae=vae, continue_motion=previous, character_mask=mask,
                                            background_video=frames(9, 16, 16, seed=13), video_frame_offset=2)
    assert (trim_image, offset) == (1, 9)
    p = pos[0][1]
    rows = _rows(p["concat_mask"])
    small = _nearest(mask)[0]
    assert rows[:5].eq(0).all()  # the 2 continued frames (rows 0..4) stay known
    assert all(torch.equal(rows[f + 3], small) for f in range(2, 9))  # the one mask frame held throughout
    background = frames(9, 16, 16, seed=13)
    video = torch.full((9, 16, 16, 3), 0.5)
    video[:2] = previous
    video[1:9] = background[1:9]  # the background after the continued motion's packed frames (4 * 1 - 3 = 1)
    torch.testing.assert_close(p["concat_latent_image"][:, :, 1:], vae.latent_of(video))


# -- side by side with ComfyUI 0.3.64's own node (the cases where today's node does the same) ------------

COMFYUI_DIR = Path(os.environ.get("COMFYUI_DIR", "/work/scratch/comfyui"))
COMFYUI_PYTHON = Path(os.environ.get("COMFYUI_PYTHON", "/work/scratch/packvenv/bin/python"))
COMFY_SCRIPT = r'''
import sys
comfy_dir, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, comfy_dir)
sys.argv = [sys.argv[0], "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from comfy_extras.nodes_wan import WanAnimateToVideo

class VAE:  # tests/nodes/test_wan_nodes.py's FakeVideoVAE, written again
    weight = torch.linspace(-1.0, 1.0, 48).reshape(16, 3)
    def encode(self, pixels):
        t = (pixels.shape[0] - 1) // 4 + 1
        groups = [pixels[:1]] + [pixels[1 + 4 * i:5 + 4 * i].mean(0, keepdim=True) for i in range(t - 1)]
        pooled = F.avg_pool2d(torch.cat(groups).movedim(-1, 1), 8)
        return torch.einsum("ck,tkhw->cthw", self.weight, pooled).unsqueeze(0)

ins = load_file(folder + "/inputs.safetensors")
out = {}
cases = {"a": dict(video_frame_offset=3, reference_image=ins["ref"], pose_video=ins["pose"], face_video=ins["face"]),
         "b": dict(video_frame_offset=9, continue_motion=ins["previous"], pose_video=ins["pose"],
                   background_video=ins["background"], face_video=ins["face"])}
for name, kwargs in cases.items():
    cond = lambda v: [[torch.full((1, 3, 8), v), {}]]
    res = WanAnimateToVideo.execute(positive=cond(1.0), negative=cond(2.0), vae=VAE(), width=16, height=16, length=9,
                                    batch_size=1, continue_motion_max_frames=5, **kwargs).result
    for i, label in enumerate(("pos", "neg")):
        for key, value in res[i][0][1].items():
            out[f"{name}_{label}_{key}"] = value.clone().contiguous()
    out[f"{name}_latent"] = res[2]["samples"].contiguous()
    out[f"{name}_ints"] = torch.tensor(res[3:6])
save_file(out, folder + "/outputs.safetensors")
'''


@pytest.mark.skipif(not (COMFYUI_DIR / "comfy_extras" / "nodes_wan.py").is_file() or not COMFYUI_PYTHON.exists(),
                    reason="ComfyUI 0.3.64's checkout or its Python is not here (COMFYUI_DIR / COMFYUI_PYTHON)")
def test_same_conditioning_as_comfyui_0_3_64(tmp_path):
    inputs = {"ref": frames(1, 16, 16, seed=1), "pose": frames(14, 16, 16, seed=2), "face": frames(14, 16, 16, seed=3),
              "previous": frames(7, 16, 16, seed=4), "background": frames(12, 16, 16, seed=5)}
    save_file(inputs, str(tmp_path / "inputs.safetensors"))
    (tmp_path / "comfy_side.py").write_text(COMFY_SCRIPT)
    run = subprocess.run([str(COMFYUI_PYTHON), str(tmp_path / "comfy_side.py"), str(COMFYUI_DIR), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    theirs = load_file(str(tmp_path / "outputs.safetensors"))
    cases = {"a": dict(video_frame_offset=3, reference_image=inputs["ref"], pose_video=inputs["pose"],
                       face_video=inputs["face"]),
             "b": dict(video_frame_offset=9, continue_motion=inputs["previous"], pose_video=inputs["pose"],
                       background_video=inputs["background"], face_video=inputs["face"])}
    for name, kwargs in cases.items():
        pos, neg, latent, *ints = _run(vae=FakeVideoVAE(), **kwargs)
        assert ints == theirs[f"{name}_ints"].tolist()
        assert torch.equal(latent["samples"], theirs[f"{name}_latent"])
        for label, entries in (("pos", pos), ("neg", neg)):
            values = {k: v for k, v in entries[0][1].items() if k != "keep"}
            keys = sorted(k[len(f"{name}_{label}_"):] for k in theirs if k.startswith(f"{name}_{label}_"))
            assert sorted(values) == keys
            for key in keys:
                torch.testing.assert_close(values[key].float(), theirs[f"{name}_{label}_{key}"].float(),
                                           atol=1e-6, rtol=0)
