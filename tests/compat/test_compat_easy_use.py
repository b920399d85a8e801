"""What ComfyUI-Easy-Use needs from ComfyUI's API, through the fixture pack
tests/compat/api_packs/easy_use_pack: its load-time reads (`comfy.ldm.models` as an attribute,
`comfy_extras.nodes_stable3d.camera_embeddings`), a replaced `comfy.lora.calculate_weight`
reaching our patcher, and the built-in nodes called positionally in ComfyUI's parameter order."""
from __future__ import annotations

import importlib.util
import inspect
import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "easy_use_pack" / "__init__.py"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pack(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    spec = importlib.util.spec_from_file_location("easy_use_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("easy_use_pack_under_test", None)


def _checkpoint():
    from nodes.loaders import checkpoint_loader_simple

    return checkpoint_loader_simple("tiny.safetensors")


def test_the_pack_imports_in_a_fresh_interpreter_reading_submodules_as_attributes(tmp_path):
    # In a fresh interpreter nothing has imported comfy.ldm.models yet: only the package's
    # submodule attributes make `comfy.ldm.models.autoencoder` readable, as after ComfyUI's start-up.
    code = textwrap.dedent(f"""
        import importlib.util, json, sys
        from pathlib import Path
        import compat
        from graph.registry import Registry
        from nodes.environment import Environment
        compat.install(Environment.rooted_at(Path({str(tmp_path)!r})), Registry())
        spec = importlib.util.spec_from_file_location("easy_use_pack", {str(PACK)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from comfy_core.models.vae import AutoencoderKL
        from comfy_core.families.sd1.clip import SD1ClipModel
        print(json.dumps({{"unload": [module.MODELS_TO_UNLOAD[0] is SD1ClipModel,
                                      isinstance(object.__new__(AutoencoderKL), module.MODELS_TO_UNLOAD[1])]}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"unload": [True, True]}


def test_camera_embeddings_are_zero123s(pack):
    out = pack.camera_embeddings(30.0, 90.0)
    assert out.shape == (1, 1, 4)
    expected = [math.radians(-30.0), math.sin(math.radians(90.0)), math.cos(math.radians(90.0)), math.radians(90.0)]
    torch.testing.assert_close(out.flatten().double(), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-6)


def test_a_replaced_comfy_lora_calculate_weight_is_what_our_patcher_applies(pack, monkeypatch):
    import comfy.lora

    model = _checkpoint()[0]
    key = "diffusion_model.out.2.bias"
    original = model.model_state_dict()[key].clone()
    diff = torch.linspace(-1, 1, original.numel()).reshape(original.shape)
    wrapper = pack.add_after(comfy.lora.calculate_weight, 0.5)
    monkeypatch.setattr(comfy.lora, "calculate_weight", wrapper)  # a pack's assignment, undone after
    patched = model.clone()
    patched.add_patches({key: (diff,)}, 1.0)
    with patched.applied() as module:
        got = module.get_parameter(key).detach().clone()
    torch.testing.assert_close(got, original + diff + 0.5, rtol=0, atol=1e-6)
    with model.applied() as module:  # the unpatched clone still has the file's weight
        torch.testing.assert_close(module.get_parameter(key).detach(), original, rtol=0, atol=0)


@pytest.mark.parametrize("skip", [None, -2])
def test_the_towers_encode_token_weights_called_directly_with_clip_options(pack, skip):
    from nodes.conditioning import clip_text_encode

    clip = _checkpoint()[1]
    if skip is not None:
        clip = clip.clone()
        clip.clip_layer(skip)
    weighted, plain = pack.EasyAdvancedEncode().encode(clip, "a photo of a (cat:1.3), [detailed]")
    (ref,) = clip_text_encode("a photo of a (cat:1.3), [detailed]", clip)
    (ref_plain,) = clip_text_encode("a photo of a cat, [detailed]", clip)
    torch.testing.assert_close(weighted[0][0], ref[0][0], rtol=0, atol=0)
    torch.testing.assert_close(weighted[0][1]["pooled_output"], ref[0][1]["pooled_output"], rtol=0, atol=0)
    torch.testing.assert_close(plain[0][0], ref_plain[0][0], rtol=0, atol=0)
    clip.cond_stage_model.reset_clip_options()
    tower = clip.cond_stage_model.clip_l
    assert tower.options == tower.default_options


def test_load_model_gpu_of_a_lora_clips_patcher_puts_the_lora_under_the_towers(pack):
    """Easy-Use's advanced encoder: `load_model_gpu(clip.patcher)`, then a tower's own
    `encode_token_weights`. In ComfyUI the load patches the LoRA into the CLIP's weights, so the
    tower encodes with it, exactly as CLIPTextEncode of that CLIP."""
    from comfy_core.lora import load_lora_for_models
    from nodes.conditioning import clip_text_encode
    from tests.comfy_core.hooks.conftest import clip_lora_tensors

    model, clip, _ = _checkpoint()
    lora_clip = load_lora_for_models(model, clip, clip_lora_tensors(clip, 5), 0.0, 0.8)[1]
    text = "a photo of a (cat:1.3), [detailed]"
    weighted, plain = pack.EasyAdvancedEncode().encode(lora_clip, text)
    (ref,) = clip_text_encode(text, lora_clip)
    torch.testing.assert_close(weighted[0][0], ref[0][0], rtol=0, atol=0)
    torch.testing.assert_close(weighted[0][1]["pooled_output"], ref[0][1]["pooled_output"], rtol=0, atol=0)
    (without,) = clip_text_encode(text, clip)
    assert not torch.allclose(weighted[0][0], without[0][0], atol=1e-3)  # the LoRA changed it
    # the base CLIP, loaded next, encodes without the other clone's LoRA (its weights put back)
    base_weighted, _ = pack.EasyAdvancedEncode().encode(clip, text)
    torch.testing.assert_close(base_weighted[0][0], without[0][0], rtol=0, atol=0)
    torch.testing.assert_close(clip_text_encode(text, clip)[0][0][0], without[0][0], rtol=0, atol=0)


def test_builtin_nodes_called_positionally_in_comfyuis_order(pack):
    from nodes.conditioning import clip_text_encode
    from nodes.latent import vae_decode, vae_encode

    _, clip, vae = _checkpoint()
    pixels = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
    latent, image, cond = pack.EasyEncodeDecode().run(vae, clip, pixels, "a (cat:1.2)")
    (ref_latent,) = vae_encode(pixels, vae)
    (ref_image,) = vae_decode(ref_latent, vae)
    (ref_cond,) = clip_text_encode("a (cat:1.2)", clip)
    torch.testing.assert_close(latent["samples"], ref_latent["samples"], rtol=0, atol=0)
    torch.testing.assert_close(image, ref_image, rtol=0, atol=0)
    torch.testing.assert_close(cond[0][0], ref_cond[0][0], rtol=0, atol=0)


def test_positional_binding_follows_comfyuis_order_and_refuses_what_we_lack():
    from compat.node_facades import UnsupportedNodeArgumentError, positional_binder

    def decode(samples, vae):  # our order differs from ComfyUI's (vae, samples)
        return samples, vae

    bind = positional_binder("VAEDecode", "decode", inspect.signature(decode))

    def call(*args, **kwargs):
        bound_args, bound_kwargs = bind(*args, **kwargs)
        return decode(*bound_args, **bound_kwargs)

    assert call("V", "S") == ("S", "V")
    assert call("V", samples="S") == ("S", "V")
    assert call(samples="S", vae="V") == ("S", "V")
    with pytest.raises(TypeError, match="multiple values"):
        call("V", vae="W")

    def blend(samples1, samples2, blend_factor):  # without ComfyUI's 4th parameter, blend_mode
        return samples1

    bind = positional_binder("LatentBlend", "blend", inspect.signature(blend))
    with pytest.raises(UnsupportedNodeArgumentError, match="blend_mode"):
        bind(1, 2, 0.5, "normal")
    assert bind(1, 2, 0.5) == ((), {"samples1": 1, "samples2": 2, "blend_factor": 0.5})
