"""The newest official template package (`comfyui-workflow-templates-json`, 0.1.123 when this was
written): every local-model template whose nodes all exist here (bench/template_coverage.py's
"covered") runs headless through `main.py run` on tiny files (tests/fixtures/template_models.py;
the 2026 image families' files in tests/fixtures/template_models_2026.py), subgraph templates
included, or is listed with why it does not: `OUT_OF_SCOPE` (a model family not written here) or
`NOT_RUNNING` (run, and must fail for the reason given, so a fix shows up as a failure).

The package is a test dependency (requirements-dev.txt pins the version these tests were written
for); it is also found as the wheel bench/template_coverage.py fetches into
~/.cache/comfy-engine/templates/, or at `COMFY_ENGINE_NEWEST_TEMPLATES=<wheel or folder>` (a newer
one to try); without any of them these tests are skipped.

Image templates run as saved (the editor workflow itself goes to `main.py run`, which converts
it); video templates (Wan, SVD) and the SDXL ones are converted first and made small as in
test_template_workflows_wan.py (64 px, 9 frames), then run as API prompts. The default run takes a few that cover the paths; all
of them: `pytest tests/web/test_template_workflows_2026.py --all-templates`.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image

from graph.editor_workflow import editor_to_prompt
from tests.fixtures.template_models import provide_files
from web.config import ServerConfig
from web.headless import run_workflow

ROOT = Path(__file__).resolve().parents[2]


def _coverage_module():
    spec = importlib.util.spec_from_file_location("template_coverage", ROOT / "bench" / "template_coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("template_coverage", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return sys.modules["template_coverage"]


coverage_tool = _coverage_module()
NEWEST = coverage_tool.newest_templates(os.environ.get("COMFY_ENGINE_NEWEST_TEMPLATES"), download=False)
pytestmark = pytest.mark.skipif(NEWEST is None, reason="the newest comfyui-workflow-templates-json package is not "
                                "here: run bench/template_coverage.py once (it fetches the wheel)")

# Wall time of each LTX-2 run made small on the shared 2-core machine (load 6-8), through this module's
# `_run` (`pytest --all-templates -k "test_template_runs and ltx2"`: 12 passed, 52 s in all): the first
# run of a process also pays ~10-20 s of imports, the later ones reuse them.
LTX_TIMES = {
    "video_ltx2_t2v": "4-31 s", "video_ltx2_t2v_distilled": "2-4 s", "video_ltx2_i2v": "3-24 s",
    "video_ltx2_i2v_distilled": "2-7 s", "video_ltx2_canny_to_video": "2-8 s", "video_ltx2_3_t2v": "6-16 s",
    "video_ltx2_3_i2v": "1-6 s", "video_ltx2_3_ia2v": "4-21 s", "video_ltx2_3_flf2v": "1-24 s",
    "video_ltx2_3_id_lora": "1-9 s", "template_ltx2_3_style_transition": "2-12 s",
    "template_ltx2_3_ic_lora_ingredients": "4-23 s", "video_ltx2_3_ic_lora": "29-50 s"}
# LTX-2.5 made small, as LTX_TIMES (through `_run`, shared 2-core machine; the first run of a process pays the imports).
LTX25_TIMES = {"video_ltx2_5_t2v": "8-14 s", "video_ltx2_5_i2v": "3-8 s", "video_ltx2_5_flf2v": "1-4 s"}
# FLUX 3 Klein (comfy_core/families/flux3, tests/fixtures/template_models_flux3.py), made small (64 px, TextGenerate at
# SMALL_TOKENS): its DiT (int8 ConvRot, base and flow map), Qwen3-VL 4B (type flux3), the Flux.2 VAE, and as saved the
# prompt through the Qwen3.5 9B upsampler (ComfySwitchNode picks TextGenerate; the edit templates give it the input
# image), whose release is ComfyUI's int4 asym_w4a8_int8 (comfy_core/weights/quant_w4a8.py), PreviewAny's STRING and
# SaveImage's IMAGE outputs. Wall time of a run through `_run` on the shared 2-core machine (load ~6), files included.
FLUX3_TIMES = {
    "image_flux3_klein_t2i": "53 s: the base DiT, 50 steps cfg 3.5; the upsampler's 24 tokens encoded by Qwen3-VL",
    "image_flux3_klein_distilled_t2i": "31-33 s: the distilled flow map, 16 steps",
    "image_flux3_klein_image_edit": "69 s: the base DiT with the reference image; the upsampler reads the image too",
    "image_flux3_klein_distilled_image_edit": "85 s (the first run of a process: imports, the Qwen3-VL file)",
}
# SDPose: wall time of a run through `_run` on the shared 2-core machine, files included.
SDPOSE_TIMES = {"utility_sdpose_ood_image_to_pose": "6-8 s (the process's first run: imports included)",
                "utility_sdpose_ood_video_to_pose_map": "36-67 s"}
# MiniMax H3, made small: wall time of a run through `_run` on the shared 2-core machine (load ~8), files included.
MINIMAX_TIMES = {
    "video_minimax_h3_t2v": "4-10 s", "video_minimax_h3_i2v": "6-10 s", "video_minimax_h3_i2v_continuation": "5-8 s",
    "video_minimax_h3_r2v": "3-8 s", "video_minimax_h3_multiframe_reference": "8-15 s",
    "video_fastvideo_fasth3_t2v": "3-7 s", "video_fastvideo_fasth3_i2v": "2-4 s",
    "video_fasth3_ominiref_r2v": "6-14 s (the first of a process: the text-encoder file)",
    "image_minimax_h3_t2i": "7 s",
    "video_minimax_h3_fun_controlnet_union": "95-140 s (the SDPose pose video most of it)"}
# MoGe templates, as saved: wall time of a run through `_run` on the shared 2-core machine, files included.
MOGE_TIMES = {"utility_moge_depth_estimation": "1-2 s", "utility_moge3_geometry_estimation": "42-53 s", "3d_moge_perspective_to_mesh": "2-5 s",
              "3d_moge_panorama_to_mesh": "14-21 s"}
# Depth Anything 3 templates, as saved: wall time of a run through `_run` on the shared 2-core machine, files included.
DA3_TIMES = {"utility_depth_anything3_image_depth_estimation": "0.4-0.8 s",
             "utility_depth_anything3_video_depth_estimation": "4-8 s"}
# Hunyuan3D 2.0 / 2.1, made small (64 shape tokens, a 17^3 grid): wall time of a run through `_run` on the shared
# 2-core machine, files included.
HY3D_TIMES = {"3d_hunyuan3d_image_to_model": "2-6 s",
              "3d_hunyuan3d-v2.1": "29-42 s (the process's first run: imports included)",
              "3d_hunyuan3d_multiview_to_model": "3-11 s", "3d_hunyuan3d_multiview_to_model_turbo": "4-13 s"}
# The covered templates that run here, with what each adds (wall time of a run on the shared
# 2-core development machine, load ~4).
RUNNING = {
    **{name: "ComfyUI's int8 ConvRot diffusion model (`*_int8_convrot`, comfy_quant per layer): int8 weights "
             "kept as stored, the input rotated by the regular Hadamard (comfy_core/weights/quant_int8.py)"
       for name in ("image_qwen_image_edit_2511_int8", "image_z_image_int8", "image_z_image_turbo_int8")},
    "basic_datatype_conversion": "1 s: ComfyMathExpression, ComfyNumberConvert, PreviewAny (no model)",
    "basic_image_color_adjustment": "5 s: ten GLSLShader nodes (EGL; llvmpipe on the CPU), CurveEditor, ImageHistogram "
                                    "(no model)",
    # These feed the prompt through PreviewAny, whose STRING output (today's ComfyUI's PreviewAny passes its
    # text on) nodes/preview_any.py lacks: validation skips TextEncodeQwenImage21 ("tuple index out of
    # range" on the link to output 0) and nothing is written until it has it. Timed with those links
    # rerouted to PreviewAny's source; the rest of each graph is as saved.
    "image_qwen_image_2_1_t2i": "141 s at 1024x1024 (25 steps; the VAE decode is 19 s of it), once PreviewAny "
                                "has its output: TextEncodeQwenImage21 without references, QwenImage21Cache",
    "image_qwen_image_2_1_turbo_t2i": "108 s at 1024x1024 (the turbo sampler settings), once PreviewAny has its output",
    "image_qwen_image_2_1_image_edit": "6 s, once PreviewAny has its output: TextEncodeQwenImage21 with a reference image and a "
                                       "VAE (reference latents spliced at their image_slots), ImageCompare",
    "image_qwen_image_2_1_turbo_image_edit": "7 s, once PreviewAny has its output: the turbo settings of the edit",
    "image_qwen_image_2_1_background_removal": (
        "21 s: Qwen-Image 2.1 (comfy_core/families/qwen_image21: single-stream DiT with the prefix K/V cache, "
        "the one-frame RGBA VAE, int8 ConvRot DiT), Qwen3-VL 8B through CLIPLoader type \"qwen_image\", "
        "TextEncodeQwenImage21 with a reference image and a VAE, QwenImage21Cache"),
    "image_omnigen2_t2i": "53 s: OmniGen2 (comfy_core/families/omnigen2) with Qwen2.5-VL-3B (CLIPLoader type "
                          "omnigen2), DualCFGGuider",
    "image_omnigen2_image_edit": "120 s: OmniGen2's reference-image stream (ReferenceLatent on both conditionings)",
    "image_ovis_text_to_image": "56 s: Ovis-Image (comfy_core/families/ovis_image) with Ovis 2.5's Qwen3 (CLIPLoader type "
                                "ovis), ModelSamplingAuraFlow",
    "image_longcat_text_to_image": "LongCat-Image (comfy_core/families/flux/longcat*.py: a Flux variant) with "
                                   "Qwen2.5-VL 7B (CLIPLoader type longcat_image), CFGNorm, FluxGuidance dropped",
    "image_longcat_image_edit": "LongCat-Image-Edit: TextEncodeQwenImageEdit (the image through the text encoder's "
                                "vision tower, its latent as a reference), FluxKontextMultiReferenceLatentMethod",
    "image_chroma1_radiance_text_to_image": "Chroma Radiance in pixel space, VAELoader's 'pixel_space'",
    **{name: "Qwen-Image text to image: the empty 4-D latent gets its frame axis (fix_empty_latent_channels)"
       for name in ("image_qwen_Image_2512", "image_qwen_image", "image_qwen_image_2512_with_2steps_lora",
                    "template_qwen_Image_2512_360_lora", "template_qwen_image_illustration_lora",
                    "template_sugar_coated_gummy_style_qwen")},
    **{name: "Qwen-Image-Edit 2511: FluxKontextMultiReferenceLatentMethod's index_timestep_zero"
       for name in ("image-qwen_image_edit_2511_lora_inflation", "image_qwen_image_edit_2511",
                    "template_qwen_image_edit_2511_systms_action",
                    "templates-1_click_multiple_character_angles-v1.0")},
    "template_qwen_multiangle.app": "33 s (the process's only run: imports included): subgraph, CameraAngle's "
                                    "shot description (nodes/camera_angle.py) as the prompt of Qwen-Image-Edit "
                                    "2511 int8 ConvRot with the Lightning and multiple-angles LoRAs",
    "basic_mask_operations_and_compositing": "4 s: mask nodes on a loaded image (no model)",
    "utility_image_stitch": "15 s: ImageStitch, ResizeImageMaskNode (no model)",
    "utility_interpolation_image_upscale": "7 s: ResizeImageMaskNode / image scaling (no model)",
    "utility-gan_upscaler": "37 s: UpscaleModelLoader (ESRGAN x4)",
    "flux_dev_checkpoint_example": "40 s: subgraph with legacy proxyWidgets, bf16 split files",
    "flux1_krea_dev": "44 s: subgraph, scaled-fp8 diffusion model",
    "flux_canny_model_example": "20 s: Canny dev (32 channels in)",
    "flux_dev_full_text_to_image": "33 s: subgraph, split files",
    "flux_fill_inpaint_example": "15 s: subgraph, Fill dev (96 channels in)",
    "flux_fill_outpaint_example": "23 s: Fill dev, ImagePadForOutpaint",
    "flux_kontext_dev_basic": "52 s: subgraph, Kontext reference latents",
    "flux_redux_model_example": "34 s: SigLIP, Redux",
    "flux_schnell": "26 s: fp8 single file",
    "flux_schnell_full_text_to_image": "24 s: split files",
    "image_flux.1_fill_dev_OneReward": "subgraphs, a Flux LoRA named without its model",
    "image_chroma_text_to_image": "88 s: Chroma split files, SamplerCustomAdvanced",
    "sd3.5_large_blur": "92 s: SD3.5 ControlNet (blur)",
    "sd3.5_large_canny_controlnet_example": "155 s: SD3.5 ControlNet (canny)",
    "sd3.5_simple_example": "79 s: SD3.5 large single file",
    "image_sdxl_simple": "SDXL base (made small: 250 s at its 1024 px)",
    "sdxl_refiner_prompt_example": "70 s small: SDXL base + refiner",
    "sdxl_revision_text_prompts": "91 s small: SDXL revision (CLIP vision G, unCLIPConditioning)",
    "sdxl_simple_example": "99 s small: SDXL base + refiner, KSamplerAdvanced",
    "sdxlturbo_example": "29 s small: SDXL Turbo, SDTurboScheduler",
    "txt_to_image_to_video": "206 s small: SDXL image, then SVD img2vid",
    "templates-6-key-frames": "129 s small: subgraphs, Wan 2.2 A14B i2v experts with lightx2v LoRAs, key frames",
    "text_to_video_wan": "13 s small: Wan 2.1 t2v",
    "image_to_video_wan": "28 s small: Wan 2.1 i2v, clip_vision_h",
    "video_wan2.1_fun_camera_v1.1_1.3B": "38 s small: camera control (2.1)",
    "video_wan2.1_fun_camera_v1.1_14B": "49 s small: camera control (2.1, 14B)",
    "video_wan2_2_14B_flf2v": "42 s small: A14B first-last-frame",
    "video_wan2_2_14B_fun_camera": "43 s small: WanCameraImageToVideo (2.2)",
    "video_wan2_2_14B_fun_control": "73 s small: Wan22FunControlToVideo",
    "video_wan2_2_14B_fun_inpaint": "36 s small: A14B Fun inpaint",
    "video_wan2_2_14B_i2v": "123 s small: subgraphs, A14B i2v experts",
    "video_wan2_2_14B_s2v": "14 s small: S2V, wav2vec2 AudioEncoderLoader / AudioEncoderEncode, WanSoundImageToVideo",
    "video_humo": "6 s small: Wan HuMo 17B fp8, Whisper large-v3 AudioEncoderLoader / Encode, WanHuMoImageToVideo",
    # Wan-Animate-2 (comfy_core/families/wan/animate2.py, tests/fixtures/template_models_wan_animate.py): its int8
    # ConvRot i2v-shaped DiT told apart by the file's metadata, the pose branch, WanAnimate2Cache (int8 ConvRot
    # activations). Made small the pose video's 12 frames are one 13-frame clip, under ContextWindowsManual's 21
    # latent frames (no windows); the stitched side-by-side output ("Video Stitch") runs too, on SaveVideo's
    # VIDEO output (today's SaveVideo passes its video on).
    "video_wan_animate2": "15-25 s small (a process's first run: imports included): subgraphs, StartLoop / "
                          "EndLoop (one pass), lightx2v LoRA, WanAnimate2ToVideo, WanAnimate2Cache, SamplerCustom "
                          "(6 steps), RebatchImages by the drive video's frame count",
    "video_wan_animate2_distilled": "3-5 s small (22 s as a process's first run): the distilled Animate 2 DiT, "
                                    "10 steps, BatchImagesNode",
    # Wan Dancer (comfy_core/families/wan/dancer.py, tests/fixtures/template_models_wan_dancer.py): the global DiT
    # at the song's keyframe rate, LatentCutToBatch / VAEDecode to keyframes, WanDancerPadKeyframesList's two
    # segments (list outputs: the local DiT runs once per segment with its keyframe mask and audio slice).
    "video_wan_dancer": "15 s small: subgraphs, two scaled-fp8 Dancer DiTs with lightx2v LoRAs, WanDancerEncodeAudio, "
                        "WanDancerVideo, WanDancerPadKeyframesList, SkipLayerGuidanceDiTSimple, SamplerCustom",
    # Causal Forcing (comfy_core/sampling/ar_video.py, comfy_core/families/wan/causal.py,
    # tests/fixtures/template_models_causal_forcing.py): the Wan 2.1 T2V generator sampled block by block.
    "video_causal_forcing_i2v": "subgraph, ARVideoI2V (start image into the KV cache), SamplerARVideo framewise "
                                "(4 steps, CFGGuider cfg 1), SamplerCustomAdvanced, CreateVideo, SaveVideo",
    "video_wan2_1_infinitetalk": "25 s small (50 s as a lone pytest run, imports included): subgraphs, Wan 2.1 I2V "
                                 "14B (Kijai's scaled fp8) with a lightx2v LoRA, ModelPatchLoader (MultiTalk), wav2vec2 "
                                 "chinese-base, WanInfiniteTalkToVideo two speakers (Painter masks, AudioConcat), "
                                 "extended once from previous_frames",
    "video_wan2_2_14B_t2v": "67 s small: subgraphs, A14B t2v experts, lightx2v LoRAs",
    "video_wan2_2_5B_fun_control": "66 s small: Wan 2.2 Fun 5B control",
    "video_wan2_2_5B_fun_inpaint": "78 s small: Wan 2.2 Fun 5B inpaint",
    "video_wan2_2_5B_ti2v": "57 s small: TI2V-5B, Wan 2.2 VAE",
    "video_wan_ati": "64 s small: WanTrackToVideo",
    "video_wanmove_480p": "22 s small: Wan-Move (Kijai's fp8-scaled Wan 2.1 I2V fine-tune, loaded as Wan 2.1 I2V): "
                          "GenerateTracks (Bezier), WanMoveConcatTrack, WanMoveTrackToVideo",
    "video_wan_vace_14B_ref2v": "20 s small: VACE reference image",
    "video_wan_vace_14B_t2v": "14 s small: VACE t2v",
    "video_wan_vace_14B_v2v": "11-74 s small: VACE control video from LoadVideo",
    "video_wan_vace_outpainting": "28 s small: VACE outpainting",
    "video_wan_vace_flf2v": "56 s small: subgraphs (nested), VACE first-last frame, sizes and frame count "
                            "computed by ComfyMathExpression, ComfySwitchNode, BatchImagesNode",
    "wan2.1_flf2v_720_f16": "32 s small: first-last-frame, two CLIP-vision embeddings",
    "wan2.1_fun_control": "60 s small: Fun control, Canny video",
    "wan2.1_fun_inp": "33 s small: Fun inpaint",
    "flux1_dev_uso_reference_image_gen": "17-26 s: subgraphs, ModelPatchLoader (USO projector), USOStyleReference "
                                         "on SigLIP layers, the USO DiT LoRA, FluxKontextMultiReferenceLatentMethod",
    "image_qwen_image_edit": "44 s: subgraph, Qwen-Image-Edit (fp8 DiT), TextEncodeQwenImageEdit with the "
                             "Qwen2.5-VL vision tower, Wan 2.1 VAE, a LoRA",
    "image_qwen_image_edit_2509": "41 s: subgraph, Qwen-Image-Edit-2509, TextEncodeQwenImageEditPlus",
    "image_qwen_image_edit_2509_relight": "44 s: subgraph, Qwen-Image-Edit-2509 with a relight LoRA",
    "image_qwen_image_union_control_lora": "98 s: subgraph, Qwen-Image with a LoRA named as DiffSynth's union control one",
    "templates-image_to_real": "26 s: subgraph, Qwen-Image-Edit-2509 with a LoRA",
    "templates-portrait_light_migration": "231 s: subgraphs, Qwen-Image-Edit-2509 relighting",
    "templates-1_click_multiple_scene_angles-v1.0": "367 s: subgraphs, several Qwen-Image-Edit-2509 passes (camera angles)",
    "templates_rob_portrait_light_migration.app": "456 s (a loaded machine): subgraphs, Qwen-Image-Edit-2509 "
                                                  "relighting",
    "image_z_image": "33 s: Z-Image (bf16 NextDiT, UNETLoader), Qwen3-4B by CLIPLoader type lumina2, Flux VAE, "
                     "ResolutionSelector, SaveImageAdvanced, 25 steps cfg 4",
    "image_z_image_turbo": "14-22 s: subgraph, Z-Image Turbo, ConditioningZeroOut, 8 steps",
    "basic_switch_node": "7-38 s: subgraph, ComfySwitchNode choosing a Z-Image LoRA (diffusers names under "
                         "diffusion_model.), PreviewAny",
    "utility_z_image_turbo_2k_upscaler.app": "158 s: subgraph, Z-Image Turbo img2img after ESRGAN x4 to 2k, "
                                             "ImageScaleToTotalPixels, ImageCompare",
    # Qwen-Image ControlNets, model patches, Layered (tests/fixtures/template_models_qwen.py)
    "image_qwen_image_instantx_inpainting_controlnet": "163-179 s: InstantX's inpainting ControlNet "
                                                       "(ControlNetLoader), ControlNetInpaintingAliMamaApply (mask on "
                                                       "the 5-D hint latent), SetLatentNoiseMask on a 5-D latent",
    "image_qwen_image_controlnet_patch": "146-346 s: ModelPatchLoader (DiffSynth's block-wise ControlNet), "
                                         "QwenImageDiffsynthControlnet at 1.68 MP",
    "image_z_image_turbo_fun_union_controlnet": "2-6 s: subgraph, VideoX-Fun's Z-Image union ControlNet (bf16 patch "
                                                "on a float32 model) through QwenImageDiffsynthControlnet",
    "image_qwen_image_layered": "33-53 s: subgraph, Qwen-Image-Layered (RGBA VAE, EmptyQwenImageLayeredLatentImage, "
                                "ReferenceLatent, LatentCut, LatentCutToBatch)",
    "image_qwen_image_layered_control": "43-48 s: subgraph, Qwen-Image-Layered control, UNETLoader fp8_e4m3fn",
    # Flux.2 (tests/fixtures/template_models_flux2.py): two runs each on the shared machine (load 6-11)
    "image_flux2_klein_text_to_image": "57-68 s: subgraph, Klein 4B distilled and base (bf16), Qwen3-4B by "
                                       "CLIPLoader type flux2 (layers 9 / 18 / 27), Flux2Scheduler, CFGGuider",
    "image_flux2_klein_image_edit_4b_distilled": "40-88 s: subgraphs, Klein 4B fp8, VAEEncode of the scaled input, "
                                                 "ReferenceLatent, ConditioningZeroOut, 4 steps",
    "image_flux2_klein_image_edit_4b_base": "133-261 s: subgraphs, Klein base 4B fp8, BFL's small-decoder VAE "
                                            "(a narrower decoder), reference latents, CFG",
    "image_flux2_klein_image_edit_9b_distilled": "56 s: subgraphs, Klein 9B fp8, Qwen3-8B fp8, small-decoder VAE",
    "image_flux2_klein_image_edit_9b_base": "222 s: subgraphs, Klein base 9B fp8, Qwen3-8B, reference latents, CFG",
    "image_flux2_klein_9b_kv_image_edit": "49 s: subgraphs, Klein 9B KV fp8, two references through FluxKVCache "
                                          "(index_timestep_zero, K/V kept from the first of 4 steps), CFGGuider",
    "image_flux2_text_to_image_9b": "43 s: Klein base 9B fp8, Qwen3-8B fp8, small-decoder VAE",
    "image_flux2_text_to_image": "55-129 s: subgraph, FLUX.2 dev fp8, Mistral Small 3 with its tekken tokenizer, "
                                 "FluxGuidance, BasicGuider, ComfySwitchNode around a Turbo LoRA",
    "image_flux2": "91-228 s: subgraphs, FLUX.2 dev fp8, Mistral Small 3, reference image (ReferenceLatent), "
                   "small-decoder VAE",
    "image_flux2_fp8": "134-229 s: subgraphs, FLUX.2 dev fp8, Mistral Small 3 fp8, Flux.2 VAE, reference image",
    "hidream_i1_dev": "17-72 s small: HiDream-I1 Dev (fp8 MoE DiT), QuadrupleCLIPLoader (CLIP-L, CLIP-G, T5, "
                      "scaled-fp8 Llama 3.1), ModelSamplingSD3 6",
    "hidream_i1_fast": "10-43 s small: HiDream-I1 Fast, 16 steps",
    "hidream_i1_full": "40-95 s small: HiDream-I1 Full, 50 steps cfg 5",
    "hidream_e1_full": "27-99 s small: HiDream-E1 (the source latent appended along the width), "
                       "InstructPixToPixConditioning, DualCFGGuider",
    "image_netayume_lumina_t2i": "107-189 s: subgraphs (nested), a Lumina 2 all-in-one checkpoint (NextDiT, Gemma 2 "
                                 "with its SentencePiece model, Flux VAE), ModelSamplingAuraFlow, res_multistep",
    "hidream_e1_1": "62-173 s small: HiDream-E1.1, CFGNorm, ImageScaleToTotalPixels, UNETLoader fp8_e4m3fn_fast",
    "image_hidream_o1": "3 s small (64x64): HiDream-O1 full (bf16 checkpoint: its tokenizer-only CLIP and "
                        "pixel-space VAE), ModelNoiseScale 8, HiDreamO1PatchSeamSmoothing, "
                        "EmptyHiDreamO1LatentImage, HiDreamO1ReferenceImages (switched off), dpmpp_2m_sde_gpu, "
                        "SamplerCustom cfg 5",
    "image_hidream_o1_dev": "1 s small (the 96x64 reference's size): HiDream-O1 dev (fp8 scaled checkpoint), "
                            "ModelNoiseScale 7.6, SamplerLCM (noise clip 2.5), a reference image through "
                            "HiDreamO1ReferenceImages (the Qwen3-VL vision tower and 32-pixel patches), "
                            "SamplerCustom cfg 1",
    "llm_qwen3_5_text_gen": "TextGenerate with Qwen3.5 4B by CLIPLoader type stable_diffusion (any type gives "
                            "ComfyUI's Qwen3.5 encoder), an image through its vision tower, sampled, PreviewAny",
    "llm_gemma4_text_gen": "6 s small: TextGenerate with Gemma 4 E4B fp8 scaled by CLIPLoader type stable_diffusion "
                           "(its tokenizer.json from the file), LoadImage through its vision encoder and LoadAudio "
                           "through its audio conformer (log-mel features, 16 kHz Kaiser resampling), sampled, "
                           "PreviewAny (tests/fixtures/template_models_ltx25.py's tiny E4B)",
    "llm_qwen3_text_gen": "TextGenerate with Qwen3-4B by CLIPLoader type ltxv (Z-Image's encoder set, as ComfyUI "
                          "builds it), PreviewAny",
    "ltxv_text_to_video": "small: LTX-Video 0.9 all-in-one checkpoint, T5-XXL by CLIPLoader type ltxv, "
                          "LTXVScheduler 30 steps, SamplerCustom, CreateVideo / SaveVideo",
    "ltxv_image_to_video": "small: LTX-Video 0.9.5 checkpoint, LTXVImgToVideo (noise mask keeps the first latent "
                           "frame), LTXVScheduler, SamplerCustom",
    # LTX-2 / 2.3 (tests/fixtures/template_models_ltx2.py): made small (64 px, 9 frames, 1 s of audio); each
    # saved video is decoded back (`_check_ltx_video`). Times: LTX_TIMES.
    **{name: f"{LTX_TIMES[name]} small: {what}" for name, what in {
        "video_ltx2_t2v": "subgraph, LTX-2 19B dev fp8 all-in-one checkpoint (DiT, video VAE, audio VAE and "
                          "HiFi-GAN vocoder inside), Gemma 3 12B fp4_mixed (NVFP4 layers) by LTXAVTextEncoderLoader, "
                          "LTXVEmptyLatentAudio / LTXVConcatAVLatent, LTXVScheduler on the nested latent, the "
                          "distilled and camera LoRAs, LatentUpscaleModelLoader + LTXVLatentUpsampler",
        "video_ltx2_t2v_distilled": "the distilled bf16 checkpoint, ManualSigmas, the x2 upsampler",
        "video_ltx2_i2v": "LTXVImgToVideoInplace at both passes, LTXVPreprocess, the x2 upsampler",
        "video_ltx2_i2v_distilled": "distilled image to video with the camera LoRA",
        "video_ltx2_canny_to_video": "Canny IC-LoRA guide (LTXVAddGuide on a LoadVideo's Canny frames), LTXVCropGuides",
        "video_ltx2_3_t2v": "subgraph, LTX-2.3 22B dev fp8 (9-row gated DiT, no caption projection, BigVGAN vocoder "
                            "with bandwidth extension), the per-stream text projection (DualLinearProjection), "
                            "TextGenerateLTX2Prompt behind a ComfySwitchNode (not taken), the Gemma abliterated "
                            "LoRA, the distilled LoRA, the x2 upsampler",
        "video_ltx2_3_i2v": "LTX-2.3 image to video, LTXVImgToVideoInplace, the x2 upsampler",
        "video_ltx2_3_ia2v": "image and audio to video: LoadAudio, TrimAudioDuration, LTXVAudioVAEEncode, the audio "
                             "latent kept by its noise mask",
        "video_ltx2_3_flf2v": "first and last frame (two LTXVAddGuide, LTXVCropGuides), CFGGuider, ManualSigmas",
        "video_ltx2_3_id_lora": "ID-LoRA: LTXVReferenceAudio (reference tokens at negative times, identity "
                                "guidance pass), the x2 upsampler",
        "template_ltx2_3_style_transition": "distilled fp8, a style-transition LoRA",
        "template_ltx2_3_ic_lora_ingredients": "IC-LoRA: GetICLoRAParameters (the LoRA's metadata) into "
                                               "LTXVAddGuide, RepeatImageBatch, ResizeAndPadImage, KSampler",
        "video_ltx2_3_ic_lora": "IC-LoRA guided by MoGe: LoadMoGeModel (tiny MoGe-2), MoGeInference on the "
                                "LoadVideo frames, MoGeRender depth / depth_colored / mask as the guide "
                                "(tests/fixtures/template_models_moge.py)"}.items()},
    # LTX-2.5 (tests/fixtures/template_models_ltx25.py): split files, made small as LTX-2's; each saved video is
    # decoded back (`_check_ltx_video`). Times: LTX25_TIMES.
    **{name: f"{LTX25_TIMES[name]} small: {what}" for name, what in {
        "video_ltx2_5_t2v": "subgraph, the 22B distilled DiT by UNETLoader (int8 ConvRot), Gemma 4 12B with LTX's "
                            "projection by CLIPLoader type ltxv (int8 ConvRot, its own tokenizer.json), the diffusion-"
                            "decoder video VAE (neighbourhood attention, VAEDecodeTiled) and the audio VAE by VAELoader, "
                            "LTXVDualCFGGuider, euler_ancestral, the x2 spatial upsampler; TextGenerateLTX2Prompt "
                            "(Gemma 4 E2B) behind a ComfySwitchNode (not taken)",
        "video_ltx2_5_i2v": "image to video: LTXVPreprocess, LTXVImgToVideoInplace through the diffusion VAE's "
                            "encoder, the x2 upsampler",
        "video_ltx2_5_flf2v": "first and last frame: two LTXVAddGuide, LTXVCropGuides, SamplerEulerAncestral, "
                              "one pass (no upsampler)"}.items()},
    # MiniMax H3 (comfy_core/families/minimax_h3, tests/fixtures/template_models_minimax_h3.py): made small (0.1 MP
    # canvases, 1 s: 39 frames, guides a second in); the nested [video, audio] latent sampled packed, the tiny DiT
    # int8 ConvRot, Qwen3-VL by CLIPLoader type minimax from its NVFP4-AWQ file, the video and audio VAEs; each saved
    # video decoded back (`_check_minimax_video`). Times: MINIMAX_TIMES.
    **{name: f"{MINIMAX_TIMES[name]} small: {what}" for name, what in {
        "video_minimax_h3_t2v": "subgraph, MiniMaxH3ImageToVideo without frames, res_multistep 20 steps, the turbo "
                                "LoRA behind a ComfySwitchNode (not taken), VAEDecode / VAEDecodeAudio on the nested "
                                "latent, CreateVideo / SaveVideo",
        "video_minimax_h3_i2v": "MiniMaxH3ImageToVideo's first frame (a <Picture 1> vision block and a keyframe), "
                                "ImageScaleToTotalPixels, GetImageSize",
        "video_minimax_h3_i2v_continuation": "the i2v graph from another subgraph entry",
        "video_minimax_h3_r2v": "MiniMaxH3ReferenceToVideo with two reference images (reference blocks ahead of "
                                "the targets), the ref2va DiT",
        "video_minimax_h3_multiframe_reference": "three MiniMaxH3AddGuide keyframes chained after the references",
        "video_fastvideo_fasth3_t2v": "FastH3 (8-head PDD output bank, VSA gates), MiniMaxH3SigmaShift 10 / 3, "
                                      "BlockSparseAttention vsa (dense here, as ComfyUI off CUDA), 8 steps; "
                                      "ModelAttentionBackend's comfy kitchen attention (GPU-only) run as PyTorch's",
        "video_fastvideo_fasth3_i2v": "FastH3 image to video",
        "video_fasth3_ominiref_r2v": "FastH3 OmniRef: references, SigmaShift 12 / 3, euler 8 steps",
        "image_minimax_h3_t2i": "EmptyLatentImage's plain latent (downscale_ratio_spacial 8) made the model's by the "
                                "sampler: 32 channels at 1/16, a frame axis, then MiniMaxH3AV's fix_empty_latent "
                                "(the nested latent with its silent audio); one frame decoded",
        "video_minimax_h3_fun_controlnet_union": "SDPose's pose video (RT-DETR boxes, SDPoseDrawKeypoints) as "
                                                 "MiniMaxH3FunControlNetApply's control video: the Fun ControlNet-"
                                                 "Union by ModelPatchLoader (int8 ConvRot), its control stream "
                                                 "beside the ref2va DiT's blocks 0 and 1"}.items()},
    # MiniMax Music 3 (comfy_core/families/minimax_music3, tests/fixtures/template_models_minimax_music3.py): as saved
    # (max_duration 60 s: the AR stage writes up to 1,500 frames), the song decoded back (`_check_minimax_music3_audio`)
    "audio_minimax_music_3": ("20-25 s: subgraph, MiniMaxMusic3TextEncode (CLIPLoader type minimax: the pruned "
                              "int8 ConvRot AR text encoder with its tokenizer_json; the LM and the depth decoder "
                              "write the frames) -> seconds -> EmptyMiniMaxMusic3LatentAudio, ConditioningZeroOut "
                              "(conditioning_scale 0), KSampler euler / simple 30 steps cfg 1.7 on the fp16 DiT "
                              "(windows of 689 latent frames), the DAV decoder through VAEDecodeAudioTiled (the "
                              "ComfySwitchNode's pick; VAEDecodeAudio not run), SaveAudioAdvanced mp3"),
    # ACE-Step 1.5 (tests/fixtures/template_models_ace.py): 120 s songs at 48 kHz as saved (the LM writes 600
    # codes, the VAE decodes 5.76 M samples a channel), each song decoded back (`_check_ace_audio`); load ~7
    "audio_ace_step_1_5_checkpoint": "35-70 s: ACE-Step 1.5 all-in-one checkpoint (DiT, Qwen3 0.6B + LM, 48 kHz "
                                     "Oobleck VAE), TextEncodeAceStepAudio1.5 (600 LM codes, CFG 2), "
                                     "EmptyAceStep1.5LatentAudio, ModelSamplingAuraFlow, 8 steps, SaveAudioAdvanced",
    "audio_ace_step_1_5_split": "64-73 s: split files (UNETLoader, DualCLIPLoader type ace with the 1.7B LM, "
                                "VAELoader's Oobleck VAE), SaveAudioAdvanced mp3",
    "audio_ace_step_1_5_split_4b": "65-115 s: split files with the 4B LM, SaveAudioMP3",
    "audio_ace_step1_5_xl_turbo": "44-54 s: an XL turbo DiT (its encoder narrower than the DiT), the 4B LM",
    "audio_ace_step1_5_xl_base": "71-128 s: XL base, 50 steps, CFG 6 (ConditioningZeroOut: the null embedding)",
    "audio_ace_step1_5_xl_sft": "51-102 s: XL SFT, 50 steps, CFG 7, SaveAudioAdvanced flac",
    # ACE-Step 1 (comfy_core/families/ace_step/, tests/fixtures/template_models_ace1.py): the tiny all-in-one
    # checkpoint, the lyrics through ACE-Step's lyric tokenizer (comfy_core/text_encoders/ace_lyrics.py); 44.1 kHz
    # stereo decoded back (`_check_ace1_audio`)
    "audio_ace_step_1_t2a_song": ("191 s (load ~12): TextEncodeAceStepAudio with the song's lyrics (161 lyric "
                                  "tokens), EmptyAceStepLatentAudio 120 s, 50 steps cfg 5, LatentApplyOperationCFG "
                                  "(Reinhard tonemap), SaveAudioAdvanced flac"),
    "audio_ace_step_1_t2a_instrumentals": ("41 s (load ~12): structure-tag lyrics ('[instrumental]', ...), 30 s, "
                                           "SaveAudioMP3"),
    "audio_ace_step_1_m2m_editing": ("37 s (load ~12, the process's first run: imports included): LoadAudio, "
                                     "VAEEncodeAudio, denoise 0.3 over the song's lyrics"),
    # Kandinsky 5 (comfy_core/families/kandinsky5, tests/fixtures/template_models_kandinsky.py)
    "image_kandinsky5_t2i": "60-62 s: Kandinsky 5 Lite t2i (UNETLoader), Qwen2.5-VL 7B fp8 + CLIP-L by DualCLIPLoader "
                            "type kandinsky5_image, Flux VAE, ModelSamplingSD3 3, 50 steps cfg 3.5",
    "video_kandinsky5_t2v": "7-20 s small: Kandinsky 5 Lite t2v, DualCLIPLoader type kandinsky5, HunyuanVideo 1.0 VAE, "
                            "Kandinsky5ImageToVideo without a start image, ModelSamplingSD3 5, 50 steps",
    "video_kandinsky5_i2v": "7-24 s small: Kandinsky 5 Lite i2v: Kandinsky5ImageToVideo's start latent (time_dim_replace, "
                            "concat_mask), ReplaceVideoLatentFrames, NormalizeVideoLatentStart (made small: 2 start "
                            "frames, so one of the 3 latent frames is left as the reference)",
    "audio_stable_audio_example": "~50 s: Stable Audio Open 1.0 checkpoint (DiT, seconds embedders, Oobleck VAE), "
                                  "T5-base by CLIPLoader type stable_audio, 47.6 s of audio, 50 steps "
                                  "dpmpp_3m_sde_gpu, VAEDecodeAudio, SaveAudioAdvanced",
    # Stable Audio 3 (comfy_core/families/stable_audio/sa3.py, tests/fixtures/stable_audio3_files.py): the
    # subgraph's Qwen3.5 2B (CLIPLoader type stable_diffusion) is TextGenerate's prompt writer (use_reprompt on),
    # T5Gemma by CLIPLoader type stable_audio encodes the written prompt; EmptyLatentAudio(150 s)'s zeros widened
    # to 256 channels; wall time through `_run` on the shared 2-core machine.
    "audio_stable_audio_3_medium": "74-83 s: SA3 Medium single file (shared-AdaLN DiT, seconds_total + padding "
                                   "embedding, SAME VAE), 8 steps lcm cfg 1, VAEDecodeAudio, SaveAudioAdvanced mp3",
    "audio_stable_audio_3_medium_base": "88-128 s: SA3 Medium base, 50 steps lcm cfg 7, otherwise as above",
    # HunyuanVideo 1.5 and Capybara (comfy_core/families/hunyuan_video15, tests/fixtures/template_models_hv15.py):
    # wall time through `_run` (file writing included; the higher figure when the run is the process's first,
    # which pays ~10 s of imports), two runs on the shared 2-core machine; the
    # video ones made small. As shipped the 1080p super-resolution group is bypassed; with it enabled
    # (the SR DiT, LatentUpscaleModelLoader's 1080p upsampler, HunyuanVideo15LatentUpscaleWithModel,
    # HunyuanVideo15SuperResolution) both 720p templates run too (~1-2 s more).
    "video_hunyuan_video_1.5_720p_t2v": "2-11 s: t2v DiT (UNETLoader), Qwen2.5-VL 7B fp8 + ByT5 by DualCLIPLoader type "
                                        "hunyuan_video_15, EmptyHunyuanVideo15Latent, EasyCache, ModelSamplingSD3 7, "
                                        "20 steps cfg 6, the causal 16x VAE (VAEDecode), CreateVideo, SaveVideo",
    "video_hunyuan_video_1.5_720p_i2v": "3-10 s: i2v DiT, HunyuanVideo15ImageToVideo (start-image latent + mask), "
                                        "SigLIP CLIPVisionEncode as clip_vision_output",
    "Image_capybara_v0_1_text_to_image": "17-22 s: Capybara v0.1 (the HunyuanVideo 1.5 network) one frame at 1280 px, "
                                         "20 steps cfg 6",
    "Image_capybara_v0_1_image_edit": "16-21 s: Capybara edit: HunyuanVideo15ImageToVideo with the resized input image, "
                                      "CLIPVisionEncode, one frame at 768 x 1024",
    "video_capybara_v0_1_image_to_video": "2-3 s: Capybara i2v (ResizeAndPadImage, PrimitiveInt sizes)",
    "video_capybara_v0_1_video_edit": "2-3 s: Capybara video edit (LoadVideo, GetVideoComponents, ImageFromBatch)",
    # HunyuanVideo 1.0 (comfy_core/families/hunyuan_video, tests/fixtures/template_models_hunyuan_video.py): wall
    # time through `_run` on the shared 2-core machine (load ~3.4), three runs, files included.
    "hunyuan_video_text_to_video": "6-8 s (the process's only run: imports included), made small: t2v DiT "
                                   "(UNETLoader), CLIP-L + LLaVA-Llama-3 fp8 by DualCLIPLoader type hunyuan_video, "
                                   "EmptyHunyuanLatentVideo, FluxGuidance 6, ModelSamplingSD3 7, BasicGuider, 20 "
                                   "steps, VAEDecodeTiled (HunyuanVideo's causal VAE), CreateVideo, SaveVideo",
    **FLUX3_TIMES,
    # SAM 3.1 (comfy_core/models/sam3, nodes/sam3_nodes.py, tests/fixtures/template_models_sam3.py): the tiny network
    # and text tower of `sam3.1_multiplex_fp16` (CheckpointLoaderSimple: MODEL + CLIP), 1008-pixel frames.
    "utility_image_segment_sam3": "CLIPTextEncode of the SAM 3 CLIP (attention_mask), SAM3_Detect text path, "
                                  "2 SAM refinement passes",
    "utility_video_segment_sam3": "SAM3_Detect over the video's frames (text path), GetVideoComponents",
    "video_wan_vace_inpainting": "SAM3_Detect's mask of the video into Wan VACE inpainting",
    "video_wan2.1_alpha_t2v_14B": "Wan 2.1 T2V + the RGBA and lightx2v LoRAs, 20 uni_pc steps; the latent decoded by "
                                  "Wan-Alpha's RGB and alpha VAEs (Wan 2.1 VAEs), ImageToMask red, InvertMask, "
                                  "JoinImageWithAlpha, SaveAnimatedWEBP",
    "video_wan21_scail2_character_replacement": "SAM3_VideoTrack (text detection, max 4 objects) of the "
                                                "driving video and the reference into SCAIL2ColoredMask, "
                                                "Wan 2.1 SCAIL-2 (tests/fixtures/template_models_wan_scail.py)",
    "video_wan21_scail2_character_replacement_int8": "the same with the int8 ConvRot SCAIL-2 release",
    # Bernini-R (comfy_core/families/wan/bernini.py, nodes/bernini_nodes.py, tests/fixtures/template_models_bernini.py):
    # plain Wan 2.2 A14B t2v experts (scaled fp8) seeing the source as in-context tokens with their own RoPE source id.
    "video_bernini_r_image_editing": "subgraphs, BerniniConditioning with the resized picture as a one-frame source "
                                     "video (ResizeImageMaskNode, GetImageSize), the high / low-noise experts with "
                                     "lightx2v LoRAs (ComfySwitchNode), SplitSigmas, two SamplerCustom res_multistep, "
                                     "ImageCompare",
    "video_bernini_r_video_editing": "subgraphs, LoadVideo / Video Slice / GetVideoComponents as the source video "
                                     "(its frame count as length), BerniniConditioning, the two experts, CreateVideo "
                                     "with the source's audio and frame rate, SaveVideo",
    # MoGe (comfy_core/models/moge*.py, nodes/moge_nodes.py, tests/fixtures/template_models_moge.py): the tiny MoGe-2
    # (normal head) in geometry_estimation/, as saved (the LoadImage pictures are small). Times: MOGE_TIMES.
    **{name: f"{MOGE_TIMES[name]}: {what}" for name, what in {
        "utility_moge_depth_estimation": "subgraph: LoadMoGeModel, MoGeInference (resolution 2), MoGeRender depth / "
                                         "depth_colored / mask, ImageToMask, GetImageSize + ComfyMathExpression + "
                                         "ComfySwitchNode around ResizeImageMaskNode",
        "utility_moge3_geometry_estimation": "subgraph: MoGe-3 (moge_3_vitg: the SwiGLU DINOv2, the sparse 3-D "
                                             "refiner, 3 passes at resolution 9), MoGeRender mask",
        "3d_moge_perspective_to_mesh": "subgraph: MoGeInference (resolution 9), MoGePointMapToMesh (textured), "
                                       "MoGeRender normal_opengl / normal_directx, ImageScaleToMaxDimension behind "
                                       "the switches, SaveGLB (each GLB read back: `_check_glb`)",
        "3d_moge_panorama_to_mesh": "subgraph: MoGePanoramaInference (12 views of 512 px at resolution 5, merged "
                                    "on the 1024-wide grid by lsmr at 256 / 512 / 1024), MoGePointMapToMesh, "
                                    "SaveGLB (read back: `_check_glb`)"}.items()},
    # Depth Anything 3 (comfy_core/models/da3*.py, nodes/da3_nodes.py, tests/fixtures/template_models_da3.py): the
    # tiny Mono model (DINOv2 + DPT head with the sky head) in geometry_estimation/. Times: DA3_TIMES.
    **{name: f"{DA3_TIMES[name]}: {what}" for name, what in {
        "utility_depth_anything3_image_depth_estimation": "subgraph: LoadDA3Model, DA3Inference (504, "
                                                          "upper_bound_resize, mono), DA3Render depth v2_style, "
                                                          "ImageCompare",
        "utility_depth_anything3_video_depth_estimation": "subgraph: LoadVideo frames (Video Slice), DA3Inference "
                                                          "(504, lower_bound_resize, mono) per frame, DA3Render "
                                                          "depth v2_style, CreateVideo, SaveVideo"}.items()},
    # BiRefNet background removal (comfy_core/models/birefnet/, nodes/bg_removal_nodes.py,
    # tests/fixtures/template_models_bgremoval.py): the tiny Swin BiRefNet in background_removal/.
    "utility_birefnet_remove_background": "1-2 s: subgraph: LoadBackgroundRemovalModel, RemoveBackground (1024, "
                                          "the two-scale Swin, the deformable-ASPP decoder), InvertMask, "
                                          "JoinImageWithAlpha, PreviewImage, MaskPreview",
    # Frame interpolation (comfy_core/models/frame_interp/, nodes/frame_interpolation_nodes.py,
    # tests/fixtures/template_models_bgremoval.py): the tiny FILM in frame_interpolation/.
    "utility_video_frame_interpolation": "1-2 s: subgraph: LoadVideo (64x48 frames: FILM pads them to 64x64), "
                                         "GetVideoComponents, FrameInterpolationModelLoader (FILM), FrameInterpolate "
                                         "(x2), ComfyMathExpression / ComfySwitchNode for the frame rate, "
                                         "CreateVideo, SaveVideo",
    # SDPose (comfy_core/families/sdpose, nodes/sdpose_nodes.py, tests/fixtures/template_models_sdpose.py): the tiny
    # SDPose checkpoint (SD 2 UNet + heatmap head + VAE, no text encoder) by CheckpointLoaderSimple; every image
    # stretched to the 768x1024 model input, one euler step with Lotus's null prompt. Times: SDPOSE_TIMES.
    **{name: f"{SDPOSE_TIMES[name]}: {what}" for name, what in {
        "utility_sdpose_ood_image_to_pose": "subgraph, ResizeImageMaskNode (longer side 1024), SDPoseKeypointExtractor "
                                            "(full-image mode, the 64-channel feature through the heatmap head, UDP + "
                                            "DARK decoding), SDPoseDrawKeypoints (body, hands, face, feet, head)",
        "utility_sdpose_ood_video_to_pose_map": "made small: LoadVideo, GetVideoComponents, the frames in one batch "
                                                "through the extractor, SDPoseDrawKeypoints, CreateVideo with the "
                                                "audio, SaveVideo"}.items()},
    # Hunyuan3D (comfy_core/families/hunyuan3d, nodes/hunyuan3d_nodes.py, tests/fixtures/template_models_hunyuan3d.py):
    # ImageOnlyCheckpointLoader's tiny checkpoint (DiT under model., ShapeVAE under vae., DINOv2 as CLIP vision),
    # made small: EmptyLatentHunyuan3Dv2 at 64 shape tokens, VAEDecodeHunyuan3D at octree resolution 16; SaveGLB's
    # mesh read back. Times: HY3D_TIMES.
    **{name: f"{HY3D_TIMES[name]}: {what}" for name, what in {
        "3d_hunyuan3d_image_to_model": "subgraph: the 2.0 DiT (ModelSamplingAuraFlow shift 1), CLIPVisionEncode "
                                       "(center) through the DINOv2, Hunyuan3Dv2Conditioning, KSampler 20 steps cfg "
                                       "8, VAEDecodeHunyuan3D, VoxelToMesh (surface net)",
        "3d_hunyuan3d-v2.1": "subgraph: the 2.1 DiT (U-ViT skips, mixture of experts), 30 steps cfg 5, the same "
                             "decode and surface net",
        "3d_hunyuan3d_multiview_to_model": "the 2.0 multi-view DiT, Hunyuan3Dv2ConditioningMultiView (front and "
                                           "back views, crop none), 20 steps cfg 7.5",
        "3d_hunyuan3d_multiview_to_model_turbo": "the turbo file's guidance embedding fed by FluxGuidance 3.5, "
                                                 "20 steps cfg 4"}.items()},
    # RT-DETRv4 (comfy_core/models/rtdetr.py, nodes/detection_nodes.py, tests/fixtures/template_models_rtdetr.py):
    # UNETLoader's tiny detector (its score head favours "person") ahead of SDPose's per-person crops.
    "utility_sdpose_multi_person": "8 s: subgraph: UNETLoader's RT-DETRv4, RTDETR_detect (person, threshold 0.5, one "
                                   "box) feeding SDPoseKeypointExtractor's crops, DrawBBoxes",
    "utility_sdpose_multi_person_video": "89 s, made small: the frames through RTDETR_detect (two boxes each), "
                                         "SDPoseKeypointExtractor per box, DrawBBoxes, CreateVideo, SaveVideo",
    # Marigold V2 (nodes/marigold_nodes.py, tests/fixtures/template_models_marigold_chrono.py): subgraph: Qwen-Image-Edit
    # 2509 int8 ConvRot + the modality LoRA, ConditioningLoader's precomputed conditioning, the modality VAE, one
    # img_to_img_velocity step from sigma 0.5 without noise, MarigoldV2PostProcess, ImageCompare, SaveImageAdvanced.
    **{name: f"{seconds}: MarigoldV2PostProcess {prediction}" for name, seconds, prediction in (
        ("image_marigold_v2_depth_estimation", "0.2-1 s", "depth (channel mean, near white, per image)"),
        ("image_marigold_v2_surface_normal_estimation", "0.4-0.7 s", "normals (unit vectors)"),
        ("image_marigold_v2_albedo_estimation", "0.3-0.6 s", "albedo (linear to sRGB)"))},
    # ChronoEdit (tests/fixtures/template_models_marigold_chrono.py): the Wan 2.1 I2V 14B network + its distill LoRA,
    # ScaleROPE's scale_t 7 read by the Wan DiT's position ids (nodes/rope_nodes.py, comfy_core/attention/rope.py).
    # Lotus-D (tests/fixtures/template_models_lotus.py): the SD 2 UNet with the task label, one img-to-img step
    # from sigma 999 on the encoded image (SetFirstSigma, DisableNoise), ImageInvert of the decoded depth; then
    # the depth map feeds the Flux depth LoRA, the SD3.5 Large depth ControlNet, Qwen-Image's InstantX
    # ControlNet or LTX-2's depth IC-LoRA.
    "image_lotus_depth_v1_1": "Lotus-D depth estimate: LotusConditioning, SetFirstSigma 999, one euler step",
    "flux_depth_lora_example": "Lotus-D depth, then Flux dev + the Flux depth LoRA",
    "sd3.5_large_depth": "Lotus-D depth, then SD3.5 Large + its depth ControlNet",
    "image_qwen_image_instantx_controlnet": "Lotus-D depth, then Qwen-Image + InstantX's ControlNet-Union",
    "video_ltx2_depth_to_video": "Lotus-D depth per frame, then LTX-2 with the depth IC-LoRA",
    "image_chrono_edit_14B": "42-66 s as saved (20 steps, cfg 4): ScaleROPE (time positions x7), WanImageToVideo 720x720 5 frames, "
                             "CLIPVisionEncode, KSampler, ImageFromBatch's last frame",
    # Anima (comfy_core/families/anima, tests/fixtures/template_models_anima.py), as saved at 1024x1024: the Cosmos-Predict2
    # DiT + LLM adapter (UNETLoader), Qwen3-0.6B through CLIPLoader type "stable_diffusion" (T5 ids for the adapter), the
    # Qwen-Image (Wan 2.1) VAE; the LLLite ones add ModelPatchLoader + AnimaLLLiteApply (comfy_core/model_patches/anima_lllite.py).
    **{name: f"{seconds}: {what}" for name, seconds, what in (
        ("image_anima_base_v1", "94 s", "subgraph, Anima base v1.0 (ComfySwitchNode around the turbo LoRA's "
                                        "LoraLoaderModelOnly), KSampler 30 steps cfg 4"),
        ("image_anima_preview", "103 s", "Anima preview, er_sde 30 steps"),
        ("image_anima_lllite_any_control_to_image", "6 s", "as saved only its control-image previews (LoadImage, Canny, "
                                                           "ImageInvert, PreviewImage): the Anima branch is skipped with "
                                                           "validation's warning, its ResizeImageMaskNode broken as shipped as "
                                                           "image_anima_lllite_depth_control_to_image's; with the value set by "
                                                           "hand it runs (123 s, the RGB LLLite patch)"),
        ("image_anima_lllite_image_inpainting", "21 s", "subgraph, the inpainting LLLite patch (RGB + Painter's mask, "
                                                        "masked input) fed through MaskPreview's MASK output"))},
    # ERNIE-Image (comfy_core/families/ernie_image, tests/fixtures/template_models_ernie.py), as saved at 1024x1024:
    # the DiT (UNETLoader), Ministral 3 3B through CLIPLoader type "flux2" (layer -2), the Flux.2 VAE,
    # EmptyFlux2LatentImage, KSampler; the prompt enhancer (a Ministral 3 3B) behind ComfySwitchNode.
    "image_ernie_image": "184 s (2-core machine under load): subgraph, ERNIE-Image 20 steps cfg 4, the prompt "
                         "enhancer's TextGenerate (sampled, ends at </s>) switched in",
    "image_ernie_image_turbo": "147 s: subgraph, ERNIE-Image Turbo 8 steps cfg 1, the prompt enhancer switched in",
    # SeedVR2 (comfy_core/families/seedvr2, tests/fixtures/template_models_seedvr2.py): the int8 ConvRot NaDiT
    # (UNETLoader), its causal video VAE (VAELoader), SeedVR2Preprocess -> VAEEncodeTiled -> SeedVR2Conditioning ->
    # KSampler (1 euler step, cfg 1) -> VAEDecodeTiled -> SeedVR2PostProcessing.
    "utility_seedvr2_3b_int8_upscale_image": "2 s: subgraph, the test picture x4 (lanczos), the 3B layout",
    "utility_seedvr2_7b_int8_upscale_image": "2 s: subgraph, the test picture x4 (lanczos), the 7B layout",
    "utility_seedvr2_3b_int8_upscale_video": "2 s: subgraph, the test video made small x2 as one clip (the "
                                             "SeedVR2TemporalChunk / Merge branch switched off as saved), "
                                             "GetVideoComponents' bit_depth into CreateVideo",
    # Ideogram 4 (comfy_core/families/ideogram4, tests/fixtures/template_models_ideogram4.py), as saved at 1024x1024
    # (ComfyMathExpression keeps sides >= 256): the conditional and the unconditional DiT (UNETLoader x 2), Qwen3-VL 8B
    # through CLIPLoader type "ideogram4" (13 taps), the Flux.2 VAE, EmptyFlux2LatentImage, Ideogram4Scheduler (the
    # CustomCombo preset's steps / mu / std through JsonExtractString), DualModelGuider cfg 7 + CFGOverride 3 over
    # the last 30 %, the negative ConditioningZeroOut, SamplerCustomAdvanced euler.
    "image_ideogram4_t2i": "80 s (2-core machine under load): subgraph, the Default preset (20 steps, mu 0, std 1.75), "
                           "the fp8-scaled DiTs and Qwen3-VL",
    "image_ideogram4_t2i_int8": "70 s: subgraph, the Default preset, the int8 ConvRot DiTs",
    # Boogu-Image (comfy_core/families/boogu, tests/fixtures/template_models_boogu.py): UNETLoader (fp8-scaled /
    # int8 ConvRot), Qwen3-VL 8B through CLIPLoader type "boogu" (Ideogram 4's tiny file), the Flux VAE (ae);
    # CLIPTextEncode + ConditioningZeroOut, KSampler 4 steps lcm / sgm_uniform cfg 1. The Edit templates are in
    # NOT_RUNNING (their ResizeImageMaskNode as shipped).
    "image_boogu_image_0_1_turbo_t2i": "subgraph, the fp8-scaled Turbo DiT at 1024x1024",
    # Krea 2 (comfy_core/families/krea2, tests/fixtures/template_models_krea2.py): UNETLoader (fp8-scaled / int8
    # ConvRot), Qwen3-VL 4B through CLIPLoader type "krea2" (12 taps), the Qwen-Image VAE, 8 steps euler / simple,
    # cfg 1, the negative ConditioningZeroOut; the style reference: TextEncodeQwenImageEditPlus (the image through
    # the vision tower and as a reference latent), FluxKontextMultiReferenceLatentMethod index_timestep_zero,
    # ModelSamplingFlux, SamplerCustomAdvanced.
    "image_krea2_turbo_t2i": "subgraph, the fp8-scaled DiT and Qwen3-VL",
    "image_krea2_turbo_t2i_int8": "subgraph, the int8 ConvRot DiT",
    "image_krea2_turbo_int8_image_style_reference": "subgraph, the reference image as a latent at timestep zero",
    # JoyImage Edit (comfy_core/families/joyimage, tests/fixtures/template_models_joyimage.py): UNETLoader (int8
    # ConvRot) -> CFGNorm, Qwen3-VL 8B through CLIPLoader type "joyimage" (Qwen-Image 2.1's tiny file), the Wan 2.1
    # VAE; LoadImage -> ImageScaleToTotalPixels 1 MP -> two TextEncodeJoyImageEdit (prompt / empty negative, each
    # with the picture at its bucket through the vision tower and as a reference latent), EmptySD3LatentImage at the
    # picture's size, KSampler 40 steps euler / normal cfg 4, VAEDecode, SaveImageAdvanced, ImageCompare.
    "image_joyai_image_edit": "subgraph, the int8 ConvRot DiT, the picture as a reference latent and vision tokens",
    # Mage-Flow (comfy_core/families/mage, tests/fixtures/template_models_mage.py): UNETLoader (int8 ConvRot),
    # Qwen3-VL 4B through CLIPLoader type "mage" (the shared tiny qwen3vl_4b_bf16), the Mage-VAE (release layout), one
    # TextEncodeMageFlowEdit for both conditionings and the latent, KSampler euler / simple (30 steps cfg 5, Turbo 4
    # steps cfg 1); Edit: the loaded image scaled to 1 MP (ImageScaleToTotalPixels) through the vision tower and as a
    # reference latent at the output size.
    "image_mage_flow_t2i_int8": "subgraph, the int8 ConvRot DiT at 1024x1024, 30 steps cfg 5",
    "image_mage_flow_turbo_t2i_int8": "subgraph, the Turbo DiT, 4 steps cfg 1",
    "image_mage_flow_edit_int8": "subgraph, the reference image through the vision tower and as a reference latent",
    "image_mage_flow_edit_turbo_int8": "subgraph, the Edit Turbo DiT, 4 steps cfg 1",
    # Lens (comfy_core/families/lens, tests/fixtures/template_models_lens.py): UNETLoader (bf16) -> ModelSamplingFlux
    # (1.15 / 0.5) -> CFGNorm, GPT-OSS 20B through CLIPLoader type "lens" (NVFP4 attention, 4 taps, the Harmony
    # template cut), the empty negative a zero-length conditioning, the Flux.2 VAE, SamplerCustom euler / simple
    # (20 steps cfg 5; Turbo 4 steps cfg 1), 1440x1440 from ResizeSelector / ComfyMathExpression.
    "image_lens_t2i": "subgraph, 20 steps cfg 5 at 1440x1440",
    "image_lens_turbo_t2i": "subgraph, the Turbo DiT, 4 steps cfg 1",
    # Fibo 2.0 (comfy_core/families/fibo2, tests/fixtures/template_models_fibo2.py): UNETLoader (int8 ConvRot),
    # Qwen3-VL 4B through CLIPLoader type "fibo2" (36 blocks, six bundles), the Flux.2 VAE, one TextEncodeFibo2 for
    # both conditionings and the latent (the loaded image cover-cropped to its trained bucket, through the vision
    # tower and as a reference latent), KSampler euler / simple; the prompt enhancer: TextGenerate with the image on
    # a Qwen3-VL 8B loaded as type "fibo2" (Qwen-Image 2.1's tiny int8 file), ComfySwitchNode, PreviewAny.
    "image_fibo2_edit_dev_pe": "167 s: the Dev DiT, 50 steps cfg 5 at the picture's bucket, the structured negative",
    "image_fibo2_edit_turbo_pe": "67 s: the Edit Turbo DiT, 4 steps cfg 1, the null-caption negative",
    # PixelDiT (comfy_core/families/pixeldit, tests/fixtures/template_models_pixeldit.py): UNETLoader (bf16),
    # Gemma 2 2B through CLIPLoader type "pixeldit" (the chi preamble, <bos> + the last 299 states), the
    # "pixel_space" VAE, EmptyChromaRadianceLatentImage at ResolutionSelector's 1 MP, KSampler 30 steps er_sde /
    # simple cfg 4.
    "image_pixeldit_t2i": "45 s: subgraph, 1024x1024 pixels as the latent (64x64 patches of 16)",
    # PiD: Z-Image Turbo's latent (its subgraph: UNETLoader, Qwen3-4B, the Flux VAE) through PiDConditioning "flux"
    # into PiD (UNETLoader bf16, CLIPLoader type "pixeldit" on the fp8-scaled Gemma 2, an empty prompt
    # ConditioningZeroOut'ed), SamplerCustom lcm / simple 4 steps cfg 1, the "pixel_space" VAE, ImageCompare.
    # Made small (64 px latent and output): as saved PiD decodes to 4096x4096, 65,536 patch tokens of
    # attention per block, hours on two cores with any network.
    "utility_pid_latent_upscale_dit": "1 s made small: subgraphs, the latent aligned to PiD's patch grid",
    # NewBie-Image (comfy_core/families/newbie, tests/fixtures/template_models_newbie.py): UNETLoader (bf16), Gemma 3
    # 4B + Jina CLIP v2 through DualCLIPLoader type "newbie" (Gemma's states, Jina's pooled text), the Flux VAE,
    # ModelSamplingAuraFlow 6, the XML prompt built by StringReplace, KSampler res_multistep / simple cfg 5.5.
    "image_newbieimage_exp0_1-t2i": "75 s: subgraph, 20 steps at 1024x1536",
    # VOID video inpainting (comfy_core/families/cogvideox, nodes/void_nodes.py, tests/fixtures/template_models_void.py):
    # SAM 3.1's mask of the loaded video, two CogVideoX passes (UNETLoader void_pass1 / void_pass2, T5-XXL through
    # CLIPLoader type "cogvideox", the CogVideoX VAE) by SamplerCustomAdvanced with VOIDSampler, pass 2 from RAFT-large's
    # warped noise of pass 1 (OpticalFlowLoader, VOIDWarpedNoise, VOIDWarpedNoiseSource). Made small, but at 256 px:
    # RAFT's correlation pyramid needs 128 px after VOIDWarpedNoise halves the frames.
    "utility_void_video_inpainting": "made small at 256 px, 5 frames (2 latent frames)",
    # Ming-Image 0.1 Design (comfy_core/families/ming_image, tests/fixtures/template_models_ming.py): UNETLoader (int8
    # ConvRot NextDiT, no pad tokens), the Ling-mini-2.0 MoE encoder with its Qwen2.5-VL tower and connector through
    # CLIPLoader type "qwen_image" (int8 ConvRot, 3-D int8 expert banks), the RGBA Wan 2.1-style VAE, ModelSamplingFlux,
    # SamplerCustomAdvanced 12 steps; t2i's prompt expander (switch true): TextGenerate on qwen3.8_27b_w4a8 (FLUX 3's
    # tiny int4 Qwen3.5 writer); the edit: the Ideogram-JSON subgraphs, TextEncodeMingImageEdit (vision tower +
    # reference frame), SamplerLCM, ImageStitch.
    "image_ming_image_01_design_t2i": "34 s made small (TextGenerate at 24 tokens; 1024x1024 from ResolutionSelector)",
    "image_ming_image_01_design_image_edit": "48 s made small (64 px canvas)",
}
# Templates whose outputs are text previews only (PreviewAny): they write no file.
TEXT_ONLY = ("basic_datatype_conversion", "llm_qwen3_text_gen", "llm_qwen3_5_text_gen", "llm_gemma4_text_gen")
# The default run: no-model templates, a subgraph one, a split-files Wan one, a Z-Image one.
DEFAULT_TEMPLATES = ("basic_datatype_conversion", "basic_mask_operations_and_compositing",
                     "flux_fill_inpaint_example", "text_to_video_wan", "image_z_image_turbo")

# Covered templates (all nodes exist) of model families this engine does not have (other issues):
# their loaders name files no family here reads, so there is nothing to write tiny files for.
_FAMILIES_NOT_HERE = {
    "FireRed Image Edit 1.1 (its transformer file is no family here; Qwen2.5-VL 7B)": ("image_firered_image_edit1_1",),
    "MOSS-Image (Qwen3.5 9B text encoder, an int8 ConvRot model)": ("image_moss_image_base_t2i", "image_moss_image_t2i"),
    "TextGenerate's Qwen3-VL 4B (CLIPLoader type ideogram4)": ("llm_qwen3vl_text_gen",),
}
OUT_OF_SCOPE = {name: f"model family not written here: {family}"
                for family, names in _FAMILIES_NOT_HERE.items() for name in names}

# Covered templates of families that exist here that do not run yet: (why, a fragment of the error;
# a file with no tiny writer fails in provide_files, whose KeyError names every such file).
# Qwen-Image (its DiT, the Qwen2.5-VL 7B encoder, the Wan 2.1 VAE) runs; these stop short of it.
NOT_RUNNING: dict[str, tuple[str, str]] = {
    "video_ltx2_i2v_lora": (
        "broken as shipped: its subgraph's VIDEO output lists link 265, which is not among the subgraph's links "
        "(the CreateVideo inside has no outgoing link), so the prompt's SaveVideo has no video, as ComfyUI "
        "would send it", "Required input is missing: video"),
    "image_qwen_Image_2512_controlnet": (
        "broken as shipped: its ResizeImageMaskNode was saved (frontend 0.12.3) before 'scale total pixels' "
        "gained `multiple`; today's editor (frontend 1.58.1, loaded in Chromium: tests/browser/"
        "test_editor_workflow_oracle.py) restores widgets_values by position after the option's widgets, so it "
        "too sends 'area' (scale_method) as resize_type.multiple, and ComfyUI's validation (int('area')) refuses "
        "it, as ours does (the Fun union ControlNet itself runs: 658 s at 1.6 MP with the value set by hand)",
        "resize_type.multiple, area"),
    # Families and model patches added in this session, with no tiny template files yet.
    **{name: ("broken as shipped, as image_qwen_Image_2512_controlnet: its ResizeImageMaskNode was saved before 'scale "
              "total pixels' gained `multiple` (widgets ['scale total pixels', 1, 'lanczos']), so today's editor sends "
              "'lanczos' as resize_type.multiple and ComfyUI's validation refuses it, as ours does (with the value set by "
              "hand the rest runs: 123 s, the Anima DiT with the RGB LLLite patch on Depth Anything 3's render)",
              "resize_type.multiple, lanczos")
       for name in ("image_anima_lllite_depth_control_to_image",)},
    # Boogu-Image Edit (fp8-scaled / int8 ConvRot DiT): with the value set by hand the rest runs (LoadImage ->
    # ResizeImageMaskNode 1 MP -> TextEncodeBooguEdit: vision tokens + reference latent, ModelSamplingAuraFlow 3.16,
    # SamplerCustom 25 steps dpmpp_2m / simple cfg 3.5, VAEDecode, SaveImage / ImageCompare: 224 s fp8, 371 s int8).
    **{name: ("broken as shipped, as image_anima_lllite_depth_control_to_image: its ResizeImageMaskNode was saved "
              "before 'scale total pixels' gained `multiple` (widgets ['scale total pixels', 1, 'lanczos']), so "
              "today's editor sends 'lanczos' as resize_type.multiple and ComfyUI's validation refuses it, as ours "
              "does (with the value set by hand the Boogu Edit graph runs to its saved image)",
              "resize_type.multiple, lanczos")
       for name in ("image_boogu_image_0_1_edit", "image_boogu_image_0_1_edit_int8")},
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        all_templates = metafunc.config.getoption("--all-templates")
        metafunc.parametrize("name", sorted(RUNNING) if all_templates else DEFAULT_TEMPLATES)
    if "failing" in metafunc.fixturenames:
        metafunc.parametrize("failing", sorted(NOT_RUNNING))


@pytest.fixture(scope="module")
def object_info() -> dict:
    return coverage_tool.builtin_object_info()


def _made_small(name: str) -> bool:
    """Video templates (LTX-2's too), SDXL, HiDream and pixel-space ones (minutes each at 1024 px on two cores; PiD's
    4096 px output hours), and
    text generation (a tiny random LLM never says stop: 2048 tokens are minutes; FLUX 3's upsampler asks for 3584,
    and Qwen3-VL then encodes them: over 5 minutes as saved)."""
    return any(part in name.lower() for part in ("wan", "video", "key-frames", "sdxl", "radiance", "hidream", "llm_",
                                                 "ltx", "flux3_klein", "minimax", "hunyuan3d", "utility_pid",
                                                 "ming_image"))


def _reached_inputs(prompt: dict, node_id: str) -> set[str]:
    """The input names `node_id` feeds, directly or through ComfyMathExpression nodes (2026
    templates compute sizes and frame counts from a primitive: `(a // 16) * 16`, `a * 16 + 1`)."""
    names, pending, seen = set(), [node_id], set()
    while pending:
        current = pending.pop()
        seen.add(current)
        for other_id, node in prompt.items():
            for name, value in node.get("inputs", {}).items():
                if isinstance(value, list) and len(value) == 2 and str(value[0]) == current:
                    names.add(name.rsplit(".", 1)[-1])  # a dynamic input's own name ("resize_type.width")
                    if node["class_type"] == "ComfyMathExpression" and other_id not in seen:
                        pending.append(other_id)
    return names


SMALL_TOKENS = 24  # TextGenerate's max_length in made-small runs
RAFT_SIDE = 256  # VOIDWarpedNoise's least width / height: RAFT needs 128 px after it halves the frames
# Templates whose input video carries sound their graph uses (TrimAudioDuration): written with an audio track.
VIDEO_WITH_AUDIO = {"utility_void_video_inpainting": "snowboarder.mp4"}


def shrink_2026(prompt: dict) -> dict:
    """test_template_workflows_wan.py's `shrink`, ImageScaleToTotalPixels at its least (0.01 MP; MiniMax H3's
    prompts: the test picture doubled, and ResolutionSelector at 0.1 MP, guide seconds at most 1, comfy kitchen
    attention as PyTorch's),
    ResizeAndPadImage's target and ResizeImageMaskNode's sizes at most 64 px, and primitives that reach a width / height (64) or a
    length or RepeatImageBatch amount through math nodes (a count of seconds becomes 1, a frame
    count or frame rate 9)."""
    from tests.web.test_template_workflows_wan import SMALL_LENGTH, SMALL_SIDE, _fed_inputs, shrink

    prompt = shrink(prompt)
    minimax = any(node["class_type"].startswith("MiniMaxH3") for node in prompt.values())
    for node in prompt.values():  # an input image scaled to a megapixel count (HiDream-E1.1): the least
        megapixels = node["inputs"].get("megapixels")
        if node["class_type"] == "ImageScaleToTotalPixels" and isinstance(megapixels, (int, float)):
            # MiniMax H3's frames need sides of multiples of 32 (the template's `resolution_steps`
            # 32 rounds them so): the 96 x 64 test picture doubled, a small count on its grid
            node["inputs"]["megapixels"] = 192 * 128 / 1024 ** 2 if minimax else min(megapixels, 0.01)
        if node["class_type"] == "ResolutionSelector" and isinstance(megapixels, (int, float)) and minimax:
            node["inputs"]["megapixels"] = min(megapixels, 0.1)  # its least (MiniMax H3's canvases)
        if (node["class_type"] == "ModelAttentionBackend"
                and node["inputs"].get("attention") == "comfy kitchen attention"):
            # comfy-kitchen's INT8 kernel is GPU-only: ComfyUI falls back to PyTorch attention without it
            node["inputs"]["attention"] = "pytorch attention"
        if node["class_type"] in ("TextGenerate", "TextGenerateLTX2Prompt") and isinstance(
                node["inputs"].get("max_length"), int):
            node["inputs"]["max_length"] = min(node["inputs"]["max_length"], SMALL_TOKENS)
        sides = {"ResizeAndPadImage": ("target_width", "target_height"),  # LTX-2.3 IC-LoRA's reference sheet
                 "ResizeImageMaskNode": ("resize_type.width", "resize_type.height", "resize_type.longer_size")}
        for name in sides.get(node["class_type"], ()):  # LTX-2's input image sizes
            if isinstance(node["inputs"].get(name), int):
                node["inputs"][name] = min(node["inputs"][name], SMALL_SIDE)
        if node["class_type"] == "WanDancerEncodeAudio" and isinstance(node["inputs"].get("video_frames"), int):
            node["inputs"]["video_frames"] = SMALL_LENGTH  # Wan Dancer's global pass: the frames made small
        if node["class_type"] == "WanDancerPadKeyframesList":
            # the test's second of audio holds two whole 9-frame (0.3 s) segments with their music; the
            # template asks for as many as its duration choice (6)
            node["inputs"]["num_segments"] = 2
        if node["class_type"] == "EmptyLatentHunyuan3Dv2" and isinstance(node["inputs"].get("resolution"), int):
            node["inputs"]["resolution"] = min(node["inputs"]["resolution"], 64)  # shape tokens
        if node["class_type"] == "VAEDecodeHunyuan3D" and isinstance(node["inputs"].get("octree_resolution"), int):
            node["inputs"]["octree_resolution"] = 16  # its least: a 17^3 grid
        start = node["inputs"].get("start_frame_count")  # Kandinsky 5 i2v: a reference frame must follow
        if node["class_type"] == "NormalizeVideoLatentStart" and isinstance(start, int):
            node["inputs"]["start_frame_count"] = min(start, (SMALL_LENGTH - 1) // 4)
    for node_id, node in prompt.items():
        value = node.get("inputs", {}).get("value")
        if node["class_type"] == "PrimitiveFloat" and isinstance(value, (int, float)):  # seconds (LTX-2.3 ia2v)
            seconds = {"length", "amount", "frame_idx"} if minimax else {"length", "amount"}
            # MiniMax H3's guides: a second in, inside the clip. A float over 10 beside the seconds is a frame
            # rate (Wan 2.2 14B's `floor(fps * seconds) + 1`): kept, so the count stays 4k + 1 (17).
            if _reached_inputs(prompt, node_id) & seconds and value <= 10:
                node["inputs"]["value"] = min(value, 1.0)
            continue
        if node["class_type"] != "PrimitiveInt" or not isinstance(value, int):
            continue
        if _fed_inputs(prompt, node_id) & {"width", "height", "length"}:  # `shrink` did it
            continue
        reached = _reached_inputs(prompt, node_id)
        if reached & {"width", "height"}:
            node["inputs"]["value"] = min(value, SMALL_SIDE)
        elif reached & {"length", "amount"}:  # a frame count, or RepeatImageBatch's (seconds x fps)
            node["inputs"]["value"] = min(value, 1 if value <= 10 else SMALL_LENGTH)
    for node in prompt.values():  # VOID's warped noise: RAFT's least frame size (its primitives feed pass 1 too)
        if node["class_type"] != "VOIDWarpedNoise":
            continue
        for name in ("width", "height"):
            value = node["inputs"].get(name)
            if isinstance(value, int):
                node["inputs"][name] = max(value, RAFT_SIDE)
            elif isinstance(value, list) and prompt.get(str(value[0]), {}).get("class_type") == "PrimitiveInt":
                source = prompt[str(value[0])]["inputs"]
                source["value"] = max(source["value"], RAFT_SIDE)
    return prompt


async def _run(name: str, base_dir: Path, object_info: dict) -> tuple[int, str, str]:
    source = NEWEST / f"{name}.json"
    prompt = editor_to_prompt(json.loads(source.read_text()), object_info)
    if _made_small(name):
        prompt = shrink_2026(prompt)
        path = base_dir / f"{name}.api.json"
        path.write_text(json.dumps(prompt))
    else:
        path = base_dir / f"{name}.json"
        shutil.copyfile(source, path)
    if name in VIDEO_WITH_AUDIO:  # an input video whose graph uses its sound (provide_files' videos are silent)
        from tests.fixtures.template_models_void import write_input_video_with_audio

        target = base_dir / "input" / VIDEO_WITH_AUDIO[name]
        if not target.exists():
            write_input_video_with_audio(target, seed=len(target.name))
    provide_files(prompt, base_dir)
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base_dir, output_dir=base_dir / "output"), path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _check_ace_audio(written: list[str]) -> None:
    """An ACE-Step 1.5 template's song decoded back: 120 s of 48 kHz stereo (the 25 Hz latent of
    EmptyAceStep1.5LatentAudio through the 1920x Oobleck VAE)."""
    import av

    (path,) = written
    with av.open(path) as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.channels) == (48000, 2)
        assert abs(float(container.duration) / 1e6 - 120.0) < 0.1


# ACE-Step 1 templates: EmptyAceStepLatentAudio's seconds (None: m2m_editing's length is its input's).
ACE1_SECONDS = {"audio_ace_step_1_t2a_song": 120.0, "audio_ace_step_1_t2a_instrumentals": 30.0,
                "audio_ace_step_1_m2m_editing": None}


def _check_ace1_audio(written: list[str], seconds: float | None) -> None:
    """An ACE-Step 1 template's song decoded back: 44.1 kHz stereo, `int(seconds * 44100 / 4096)`
    latent frames of 4096 samples each (within 0.1 s: the encoder's padding)."""
    import av

    (path,) = written
    with av.open(path) as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.channels) == (44100, 2)
        duration = float(container.duration) / 1e6
    expected = int(seconds * 44100 / 4096) * 4096 / 44100 if seconds is not None else None
    assert duration > 0 and (expected is None or abs(duration - expected) < 0.1), (duration, expected)


