"""ComfyUI's `comfy.ldm.<family>` / `comfy.text_encoders.<family>` modules of the families this
engine implements, as packs use them (TeaCache-, WaveSpeed- and KJNodes-style): a network loaded
from a file by our loaders is an instance of the class the pack imports from ComfyUI's module, and
its text-encoder set of ComfyUI's class. The names each module answers are checked against
ComfyUI 0.3.64's recorded surface by test_comfy_surface.py."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

import pytest
import torch


def _hunyuan_video(tmp: Path) -> Path:
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.template_models_hunyuan_video import tiny_hunyuan_video_state_dict

    path = tmp / "hunyuan_video_tiny.safetensors"
    save({k: v.to(torch.bfloat16) for k, v in tiny_hunyuan_video_state_dict().items()}, path)
    return path


def _qwen_image(tmp: Path) -> Path:
    from tests.fixtures.qwen_image_files import write_qwen_image_unet
    return write_qwen_image_unet(tmp)


def _hidream(tmp: Path) -> Path:
    from tests.fixtures.hidream_files import write_hidream_unet
    return write_hidream_unet(tmp)


def _omnigen2(tmp: Path) -> Path:
    from tests.fixtures.omnigen2_files import write_omnigen2_unet
    return write_omnigen2_unet(tmp)


def _lumina2(tmp: Path) -> Path:
    from tests.fixtures.lumina2_files import write_lumina2_unet
    return write_lumina2_unet(tmp)


def _zimage(tmp: Path) -> Path:
    from tests.fixtures.zimage_files import write_zimage_unet
    return write_zimage_unet(tmp)


def _chroma_radiance(tmp: Path) -> Path:
    from tests.fixtures.chroma_radiance_files import write_tiny_radiance
    return write_tiny_radiance(tmp / "radiance_tiny.safetensors")


def _ace_step1(tmp: Path) -> Path:
    from tests.fixtures.ace1_files import write_ace1_diffusion_model
    return write_ace1_diffusion_model(tmp / "ace_step_tiny.safetensors")


NETWORKS: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "hunyuan_video": (_hunyuan_video, "comfy.ldm.hunyuan_video.model", "HunyuanVideo"),
    "qwen_image": (_qwen_image, "comfy.ldm.qwen_image.model", "QwenImageTransformer2DModel"),
    "hidream": (_hidream, "comfy.ldm.hidream.model", "HiDreamImageTransformer2DModel"),
    "omnigen2": (_omnigen2, "comfy.ldm.omnigen.omnigen2", "OmniGen2Transformer2DModel"),
    "lumina2": (_lumina2, "comfy.ldm.lumina.model", "NextDiT"),
    "zimage": (_zimage, "comfy.ldm.lumina.model", "NextDiT"),
    "chroma_radiance": (_chroma_radiance, "comfy.ldm.chroma_radiance.model", "ChromaRadiance"),
    "ace_step1": (_ace_step1, "comfy.ldm.ace.model", "ACEStepTransformer2DModel"),
}
# ComfyUI's classes that no network of another family may match (a pack's isinstance dispatch)
EXCLUSIVE = {name: (module, cls) for name, (_w, module, cls) in NETWORKS.items() if module != "comfy.ldm.lumina.model"}


@pytest.mark.parametrize("family", sorted(NETWORKS))
def test_a_loaded_network_is_an_instance_of_comfyuis_class(session, tmp_path, family):
    from comfy_core.split.diffusion_model import load_diffusion_model

    write, module_name, class_name = NETWORKS[family]
    network = load_diffusion_model(write(tmp_path)).model.diffusion_model
    assert isinstance(network, getattr(importlib.import_module(module_name), class_name))
    for other, (other_module, other_class) in EXCLUSIVE.items():
        if other != family and not (family == "chroma_radiance" and other_class == "Chroma"):
            assert not isinstance(network, getattr(importlib.import_module(other_module), other_class)), other


def test_chroma_radiance_is_a_chroma_as_in_comfyui(session, tmp_path):
    import comfy.ldm.chroma.model
    import comfy.ldm.chroma_radiance.model

    from comfy_core.split.diffusion_model import load_diffusion_model

    network = load_diffusion_model(_chroma_radiance(tmp_path)).model.diffusion_model
    assert isinstance(network, comfy.ldm.chroma_radiance.model.ChromaRadiance)
    assert isinstance(network, comfy.ldm.chroma.model.Chroma)


def test_a_pack_reads_the_blocks_of_a_loaded_network_under_comfyuis_names(session, tmp_path):
    """A block-swap / cache pack walks `diffusion_model.modules()` for ComfyUI's block classes."""
    import comfy.ldm.hidream.model as hidream
    import comfy.ldm.qwen_image.model as qwen_image

    from comfy_core.split.diffusion_model import load_diffusion_model

    qwen = load_diffusion_model(_qwen_image(tmp_path)).model.diffusion_model
    blocks = [m for m in qwen.modules() if isinstance(m, qwen_image.QwenImageTransformerBlock)]
    assert blocks and len(blocks) == len(qwen.transformer_blocks)
    hi = load_diffusion_model(_hidream(tmp_path)).model.diffusion_model
    assert any(isinstance(m, hidream.HiDreamImageTransformerBlock) for m in hi.modules())
    assert any(isinstance(m, hidream.HiDreamImageSingleTransformerBlock) for m in hi.modules())


