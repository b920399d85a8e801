"""Model families (SD1.x, SD2.x, SDXL, SDXL refiner, their inpainting and instruct-pix2pix
variants, SD2.1 unCLIP, Stable Video Diffusion, SD3/SD3.5, Flux.1 dev/Kontext and schnell, Chroma, the
Wan 2.1 / 2.2 video DiTs, Z-Image, Lumina-Image 2.0, Qwen-Image, Flux.2, HiDream, LTX-Video, LTX-2,
OmniGen2 and Ovis-Image) and their registry.

`default_registry()` returns a new `FamilyRegistry` holding the built-in families; callers that
add their own build on it (`registry.register(my_family.definition())`). See README.md.
"""
from __future__ import annotations

from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.registry import Detection, FamilyRegistrationError, FamilyRegistry


def default_registry() -> FamilyRegistry:
    """A fresh registry with the built-in families, one registration line each (a family is its
    package `comfy_core/families/<name>/`; variants are modules of their base family's package)."""
    from comfy_core.families import chroma, flux, lumina2, sd1, sd2, sd3, sdxl, svd, zimage
    from comfy_core.families.chroma import radiance as chroma_radiance
    from comfy_core.families.flux import schnell as flux_schnell
    from comfy_core.families.flux import longcat as flux_longcat
    from comfy_core.families.sd1 import inpaint as sd1_inpaint, ip2p as sd1_ip2p
    from comfy_core.families.sd2 import inpaint as sd2_inpaint, lotus as sd2_lotus, unclip as sd21_unclip
    from comfy_core.families.sdxl import inpaint as sdxl_inpaint, ip2p as sdxl_ip2p, refiner as sdxl_refiner
    from comfy_core.families.wan import (wan21, wan21_camera, wan21_fun_control, wan21_i2v, wan21_vace, wan22,
                                         wan22_camera, wan22_i2v)
    from comfy_core.families.wan import wan22_s2v, wan21_humo
    from comfy_core.families.wan import wan_animate2
    from comfy_core.families.wan import dancer_family as wan_dancer
    from comfy_core.families.wan import wan21_scail, wan21_scail2
    from comfy_core.families.wan import wan22_animate
    from comfy_core.families import hidream, qwen_image
    from comfy_core.families import qwen_image21
    from comfy_core.families import flux2
    from comfy_core.families.flux2 import klein as flux2_klein
    from comfy_core.families import flux3
    from comfy_core.families import ltxv
    from comfy_core.families import cogvideox
    from comfy_core.families import ltx2
    from comfy_core.families import omnigen2
    from comfy_core.families import boogu
    from comfy_core.families import ovis_image
    from comfy_core.families import ace_step
    from comfy_core.families import ace_step15
    from comfy_core.families import stable_audio
    from comfy_core.families.stable_audio import sa3 as stable_audio3
    from comfy_core.families import hunyuan_video
    from comfy_core.families.hunyuan_video import i2v as hunyuan_video_i2v, skyreels as hunyuan_video_skyreels
    from comfy_core.families import hunyuan_video15
    from comfy_core.families.hunyuan_video15 import sr as hunyuan_video15_sr
    from comfy_core.families import kandinsky5
    from comfy_core.families.kandinsky5 import image as kandinsky5_image
    from comfy_core.families import minimax_h3
    from comfy_core.families import minimax_music3
    from comfy_core.families import sdpose
    from comfy_core.families import hunyuan3d
    from comfy_core.families.hunyuan3d import mini as hunyuan3d_mini, v21 as hunyuan3d21
    from comfy_core.families import anima
    from comfy_core.families import ernie_image
    from comfy_core.families import seedvr2
    from comfy_core.families import ideogram4
    from comfy_core.families import krea2
    from comfy_core.families import joyimage
    from comfy_core.families import mage
    from comfy_core.families import fibo2
    from comfy_core.families import hidream_o1
    from comfy_core.families import lens
    from comfy_core.families import pixeldit
    from comfy_core.families import newbie
    from comfy_core.families import ming_image

    return FamilyRegistry([
        sd1.definition(),
        sd2.definition(),
        sdxl.definition(),
        sdxl_refiner.definition(),
        sd1_inpaint.definition(),
        sd1_ip2p.definition(),
        sd2_inpaint.definition(),
        sdxl_inpaint.definition(),
        sdxl_ip2p.definition(),
        sd21_unclip.definition(),
        sd2_lotus.lotus_d_definition(),
        svd.definition(),
        sd3.definition(),
        flux.definition(),
        flux_schnell.definition(),
        flux_longcat.definition(),
        chroma.definition(),
        chroma_radiance.definition(),
        wan21.definition(),
        wan21_i2v.definition(),
        wan21_fun_control.definition(),
        wan21_vace.definition(),
        wan21_camera.definition(),
        wan22.definition(),
        wan22_i2v.definition(),
        wan22_camera.definition(),
        wan22_s2v.definition(),
        wan21_humo.definition(),
        wan_animate2.definition(),
        wan_dancer.definition(),
        wan21_scail.definition(), wan21_scail2.definition(),
        wan22_animate.definition(),
        fibo2.definition(),  # before Z-Image: its diffusers-layout test also fits Fibo 2.0's names
        zimage.definition(),
        ming_image.definition(),  # Z-Image's NextDiT without pad tokens (split files: its `masked_pad_multiple` fact)
        lumina2.definition(),
        newbie.definition(),
        qwen_image.definition(),
        qwen_image21.definition(),
        flux2.definition(), flux2_klein.definition(),
        flux3.definition(),
        hidream.definition(),
        ltxv.definition(),
        cogvideox.definition(), cogvideox.definition_2b(),
        ltx2.definition(),
        omnigen2.definition(),
        boogu.definition(),
        ovis_image.definition(),
        ace_step.definition(), ace_step15.definition(),
        stable_audio.definition(), stable_audio3.definition(),
        hunyuan_video.definition(), hunyuan_video_i2v.definition(), hunyuan_video_skyreels.definition(),
        hunyuan_video15.definition(), hunyuan_video15_sr.definition(),
        kandinsky5.definition(), kandinsky5_image.definition(),
        minimax_h3.definition(),
        minimax_music3.definition(),
        sdpose.definition(),
        # before Hunyuan3D: its 2.1 marker `t_embedder.mlp.2.weight` also names PixelDiT's split files
        pixeldit.definition(), pixeldit.pid_definition(),
        hunyuan3d.definition(), hunyuan3d_mini.definition(), hunyuan3d21.definition(),
        anima.definition(),
        ernie_image.definition(),
        seedvr2.definition(),
        lens.definition(),
        ideogram4.definition(),
        krea2.definition(),
        joyimage.definition(),
        mage.definition(),
        hidream_o1.definition(),
    ])


def encoder_sets() -> list:
    """The text-encoder sets of the built-in families (`EncoderSetSpec`s), for loaders of text
    encoders alone and for callers that build a CLIP from a state dict."""
    return default_registry().encoder_sets()


def encoder_set_for(configs: list) -> object:
    """The built-in encoder set formed by these detected towers."""
    from comfy_core.text_encoders.encoder_set import spec_for_slots

    return spec_for_slots([c.slot for c in configs], encoder_sets())


__all__ = ["Detection", "Family", "FamilyRegistrationError", "FamilyRegistry", "Geometry", "SamplingPolicy",
           "Signature", "default_registry", "encoder_set_for", "encoder_sets"]