def _check_sa3_audio(written: list[str]) -> None:
    """A Stable Audio 3 template's clip decoded back: 44.1 kHz stereo, EmptyLatentAudio(150 s)'s 3230
    frames at the SAME VAE's 4096 samples each (within 0.1 s: the mp3 encoder's padding)."""
    import av

    (path,) = written
    with av.open(path) as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.channels) == (44100, 2)
        assert abs(float(container.duration) / 1e6 - 3230 * 4096 / 44100) < 0.1


def _check_minimax_music3_audio(written: list[str]) -> None:
    """MiniMax Music 3's song decoded back: 44.1 kHz stereo, at most the 60 s asked for (the AR stage may end it
    earlier; the latent of `latent_length(frames)` frames at the DAV's 512 samples each)."""
    import av

    (path,) = written
    with av.open(path) as container:
        stream = container.streams.audio[0]
        assert (stream.rate, stream.channels) == (44100, 2)
        assert 0 < float(container.duration) / 1e6 <= 60.2


def _check_ltx_video(path: Path) -> None:
    """An LTX-2 template's saved video decoded back: 8k + 1 frames whose sides are multiples of 32,
    and an audio track as long as the frames at the file's frame rate (within 0.1 s: the audio
    latent's 40 ms frames)."""
    import av

    with av.open(str(path)) as container:
        video = container.streams.video[0]
        rate, width, height = video.average_rate, video.codec_context.width, video.codec_context.height
        frames = sum(1 for _ in container.decode(video))
    with av.open(str(path)) as container:
        assert container.streams.audio, f"{path.name}: no audio track"
        audio = container.streams.audio[0]
        seconds = sum(frame.samples for frame in container.decode(audio)) / audio.codec_context.sample_rate
    assert (frames - 1) % 8 == 0 and width % 32 == 0 and height % 32 == 0, (frames, width, height)
    assert abs(seconds - frames / float(rate)) <= 0.1, (seconds, frames, rate)


