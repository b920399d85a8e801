"""comfy_core.upscale.files / loading: weight files unwrapped as ComfyUI reads them, models detected
by spandrel from tiny random weights with the real key layouts, checked against forward passes
written here from the architectures' papers."""
from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F

from comfy_core.upscale.files import UpscaleModelError, read_state_dict
from comfy_core.upscale.loading import load_upscale_model, model_from_state_dict, prepare_state_dict
from tests.fixtures.upscale_models import (
    compact_state_dict,
    esrgan_state_dict,
    swinir_state_dict,
    write_upscale_model,
)


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _conv(x: torch.Tensor, sd: dict, name: str) -> torch.Tensor:
    return F.conv2d(x, sd[f"{name}.weight"], sd[f"{name}.bias"], padding=1)


def esrgan_forward(sd: dict, x: torch.Tensor, num_blocks: int, upsamples: int) -> torch.Tensor:
    """ESRGAN's RRDBNet (Wang et al. 2018) on the original key layout: residual-in-residual
    dense blocks (5 convolutions with dense links, residuals scaled by 0.2), a trunk
    convolution with a long skip, nearest 2x + conv per upsampling stage, HR conv, last conv;
    LeakyReLU(0.2). Clamped to 0..1 as spandrel's call does."""
    def lrelu(v: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(v, 0.2)

    fea = _conv(x, sd, "model.0")
    trunk = fea
    for block in range(num_blocks):
        start = trunk
        for rdb in (1, 2, 3):
            feats = [trunk]
            for c in range(1, 5):
                feats.append(lrelu(_conv(torch.cat(feats, 1), sd, f"model.1.sub.{block}.RDB{rdb}.conv{c}.0")))
            trunk = _conv(torch.cat(feats, 1), sd, f"model.1.sub.{block}.RDB{rdb}.conv5.0") * 0.2 + trunk
        trunk = trunk * 0.2 + start
    fea = fea + _conv(trunk, sd, f"model.1.sub.{num_blocks}")
    for stage in range(upsamples):
        fea = lrelu(_conv(F.interpolate(fea, scale_factor=2, mode="nearest"), sd, f"model.{3 + 3 * stage}"))
    last = 2 + 3 * upsamples
    return _conv(lrelu(_conv(fea, sd, f"model.{last}")), sd, f"model.{last + 2}").clamp(0, 1)


def compact_forward(sd: dict, x: torch.Tensor, num_conv: int, scale: int) -> torch.Tensor:
    """Real-ESRGAN's SRVGGNetCompact: conv + PReLU stages, a last conv to C*s^2 channels, pixel
    shuffle, plus the nearest-upscaled input (the network learns the residual)."""
    out = x
    for i in range(num_conv + 1):
        out = F.prelu(_conv(out, sd, f"body.{2 * i}"), sd[f"body.{2 * i + 1}.weight"])
    out = F.pixel_shuffle(_conv(out, sd, f"body.{2 * num_conv + 2}"), scale)
    return (out + F.interpolate(x, scale_factor=scale, mode="nearest")).clamp(0, 1)


# --- detection and numerics ------------------------------------------------------------------------

@pytest.mark.parametrize("scale,upsamples", [(4, 2), (2, 1), (1, 0)])
def test_old_layout_esrgan_is_detected_and_computes_rrdbnet(scale, upsamples):
    sd = esrgan_state_dict("old", scale=scale, num_blocks=2, seed=scale)
    model = model_from_state_dict(sd)
    assert model.architecture.id == "ESRGAN" and model.scale == scale and model.input_channels == 3
    x = _rand(1, 3, 9, 13)
    with torch.no_grad():
        expected = esrgan_forward(sd, x, num_blocks=2, upsamples=upsamples)
    got = model(x)
    assert got.shape == (1, 3, 9 * scale, 13 * scale)
    assert torch.allclose(got, expected, rtol=0, atol=1e-5)


def test_new_layout_esrgan_is_the_same_network():
    """BasicSR / Real-ESRGAN names (conv_first, body.N.rdbR, conv_up1, ...) for the same weights
    give the same model: both fixtures draw the same tensors in the same order."""
    old = model_from_state_dict(esrgan_state_dict("old", seed=5))
    new = model_from_state_dict(esrgan_state_dict("new", seed=5))
    assert new.architecture.id == "ESRGAN" and new.scale == 4
    x = _rand(1, 3, 8, 8, seed=1)
    assert torch.equal(old(x), new(x))


def test_real_esrgan_x2plus_unshuffles_its_input():
    model = model_from_state_dict(esrgan_state_dict("new", scale=2, pixel_unshuffle=True))
    assert model.scale == 2 and model.input_channels == 3 and "unshuffle" in model.tags
    assert model(_rand(1, 3, 10, 6)).shape == (1, 3, 20, 12)


def test_compact_is_detected_and_computes_srvgg():
    sd = compact_state_dict(scale=4, num_conv=3, seed=2)
    model = model_from_state_dict(sd)
    assert model.architecture.id == "Compact" and model.scale == 4
    x = _rand(1, 3, 7, 11)
    with torch.no_grad():
        expected = compact_forward(sd, x, num_conv=3, scale=4)
    assert torch.allclose(model(x), expected, rtol=0, atol=1e-5)


# --- ComfyUI's key fix -----------------------------------------------------------------------------

def test_module_prefix_is_stripped_only_for_a_wrapped_swinir():
    weights = {"module.layers.0.residual_group.blocks.0.norm1.weight": torch.ones(2),
               "module.conv_first.weight": torch.zeros(1), "conv_first.weight": torch.full((1,), 7.0),
               "other": torch.ones(1)}
    prepared = prepare_state_dict(weights)
    assert sorted(prepared) == ["conv_first.weight", "layers.0.residual_group.blocks.0.norm1.weight", "other"]
    assert prepared["conv_first.weight"].item() == 0.0  # the stripped key's tensor wins, as ComfyUI
    assert "module.conv_first.weight" in weights  # the input is not changed
    plain = {"module.body.0.weight": torch.ones(1)}
    assert prepare_state_dict(plain) == plain  # no SwinIR marker: left alone


def test_a_dataparallel_swinir_loads():
    sd = {f"module.{k}": v for k, v in swinir_state_dict(scale=2).items()}
    model = model_from_state_dict(sd)
    assert model.architecture.id == "SwinIR" and model.scale == 2
    assert model(_rand(1, 3, 8, 8)).shape == (1, 3, 16, 16)


# --- refusals ---------------------------------------------------------------------------------------

def test_unknown_weights_are_refused():
    with pytest.raises(UpscaleModelError, match="no architecture spandrel knows"):
        model_from_state_dict({"something.weight": torch.ones(3, 3)}, "mystery.pth")


def test_mismatched_shapes_are_a_typed_error():
    sd = esrgan_state_dict("old")
    sd["model.1.sub.0.RDB1.conv2.0.weight"] = torch.zeros(32, 5, 3, 3)
    with pytest.raises(UpscaleModelError, match="could not build"):
        model_from_state_dict(sd, "broken.pth")


def test_masked_image_models_are_refused():
    """UPSCALE_MODEL is a single-image model; an inpainting (image + mask) model is refused."""
    from spandrel import Architecture, ArchRegistry, ArchSupport, MaskedImageModelDescriptor

    class TinyInpaint(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 3, 1)

        def forward(self, image: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.conv(torch.cat([image, mask], 1))

    class TinyInpaintArch(Architecture[TinyInpaint]):
        def __init__(self) -> None:
            super().__init__(id="TinyInpaint", detect=lambda sd: "conv.weight" in sd)

        def load(self, state_dict):
            return MaskedImageModelDescriptor(TinyInpaint(), state_dict, architecture=self, purpose="Inpainting",
                                              tags=[], supports_half=True, supports_bfloat16=True,
                                              input_channels=3, output_channels=3)

    registry = ArchRegistry()
    registry.add(ArchSupport.from_architecture(TinyInpaintArch()))
    sd = TinyInpaint().state_dict()
    with pytest.raises(UpscaleModelError, match="must be a single-image model"):
        model_from_state_dict(sd, "inpaint.pth", registry=registry)


# --- files ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", [None, "params_ema", "state_dict"])
def test_files_are_unwrapped_as_comfyui_reads_them(tmp_path, wrap):
    sd = esrgan_state_dict("new", seed=3)
    path = write_upscale_model(tmp_path / "x4.pth", {wrap: sd} if wrap else sd)
    read = read_state_dict(path)
    assert sorted(read) == sorted(sd) and torch.equal(read["conv_first.weight"], sd["conv_first.weight"])
    assert load_upscale_model(path).scale == 4


def test_params_beside_params_ema_are_left_to_spandrel(tmp_path):
    """Two entries are not unwrapped by the reader; spandrel picks `params_ema` (the EMA weights)."""
    ema, raw = esrgan_state_dict("new", seed=1), esrgan_state_dict("new", seed=2)
    path = write_upscale_model(tmp_path / "both.pth", {"params": raw, "params_ema": ema})
    assert set(read_state_dict(path)) == {"params", "params_ema"}
    model = load_upscale_model(path)
    assert torch.equal(model.model.state_dict()["model.0.weight"], ema["conv_first.weight"])


def test_safetensors_files_load(tmp_path):
    path = write_upscale_model(tmp_path / "compact.safetensors", compact_state_dict(scale=2))
    assert load_upscale_model(path).scale == 2


class _Payload:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_pickles_with_code_are_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"weight": torch.ones(1), "payload": _Payload()}, path)
    with pytest.raises(UpscaleModelError, match="refused"):
        read_state_dict(path)


def test_unreadable_files_are_typed_errors(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "bad.pth").write_bytes(pickle.dumps([1, 2, 3]))
    (tmp_path / "list.pth").write_bytes(b"")
    with pytest.raises(UpscaleModelError, match="bad.safetensors"):
        read_state_dict(tmp_path / "bad.safetensors")
    with pytest.raises(UpscaleModelError, match="bad.pth"):
        read_state_dict(tmp_path / "bad.pth")
    with pytest.raises(UpscaleModelError, match="list.pth"):
        read_state_dict(tmp_path / "list.pth")