def test_a_loaded_stable_audio_checkpoint_is_made_of_comfyuis_audio_classes(session, tmp_path):
    import comfy.ldm.audio.autoencoder
    import comfy.ldm.audio.dit
    import comfy.sd
    import comfy.text_encoders.sa_t5

    from tests.fixtures.stable_audio_files import write_checkpoint, write_t5_base

    model, _, vae, _ = comfy.sd.load_checkpoint_guess_config(
        str(write_checkpoint(tmp_path / "stable_audio_open_tiny.safetensors")))
    clip = comfy.sd.load_clip(ckpt_paths=[str(write_t5_base(tmp_path / "t5_base.safetensors"))],
                              clip_type=comfy.sd.CLIPType.STABLE_AUDIO)
    assert isinstance(model.model.diffusion_model, comfy.ldm.audio.dit.AudioDiffusionTransformer)
    assert any(isinstance(m, comfy.ldm.audio.autoencoder.AudioOobleckVAE) for m in vae.first_stage_model.modules())
    assert isinstance(clip.cond_stage_model, comfy.text_encoders.sa_t5.SAT5Model)
    assert isinstance(clip.tokenizer, comfy.text_encoders.sa_t5.SAT5Tokenizer)


def test_a_lotus_d_model_is_comfyuis_lotus(session, tmp_path):
    import comfy.model_base
    import comfy.supported_models

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.template_models_lotus import tiny_lotus_d_state_dict

    model = load_diffusion_model(save(tiny_lotus_d_state_dict(), tmp_path / "lotus-depth-d.safetensors")).model
    assert isinstance(model, comfy.model_base.Lotus)
    assert not isinstance(model, comfy.model_base.SD21UNCLIP)
    assert isinstance(model.model_config, comfy.supported_models.LotusD)
    assert isinstance(model.model_config, comfy.supported_models.SD20)


def test_a_loaded_hunyuan3d_network_is_comfyuis_class(session, tmp_path):
    import comfy.ldm.hunyuan3d.model
    import comfy.ldm.hunyuan3dv2_1.hunyuandit

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_hunyuan3d import WRITERS_HUNYUAN3D, file_kind_hunyuan3d

    for name, cls, other in (("hunyuan3d-dit-v2-mv.safetensors", comfy.ldm.hunyuan3d.model.Hunyuan3Dv2,
                              comfy.ldm.hunyuan3dv2_1.hunyuandit.HunYuanDiTPlain),
                             ("hunyuan_3d_v2.1.safetensors", comfy.ldm.hunyuan3dv2_1.hunyuandit.HunYuanDiTPlain,
                              comfy.ldm.hunyuan3d.model.Hunyuan3Dv2)):
        path = tmp_path / name
        WRITERS_HUNYUAN3D[file_kind_hunyuan3d("checkpoints", name)](path)
        network = load_diffusion_model(path).model.diffusion_model
        assert isinstance(network, cls) and not isinstance(network, other)