def _check_sdpose(written: list[str]) -> None:
    """An SDPose template's pose map: drawn (the tiny head's peaks pass the 0.5 threshold) on a canvas of the
    resized input's size (the picture's longer side 1024 as saved; the video's frames made small: 64)."""
    import av
    import numpy as np

    (path,) = written
    if Path(path).suffix == ".png":
        frames = [np.asarray(Image.open(path).convert("RGB"))]
        assert max(frames[0].shape[:2]) == 1024, frames[0].shape
    else:
        with av.open(path) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        assert frames and max(frames[0].shape[:2]) == 64, len(frames)
    assert all(frame.any() for frame in frames)


def _check_seedvr2_image(written: list[str]) -> None:
    """A SeedVR2 image template's upscale: the 96x64 test picture x4 (SeedVR2Preprocess's padding cropped off
    again by SeedVR2PostProcessing), its alpha (JoinImageWithAlpha's, the transparent square) re-attached."""
    import numpy as np

    (path,) = [p for p in written if "seedvr2_after" in p]  # SaveImage's (ImageCompare's previews aside)
    image = Image.open(path)
    assert image.size == (384, 256) and image.mode == "RGBA", (image.size, image.mode)
    alpha = np.asarray(image)[..., 3]
    assert alpha[100:156, 150:230].max() == 0 and alpha[:40].min() == 255


