"""ComfyUI-GGUF's way of loading models on our runtime (`custom_operations` layer classes that
hold a tensor subclass of packed weights and dequantize it in their forward, a ModelPatcher
subclass): the fixture pack tests/compat/api_packs/gguf_like_pack mimics it without the `gguf`
package. Its MODEL predicts exactly what UNETLoader's does on the dequantized weights."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

PACK = Path(__file__).parent / "api_packs" / "gguf_like_pack" / "__init__.py"


@pytest.fixture
def gguf(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    """models/checkpoints holds the tiny SD1 checkpoint, models/diffusion_models its UNet with the
    pack's quantization undone (dequantized), models/text_encoders its CLIP-L; returns the pack."""
    from tests.fixtures.split_files import text_encoder_files

    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    for kind in ("checkpoints", "diffusion_models", "text_encoders", "embeddings"):
        (models / kind).mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, models / "checkpoints" / "tiny.safetensors")
    spec = importlib.util.spec_from_file_location("gguf_like_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = load_file(str(tiny_sd1_ckpt))
    dequantized = module.dequantized_state_dict(module.quantized_state_dict(state))
    save_file({k: v.contiguous() for k, v in dequantized.items()}, str(models / "diffusion_models" / "deq.safetensors"))
    save_file(text_encoder_files(state, "sd1")["clip_l"], str(models / "text_encoders" / "clip_l.safetensors"))
    yield module
    sys.modules.pop("gguf_like_pack_under_test", None)


def _denoised(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, 8, 8, generator=g)
    context = torch.randn(1, 7, 64, generator=g)
    sigma = torch.tensor([3.0])
    with torch.no_grad(), model.applied() as module:
        return module.apply_model(x, sigma, c_crossattn=context)


def test_unet_is_built_from_the_packs_operations_and_keeps_its_tensors(gguf):
    from comfy_core.patching.model import ModelPatcher

    (model,) = gguf.QuantizedUnetLoader().load_unet("tiny.safetensors")
    assert type(model) is gguf.QModelPatcher and isinstance(model, ModelPatcher)
    unet = model.model.diffusion_model
    to_q = unet.input_blocks[1][1].transformer_blocks[0].attn1.to_q
    assert isinstance(to_q, gguf.QOps.Linear) and isinstance(unet.out[2], gguf.QOps.Conv2d)
    assert isinstance(unet.out[0], gguf.QOps.GroupNorm)
    # the packed tensor is the pack's object, held as the layer's parameter, never dequantized
    assert isinstance(to_q.weight, gguf.QTensor) and to_q.weight.dtype == torch.uint8
    assert tuple(to_q.weight.shape) == (32, 32) and tuple(to_q.weight.data.size()) == (32, 36)
    assert not any(t.is_meta for t in unet.parameters())
    # the output conv is a plain float32 tensor, so the UNet computes in float32 without a cast
    assert model.model.manual_cast_dtype is None and model.model.get_dtype() == torch.float32


def test_quantized_unet_predicts_exactly_what_our_loader_does_on_dequantized_weights(gguf):
    from comfy_core.split import load_diffusion_model
    from nodes.loaders import checkpoint_loader_simple, unet_loader

    import comfy.utils

    (model,) = gguf.QuantizedUnetLoader().load_unet("tiny.safetensors")
    # read as the pack reads it (comfy.utils.load_torch_file: tensors in fresh memory), so the
    # unquantized tensors sit at the same alignment on both sides (oneDNN's convolutions may round
    # the last bit differently over differently aligned memory)
    sd = comfy.utils.load_torch_file("models/checkpoints/tiny.safetensors")
    dequantized = gguf.dequantized_state_dict(gguf.quantized_state_dict(sd))
    ours = _denoised(model)
    # UNETLoader's loader over the same dequantized tensors: bit for bit
    assert torch.equal(ours, _denoised(load_diffusion_model(dequantized)))
    # UNETLoader on the dequantized file: float32 matrix products over other memory may round
    # differently in the last bit, nothing more
    (from_file,) = unet_loader("deq.safetensors", "default")
    torch.testing.assert_close(ours, _denoised(from_file), rtol=0, atol=1e-4)
    # the quantization is lossy, so this is not the original checkpoint's prediction
    assert (ours - _denoised(checkpoint_loader_simple("tiny.safetensors")[0])).abs().max() > 1e-3


def test_clone_keeps_the_subclass_and_patch_state(gguf):
    (model,) = gguf.QuantizedUnetLoader().load_unet("tiny.safetensors")
    model.patch_on_device = True
    twin = model.clone()
    assert type(twin) is gguf.QModelPatcher and twin.patch_on_device is True
    assert twin.model is model.model
    assert torch.equal(_denoised(twin), _denoised(model))


def test_text_encoders_accept_comfy_ops_custom_operations_on_plain_tensors(gguf):
    from nodes.conditioning import clip_text_encode
    from nodes.loaders import clip_loader

    (clip,) = gguf.QuantizedCLIPLoader().load_clip("clip_l.safetensors")
    (reference,) = clip_loader("clip_l.safetensors", "stable_diffusion")
    (ours,) = clip_text_encode("a red cat", clip)
    (theirs,) = clip_text_encode("a red cat", reference)
    assert torch.equal(ours[0][0], theirs[0][0])
    assert torch.equal(ours[0][1]["pooled_output"], theirs[0][1]["pooled_output"])


def test_text_encoders_refuse_what_only_the_packs_layers_can_read(gguf, tmp_path):
    import comfy.sd
    from compat.files_sd import LoaderOptionError

    sd = load_file(str(tmp_path / "models" / "text_encoders" / "clip_l.safetensors"))
    key = next(k for k, v in sd.items() if v.ndim == 2 and v.shape[1] >= 16)
    sd[key] = gguf.QTensor(gguf.quantize_rows(sd[key]), tensor_type=gguf.Q8_ROWS, tensor_shape=sd[key].shape)
    with pytest.raises(LoaderOptionError, match="QTensor.*quantized text encoders are not supported"):
        comfy.sd.load_text_encoder_state_dicts([sd], model_options={"custom_operations": gguf.QOps})

    class NotComfyOps:
        pass

    with pytest.raises(LoaderOptionError, match="NotComfyOps is not a comfy.ops class"):
        comfy.sd.load_text_encoder_state_dicts([load_file(str(tmp_path / "models" / "text_encoders" / "clip_l.safetensors"))],
                                               model_options={"custom_operations": NotComfyOps})


def test_custom_operations_on_a_family_with_its_own_unet_builder_is_a_typed_error(gguf):
    from comfy_core.checkpoint.errors import UnsupportedFormatError
    from comfy_core.split.custom_operations import build_unet_with_operations
    from types import SimpleNamespace

    detection = SimpleNamespace(unet_config=object(), family=SimpleNamespace(components=object(), display_name="SVD"))
    with pytest.raises(UnsupportedFormatError, match="SVD diffusion models have their own UNet builder"):
        build_unet_with_operations(SimpleNamespace(path=Path("x.safetensors")), detection, gguf.QOps)
