"""VOID's pieces below the nodes: torchvision's RAFT loaded from its own state dicts
(comfy_core/models/optical_flow.py), the optical-flow noise warp (comfy_core/models/optical_flow_noise.py,
Go-with-the-Flow's algorithm as ComfyUI's void_noise_warp.py runs it) and VOID's DDIM sampler
(comfy_core/families/cogvideox/void_ddim.py)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.cogvideox.void_ddim import ddim_vp_step, void_ddim
from comfy_core.models.optical_flow import OpticalFlowModel, OpticalFlowWeightsError, load_optical_flow
from comfy_core.models.optical_flow_noise import NoiseWarper, regaussianize, warp_state, warped_noise


def _raft_small_state(seed: int = 0) -> dict:
    from torchvision.models.optical_flow import raft_small

    torch.manual_seed(seed)
    return {k: v.clone() for k, v in raft_small(weights=None).state_dict().items()}


# --- RAFT -----------------------------------------------------------------------------------------------

def test_raft_files_load_into_torchvisions_classes_and_give_its_flow(tmp_path):
    from safetensors.torch import save_file
    from torchvision.models.optical_flow import raft_large, raft_small

    state = _raft_small_state()
    path = tmp_path / "raft_small.safetensors"
    save_file({k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}, str(path))
    model = load_optical_flow(path)
    assert isinstance(model, OpticalFlowModel) and model.kind == "raft_small"
    reference = raft_small(weights=None).eval()
    reference.load_state_dict(state)
    gen = torch.Generator().manual_seed(1)
    a, b = torch.rand(3, 134, 141, generator=gen), torch.rand(3, 134, 141, generator=gen)
    flow = model.flow(a, b)
    assert flow.shape == (2, 134, 141)
    with torch.no_grad():
        resize = lambda x: torch.nn.functional.interpolate(x[None], size=(128, 136), mode="bilinear",  # noqa: E731
                                                           align_corners=False) * 2 - 1
        theirs = reference(resize(a), resize(b))[-1]
        theirs = torch.nn.functional.interpolate(theirs, size=(134, 141), mode="bilinear", align_corners=False)[0]
    torch.testing.assert_close(flow, theirs)
    torch.manual_seed(0)
    large = load_optical_flow(raft_large(weights=None).state_dict())
    assert large.kind == "raft_large"
    with pytest.raises(ValueError, match="128"):
        model.flow(a[:, :100], b[:, :100])


def test_a_file_that_is_not_raft_is_refused(tmp_path):
    with pytest.raises(OpticalFlowWeightsError, match="feature_encoder"):
        load_optical_flow({"encoder.conv_in.weight": torch.zeros(1)})
    state = _raft_small_state()
    state["update_block.flow_head.conv2.weight"] = torch.zeros(1)
    with pytest.raises(OpticalFlowWeightsError, match="flow_head"):
        load_optical_flow(state)


# --- the noise warp ---------------------------------------------------------------------------------------

def test_zero_flow_keeps_the_noise_and_a_shift_moves_it():
    gen = torch.Generator().manual_seed(2)
    warper = NoiseWarper(4, 16, 20, generator=gen)
    start = warper.noise.clone()
    warper.step(torch.zeros(16, 20), torch.zeros(16, 20))
    torch.testing.assert_close(warper.noise, start)
    warper.step(torch.full((16, 20), 3.0), torch.full((16, 20), -2.0))  # right 3, up 2
    moved = warper.noise
    # away from where the pixels leaving the frame are dropped (onto their own places, as blanks)
    torch.testing.assert_close(moved[:, 2:14, 3:17], start[:, 4:16, :14])
    assert not torch.equal(moved[:, :, :3], torch.zeros_like(moved[:, :, :3]))  # the uncovered band is fresh noise


def test_regaussianize_keeps_unit_variance_for_repeated_pixels():
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(2, 64, 64, generator=gen)
    repeated = base.repeat_interleave(4, dim=2)[:, :, :64]  # every value 4 times in a row
    out, sizes = regaussianize(repeated, gen)
    assert sizes.min() == 4 and out.std().item() == pytest.approx(1.0, abs=0.05)
    assert out.mean().item() == pytest.approx(0.0, abs=0.05)


def test_warped_noise_follows_the_flow_and_stays_gaussian():
    frames = torch.zeros(5, 64, 64, 3, dtype=torch.uint8)
    calls = []

    def flow(a, b):
        calls.append(a.shape)
        return torch.stack([torch.full(a.shape[1:], 1.3), torch.full(a.shape[1:], 0.7)])

    gen = torch.Generator().manual_seed(4)
    noise = warped_noise(frames, flow, noise_channels=16, resize_frames=0.5, resize_flow=8, downscale_factor=32,
                         generator=gen)
    assert noise.shape == (5, 8, 8, 16) and calls == [(3, 32, 32)] * 4
    assert noise.std().item() == pytest.approx(1.0, abs=0.15)
    assert (noise[1] - noise[0]).abs().mean() > 0.05  # it moves
    with pytest.raises(ValueError, match="uint8"):
        warped_noise(frames.float(), flow)


def test_warp_state_refuses_mismatched_flows():
    with pytest.raises(ValueError, match="flow"):
        warp_state(torch.zeros(5, 4, 4), torch.zeros(2, 3, 4))


# --- VOID's DDIM ------------------------------------------------------------------------------------------

class _Model:
    def __init__(self):
        self.calls = []

    def __call__(self, x, sigma, model_options=None, seed=None):
        self.calls.append((float(sigma[0]), model_options, seed))
        return 0.5 * x + float(sigma[0]) * 0.01


def test_void_ddim_is_the_variance_preserving_ddim_loop():
    noise = torch.randn(1, 4, 2, 3, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sigmas = torch.tensor([2.0, 1.0, 0.5, 0.0])
    model, steps = _Model(), []
    out = void_ddim(model, sigmas, {"model_options": {"k": 1}, "seed": 9}, lambda i, d, x, n: steps.append((i, n)),
                    noise)
    x = noise.float()
    for s, s_next in ((2.0, 1.0), (1.0, 0.5)):
        d = 0.5 * x + s * 0.01
        a, a_next = 1 / (1 + s * s), 1 / (1 + s_next * s_next)
        eps = (x - a ** 0.5 * d) / (1 - a) ** 0.5
        x = a_next ** 0.5 * d + (1 - a_next) ** 0.5 * eps
    torch.testing.assert_close(out, 0.5 * x + 0.005)  # the last step to 0 is the clean estimate
    assert out.dtype == torch.float32 and steps == [(0, 3), (1, 3), (2, 3)]
    assert [c[1:] for c in model.calls] == [({"k": 1}, 9)] * 3
    single = void_ddim(_Model(), torch.tensor([1.0]), {}, None, noise)
    assert torch.equal(single, noise.float())
    assert torch.equal(ddim_vp_step(x, x * 2, torch.tensor(1.0), torch.tensor(0.0)), x * 2)