def _check_seedvr2_video(written: list[str]) -> None:
    """The SeedVR2 video template's upscale: the 12-frame 64x48 test video x2, every frame kept (padded to 13
    for the VAE, cropped back by SeedVR2PostProcessing)."""
    import av

    (path,) = written
    with av.open(path) as container:
        video = container.streams.video[0]
        size = (video.codec_context.width, video.codec_context.height)
        frames = sum(1 for _ in container.decode(video))
    assert (size, frames) == ((128, 96), 12), (size, frames)


def _check_minimax_video(path: Path) -> None:
    """A MiniMax H3 template's saved video decoded back: 17k + 5 frames at 24 fps whose sides are multiples of
    32, and a stereo track as long as the frames (within 0.1 s: the 40 Hz latent's rounding, the encoder's padding)."""
    import av

    with av.open(str(path)) as container:
        video = container.streams.video[0]
        rate, width, height = video.average_rate, video.codec_context.width, video.codec_context.height
        frames = sum(1 for _ in container.decode(video))
    with av.open(str(path)) as container:
        assert container.streams.audio, f"{path.name}: no audio track"
        audio = container.streams.audio[0]
        channels = audio.codec_context.channels
        seconds = sum(frame.samples for frame in container.decode(audio)) / audio.codec_context.sample_rate
    assert frames % 17 == 5 and float(rate) == 24, (frames, rate)
    assert width % 32 == 0 and height % 32 == 0, (width, height)
    assert channels == 2 and abs(seconds - frames / 24) <= 0.1, (channels, seconds, frames)


def _check_glb(path: Path, texture: bool = True) -> None:
    """A MoGe template's GLB read back by its container layout (glTF 2.0 binary: header, JSON chunk, BIN
    chunk): a triangle mesh whose indices stay below its vertex count, with a PNG base-colour texture
    (`texture`; Hunyuan3D's meshes carry none)."""
    import struct

    data = path.read_bytes()
    magic, version, length = struct.unpack_from("<4sII", data, 0)
    assert (magic, version, length) == (b"glTF", 2, len(data)), (magic, version, length)
    json_length, json_type = struct.unpack_from("<II", data, 12)
    gltf = json.loads(data[20:20 + json_length])
    bin_length, bin_type = struct.unpack_from("<II", data, 20 + json_length)
    assert (json_type, bin_type) == (0x4E4F534A, 0x004E4942)
    blob = data[28 + json_length:28 + json_length + bin_length]
    primitive = gltf["meshes"][0]["primitives"][0]
    positions = gltf["accessors"][primitive["attributes"]["POSITION"]]
    indices = gltf["accessors"][primitive["indices"]]
    view = gltf["bufferViews"][indices["bufferView"]]
    faces = struct.unpack_from(f"<{indices['count']}I", blob, view["byteOffset"])
    assert positions["count"] > 0 and indices["count"] % 3 == 0 and max(faces) < positions["count"]
    if not texture:
        return
    image = gltf["images"][0]
    png = gltf["bufferViews"][image["bufferView"]]
    assert blob[png["byteOffset"]:png["byteOffset"] + 8] == b"\x89PNG\r\n\x1a\n"


async def test_template_runs(name: str, tmp_path: Path, object_info: dict) -> None:
    code, out, err = await _run(name, tmp_path, object_info)
    assert code == 0, err[-3000:]
    written = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("wrote ")]
    assert all(Path(p).is_file() for p in written)
    assert written or name in TEXT_ONLY, out[-2000:]
    if name in LTX_TIMES or name in LTX25_TIMES:
        for path in written:
            _check_ltx_video(Path(path))
    if name in MINIMAX_TIMES:
        for path in written:
            if Path(path).suffix == ".png":  # the text-to-image template: the nested latent's first frame
                assert Image.open(path).size[0] % 16 == 0, path
            else:
                _check_minimax_video(Path(path))
    if name in ACE1_SECONDS:
        _check_ace1_audio(written, ACE1_SECONDS[name])
    elif name.startswith("audio_ace_step"):
        _check_ace_audio(written)
    if name.startswith("audio_stable_audio_3"):
        _check_sa3_audio(written)
    if name == "audio_minimax_music_3":
        _check_minimax_music3_audio(written)
    if name.startswith("3d_moge"):
        glbs = [Path(p) for p in written if Path(p).suffix == ".glb"]
        assert len(glbs) == 1, written
        _check_glb(glbs[0])
    if name in SDPOSE_TIMES:
        _check_sdpose(written)
    if name.startswith("utility_seedvr2") and name.endswith("_image"):
        _check_seedvr2_image(written)
    if name == "utility_seedvr2_3b_int8_upscale_video":
        _check_seedvr2_video(written)
    if name in HY3D_TIMES:
        glbs = [Path(p) for p in written if Path(p).suffix == ".glb"]
        assert len(glbs) == 1, written
        _check_glb(glbs[0], texture=False)


async def test_template_fails_for_the_listed_reason(failing: str, tmp_path: Path, object_info: dict) -> None:
    try:
        code, _out, err = await _run(failing, tmp_path, object_info)
    except KeyError as exc:  # no tiny writer for one of its files
        code, err = 1, repr(exc)
    reason, fragment = NOT_RUNNING[failing]
    assert code != 0, f"{failing} runs now: move it from NOT_RUNNING to RUNNING ({reason})"
    assert fragment in err, err[-3000:]


def test_every_covered_template_is_listed(object_info: dict) -> None:
    covered = set(coverage_tool.coverage(NEWEST, object_info).covered)
    listed = set(RUNNING) | set(OUT_OF_SCOPE) | set(NOT_RUNNING)
    assert covered == listed, {"unlisted": sorted(covered - listed), "no longer covered": sorted(listed - covered)}
    assert not (set(RUNNING) & set(OUT_OF_SCOPE)) and not (set(RUNNING) & set(NOT_RUNNING))


@pytest.mark.parametrize("folder, file_name, kind", [
    ("diffusion_models", "z_image_turbo_bf16.safetensors", "unet_zimage"),
    ("diffusion_models", "z_image_int8_convrot.safetensors", "unet_zimage_int8_convrot"),
    ("diffusion_models", "qwen_image_edit_2511_int8_convrot.safetensors", "unet_qwen_image_int8_convrot"),
    ("diffusion_models", "krea2_int8_convrot.safetensors", "unet_int8_convrot"),  # no writer
    ("diffusion_models", "wan_animate_2_int8_convrot.safetensors", "unet_wan_animate2_int8_convrot"),
    ("diffusion_models", "wan2.2_dancer_14b_global_fp8_scaled.safetensors", "unet_wan_dancer_scaled"),
    ("diffusion_models", "wan2.1_14B_SCAIL_2_fp16.safetensors", "unet_wan_scail2_fp16"),
    ("diffusion_models", "wan2.1_14B_SCAIL_2_int8_convrot.safetensors", "unet_wan_scail2_int8_convrot"),
    ("loras", "wan2.1_SCAIL_2_DPO_lora_bf16.safetensors", "lora_wan"),
    ("diffusion_models", "wan2.2_bernini_r_high_noise_fp8_scaled.safetensors", "unet_wan_bernini_r_scaled"),
    ("diffusion_models", "wan2.2_bernini_r_low_noise_fp8_scaled.safetensors", "unet_wan_bernini_r_scaled"),
    ("diffusion_models", "causal_forcing-framewise.safetensors", "unet_wan_causal_forcing"),
    ("vae", "Wan2_1_VAE_bf16.safetensors", "vae_wan21"),
    ("text_encoders", "qwen_3_4b.safetensors", "qwen3_4b"),
    ("text_encoders", "qwen_3_4b_fp8_mixed.safetensors", "qwen3_4b_fp8"),
    ("loras", "pixel_art_style_z_image_turbo.safetensors", "lora_zimage"),
    ("model_patches", "uso-flux1-projector-v1.safetensors", "uso_projector"),
    ("diffusion_models", "chroma-radiance-x0.safetensors", "unet_chroma_radiance_x0"),
    ("diffusion_models", "Chroma1-HD.safetensors", "unet_chroma"),
    ("vae", "qwen_image_vae.safetensors", "vae_wan21"),
    ("diffusion_models", "qwen_image_2.1_int8_convrot.safetensors", "unet_qwen_image21"),  # no writer
    ("diffusion_models", "qwen_image_2.1_turbo_bf16.safetensors", "unet_qwen_image21"),  # no writer
    ("text_encoders", "qwen3vl_8b_bf16.safetensors", "qwen3vl_8b"),  # no writer
    ("vae", "qwen_image_2.1_vae_bf16.safetensors", "vae_qwen_image21"),  # no writer
    ("text_encoders", "qwen_2.5_vl_7b_fp8_scaled.safetensors", "qwen25vl_7b"),
    ("diffusion_models", "qwen_image_edit_2511_bf16.safetensors", "unet_qwen_image"),
    ("loras", "Qwen-Image-Lightning-4steps-V1.0.safetensors", "lora_qwen_image"),
    ("controlnet", "Qwen-Image-InstantX-ControlNet-Inpainting.safetensors", "controlnet_qwen_image"),
    ("vae", "qwen_image_layered_vae.safetensors", "vae_qwen_image_layered"),
    ("controlnet", "Qwen-Image-2512-Fun-Controlnet-Union-2602.safetensors", "controlnet_qwen_image_fun"),
    ("model_patches", "qwen_image_canny_diffsynth_controlnet.safetensors", "diffsynth_qwen_image"),
    ("model_patches", "Z-Image-Turbo-Fun-Controlnet-Union.safetensors", "zimage_fun_controlnet"),
    ("diffusion_models", "qwen_image_layered_bf16.safetensors", "unet_qwen_image_layered"),
    ("diffusion_models", "flux-2-klein-4b-fp8.safetensors", "unet_flux2_klein_4b_fp8"),
    ("diffusion_models", "flux2_dev_fp8mixed.safetensors", "unet_flux2_dev_fp8"),
    ("diffusion_models", "flux-2-klein-base-9b-fp8.safetensors", "unet_flux2_klein_9b_fp8"),
    ("text_encoders", "mistral_3_small_flux2_bf16.safetensors", "mistral3_flux2"),
    ("text_encoders", "qwen_3_8b_fp8mixed.safetensors", "qwen3_8b_fp8"),
    ("vae", "flux2-vae.safetensors", "vae_flux2"),
    ("vae", "full_encoder_small_decoder.safetensors", "vae_flux2_small_decoder"),
    ("loras", "Flux_2-Turbo-LoRA_comfyui.safetensors", "lora_flux2"),
    ("diffusion_models", "flux1-dev-kontext_fp8_scaled.safetensors", "unet_flux_dev_fp8"),
    ("diffusion_models", "hidream_i1_fast_fp8.safetensors", "unet_hidream_fp8"),
    ("diffusion_models", "ovis_image_bf16.safetensors", "unet_ovis_image"),
    ("text_encoders", "ovis_2.5.safetensors", "ovis25_qwen3"),
    ("diffusion_models", "longcat_image_bf16.safetensors", "unet_longcat_image"),
    ("diffusion_models", "longcat_image_edit_bf16.safetensors", "unet_longcat_image"),
    ("diffusion_models", "anima-base-v1.0.safetensors", "unet_anima"),
    ("text_encoders", "qwen_3_06b_base.safetensors", "anima_qwen3_06b"),
    ("loras", "anima-turbo-lora-v0.2.safetensors", "lora_anima"),
    ("model_patches", "anima-lllite-depth-1.safetensors", "anima_lllite"),
    ("model_patches", "anima-lllite-inpainting-v2.safetensors", "anima_lllite_inpaint"),
    ("diffusion_models", "seedvr2_3b_int8_convrot.safetensors", "unet_seedvr2_3b"),
    ("diffusion_models", "seedvr2_7b_int8_convrot.safetensors", "unet_seedvr2_7b"),
    ("vae", "seedvr2_ema_vae_fp16.safetensors", "vae_seedvr2"),
    ("diffusion_models", "ernie-image.safetensors", "unet_ernie_image"),
    ("diffusion_models", "ernie-image-turbo.safetensors", "unet_ernie_image"),
    ("text_encoders", "ministral-3-3b.safetensors", "ministral3_3b"),
    ("text_encoders", "ernie-image-prompt-enhancer.safetensors", "ministral3_prompt_enhancer"),
    ("diffusion_models", "lens_bf16.safetensors", "unet_lens"),
    ("diffusion_models", "lens_turbo_bf16.safetensors", "unet_lens"),
    ("text_encoders", "gpt_oss_20b_nvfp4.safetensors", "gpt_oss_20b"),
    ("diffusion_models", "ming_image_0.1_design_int8_convrot.safetensors", "unet_ming_image"),
    ("text_encoders", "ming_image_0.1_ling_mini_2.0_int8_convrot.safetensors", "ming_image_text_encoder"),
    ("vae", "ming_image_vae_bf16.safetensors", "vae_ming_image"),
    ("text_encoders", "qwen3.8_27b_w4a8.safetensors", "qwen38_27b_prompt_expander"),
    ("diffusion_models", "ideogram4_fp8_scaled.safetensors", "unet_ideogram4_fp8"),
    ("diffusion_models", "ideogram4_unconditional_fp8_scaled.safetensors", "unet_ideogram4_fp8"),
    ("diffusion_models", "ideogram4_int8_convrot.safetensors", "unet_ideogram4_int8"),
    ("diffusion_models", "ideogram4_unconditional_int8_convrot.safetensors", "unet_ideogram4_int8"),
    ("text_encoders", "qwen3vl_8b_fp8_scaled.safetensors", "qwen3vl_8b_fp8"),
    ("diffusion_models", "boogu_image_turbo_fp8_scaled.safetensors", "unet_boogu_fp8"),
    ("diffusion_models", "boogu_image_edit_int8_convrot.safetensors", "unet_boogu_int8"),
    ("checkpoints", "ltx-2-19b-dev-fp8.safetensors", "ltx2_checkpoint"),
    ("checkpoints", "ltx-2.3-22b-distilled-fp8.safetensors", "ltx23_checkpoint"),
    ("text_encoders", "gemma_3_12B_it_fp4_mixed.safetensors", "gemma3_12b_fp4_mixed"),
    ("text_encoders", "gemma_3_12B_it.safetensors", "gemma3_12b"),
    ("loras", "gemma-3-12b-it-abliterated_lora_rank64_bf16.safetensors", "lora_gemma3_12b"),
    ("loras", "ltx-2.3-22b-ic-lora-ingredients-0.9.safetensors", "lora_ltx2_ic"),
    ("loras", "ltx_2.3_22b_distilled_1.1_lora_dynamic_fro09_avg_rank_111_bf16.safetensors", "lora_ltx2"),
    ("loras", "ltx2.3-transition.safetensors", "lora_ltx2"),
    ("latent_upscale_models", "ltx-2.3-spatial-upscaler-x2-1.1.safetensors", "ltx2_latent_upsampler"),
    ("diffusion_models", "flux3-image-klein-base-int8-convrot.safetensors", "unet_flux3_base_int8"),
    ("diffusion_models", "flux3-image-klein-bf16.safetensors", "unet_flux3"),
    ("text_encoders", "qwen3vl_4b_int8_convrot.safetensors", "qwen3vl_4b_int8"),
    ("text_encoders", "qwen3vl_4b_fp8_scaled.safetensors", "qwen3vl_4b_fp8"),  # Krea 2's: 36 blocks, Ideogram 4's layout
    ("diffusion_models", "krea2_turbo_int8_convrot.safetensors", "unet_krea2_int8"),
    ("diffusion_models", "mage_flow_edit_turbo_int8_convrot.safetensors", "unet_mage_int8"),
    ("vae", "mage_flow_vae_bf16.safetensors", "vae_mage"),
    ("diffusion_models", "krea2_turbo_fp8_scaled.safetensors", "unet_krea2_fp8"),
    ("loras", "krea2_style_reference.safetensors", "lora_krea2"),
    ("diffusion_models", "joyai_image_edit_int8_convrot.safetensors", "unet_joyimage_int8"),
    ("text_encoders", "qwen3vl_8b_joyimage_edit_int8_convrot.safetensors", "qwen3vl_8b"),
    ("text_encoders", "qwen3.5_9b_flux3_prompt_upsampler_w4a8.safetensors", "qwen35_9b_flux3_upsampler"),
    ("text_encoders", "qwen3.5_4b_bf16.safetensors", "qwen35"),
    ("text_encoders", "qwen3.5_2b_bf16.safetensors", "qwen35"),
    ("checkpoints", "stable-audio-open-1.0.safetensors", "ckpt_stable_audio"),
    ("text_encoders", "t5-base.safetensors", "t5_base"),
    ("checkpoints", "stable_audio_3_medium.safetensors", "ckpt_stable_audio3"),
    ("checkpoints", "stable_audio_3_medium_base.safetensors", "ckpt_stable_audio3"),
    ("text_encoders", "t5gemma_b_b_ul2.safetensors", "t5gemma"),
    ("checkpoints", "ace_step_1.5_turbo_aio.safetensors", "ace15_checkpoint"),
    ("diffusion_models", "acestep_v1.5_xl_turbo_bf16.safetensors", "unet_ace15"),
    ("text_encoders", "qwen_0.6b_ace15.safetensors", "ace15_qwen3_06b"),
    ("text_encoders", "qwen_1.7b_ace15.safetensors", "ace15_lm"),
    ("text_encoders", "qwen_4b_ace15.safetensors", "ace15_lm"),
    ("vae", "ace_1.5_vae.safetensors", "vae_ace15"),
    ("diffusion_models", "Wan21-WanMove_fp8_scaled_e4m3fn_KJ.safetensors", "unet_wan_i2v_scaled"),  # Wan-Move: Wan 2.1 I2V
    ("diffusion_models", "hunyuan_video_t2v_720p_bf16.safetensors", "unet_hunyuan_video"),  # HunyuanVideo 1.0
    ("diffusion_models", "hunyuan_video_image_to_video_720p_bf16.safetensors", "unet_hunyuan_video_i2v"),
    ("text_encoders", "llava_llama3_fp8_scaled.safetensors", "llava_llama3_fp8_scaled"),
    ("vae", "hunyuan_video_vae_bf16.safetensors", "vae_hunyuan_video"),
    ("background_removal", "birefnet.safetensors", "birefnet"),
    ("frame_interpolation", "film_net_fp16.safetensors", "film_net"),
    ("frame_interpolation", "rife_v4.25_lite.safetensors", "rife"),
    ("diffusion_models", "void_pass1.safetensors", "void_diffusion_model"),
    ("vae", "cogvideox_vae.safetensors", "cogvideox_vae"),
    ("optical_flow", "raft_large_C_T_SKHT_V2-ff5fadd5.safetensors", "raft_large"),
])
def test_2026_file_kinds(folder: str, file_name: str, kind: str) -> None:
    from tests.fixtures.template_models import file_kind

    assert file_kind(folder, file_name) == kind


def test_the_zimage_files_load_as_one_model_and_the_lora_reaches_every_layer(tmp_path: Path) -> None:
    """The tiny files a Z-Image template gets fit together: the Qwen3 file's width is the
    transformer's caption input, and every tensor of the template LoRA names a layer."""
    import torch
    from safetensors.torch import load_file

    from comfy_core.lora import load_lora_for_models
    from comfy_core.split import load_text_encoders
    from comfy_core.split.diffusion_model import load_diffusion_model

    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "z_image_turbo_bf16.safetensors"}},
              "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen_3_4b.safetensors", "type": "lumina2"}},
              "3": {"class_type": "LoraLoaderModelOnly",
                    "inputs": {"lora_name": "pixel_art_style_z_image_turbo.safetensors"}}}
    assert sorted(provide_files(prompt, tmp_path)) == [("diffusion_models", "unet_zimage"), ("loras", "lora_zimage"),
                                                       ("text_encoders", "qwen3_4b")]
    models = tmp_path / "models"
    model = load_diffusion_model(models / "diffusion_models" / "z_image_turbo_bf16.safetensors")
    clip = load_text_encoders([models / "text_encoders" / "qwen_3_4b.safetensors"], "lumina2")
    cond = clip.encode_from_tokens(clip.tokenize("a cat"))
    assert cond.shape[-1] == model.model.diffusion_model.cap_embedder[1].in_features
    lora = load_file(str(models / "loras" / "pixel_art_style_z_image_turbo.safetensors"))
    patched, _clip, report = load_lora_for_models(model, None, lora, 1.0, 0.0)
    assert report.unmatched == [] and report.skipped == [] and report.model_keys == len(lora) // 2
    with patched.applied() as module:
        changed = module.diffusion_model.layers[0].attention.qkv.weight.detach().clone()
    assert not torch.equal(changed, model.model.diffusion_model.layers[0].attention.qkv.weight)


def test_the_qwen_image_files_fit_the_encoder_fixture_and_the_lora_reaches_every_layer(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from comfy_core.lora import load_lora_for_models
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.qwen25vl_files import TINY_TEXT

    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "qwen_image_fp8_e4m3fn.safetensors"}},
              "2": {"class_type": "LoraLoaderModelOnly",
                    "inputs": {"lora_name": "Qwen-Image-Lightning-4steps-V1.0.safetensors"}}}
    provide_files(prompt, tmp_path)
    models = tmp_path / "models"
    model = load_diffusion_model(models / "diffusion_models" / "qwen_image_fp8_e4m3fn.safetensors")
    weights = load_file(str(models / "diffusion_models" / "qwen_image_fp8_e4m3fn.safetensors"))
    assert weights["txt_in.weight"].shape[1] == TINY_TEXT["hidden_size"]
    lora = load_file(str(models / "loras" / "Qwen-Image-Lightning-4steps-V1.0.safetensors"))
    _patched, _clip, report = load_lora_for_models(model, None, lora, 1.0, 0.0)
    assert report.unmatched == [] and report.skipped == [] and report.model_keys == len(lora) // 3


def test_a_template_file_with_no_writer_is_named_after_the_others_are_written(tmp_path: Path) -> None:
    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "krea2_int8_convrot.safetensors"}},
              "2": {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}},
              "3": {"class_type": "VAELoader", "inputs": {"vae_name": "pixel_space"}}}
    with pytest.raises(KeyError, match="'unet_int8_convrot' \\(diffusion_models/krea2_int8_convrot"):
        provide_files(prompt, tmp_path)
    assert (tmp_path / "models" / "vae" / "ae.safetensors").is_file()
    assert not (tmp_path / "models" / "vae" / "pixel_space").exists()  # a built-in choice, not a file


@pytest.mark.parametrize("unet, encoder, lora", [
    ("flux2_dev_fp8mixed.safetensors", "mistral_3_small_flux2_fp8.safetensors", "Flux2TurboComfyv2.safetensors"),
    ("flux-2-klein-4b.safetensors", "qwen_3_4b.safetensors", None),
    ("flux-2-klein-base-9b-fp8.safetensors", "qwen_3_8b_fp8mixed.safetensors", None),
])
def test_the_flux2_files_fit_together_and_the_lora_reaches_every_block(tmp_path: Path, unet: str, encoder: str,
                                                                       lora: str | None) -> None:
    """The tiny files a Flux.2 template gets fit together: the encoder's stacked states are the
    transformer's text input, the small-decoder VAE decodes its 128-channel latents 16x up, and
    every tensor of the template LoRA names a layer."""
    import torch
    from safetensors.torch import load_file

    from comfy_core.loading import load_vae
    from comfy_core.lora import load_lora_for_models
    from comfy_core.split import load_text_encoders
    from comfy_core.split.diffusion_model import load_diffusion_model

    prompt = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": unet}},
              "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": encoder, "type": "flux2"}},
              "3": {"class_type": "VAELoader", "inputs": {"vae_name": "full_encoder_small_decoder.safetensors"}}}
    if lora is not None:
        prompt["4"] = {"class_type": "LoraLoaderModelOnly", "inputs": {"lora_name": lora}}
    provide_files(prompt, tmp_path)
    models = tmp_path / "models"
    model = load_diffusion_model(models / "diffusion_models" / unet)
    assert model.model.family.name == ("flux2" if lora else "flux2_klein")
    clip = load_text_encoders([models / "text_encoders" / encoder], "flux2")
    cond = clip.encode_from_tokens(clip.tokenize("a cat"))
    assert cond.shape[-1] == model.model.diffusion_model.txt_in.in_features
    vae = load_vae(models / "vae" / "full_encoder_small_decoder.safetensors")
    assert vae.decode(torch.zeros(1, 128, 2, 2)).shape == (1, 32, 32, 3)
    if lora is not None:
        weights = load_file(str(models / "loras" / lora))
        _patched, _clip, report = load_lora_for_models(model, None, weights, 1.0, 0.0)
        assert report.unmatched == [] and report.skipped == [] and report.model_keys == len(weights) // 2
