"""Run API workflows that use real node packs on this server and on ComfyUI, and compare images.

    python bench/pack_parity.py --packs-dir PACKS --pack NAME [--pack NAME ...]
        --comfyui COMFYUI_DIR --comfy-python COMFY_PY [--python PY] WORKFLOW.json [...]

Both servers start once, each with the named packs linked into its own base directory's
`custom_nodes/`, on free loopback ports, with `--cpu`. The model and input files the workflows
name are written as tiny random files with the real layouts (tests/fixtures/template_models.py)
into one folder both servers read; ComfyUI also gets bench/comfyui_tiny_models, which makes it
accept those tiny widths. Each workflow is queued on both; every image an output node
saved is fetched through `/view` and compared: the table prints, per workflow and output node,
the largest difference in 0..255 levels (or the error either side reported). Packs' requirements
must be installed in each server's Python, and the `gguf` package in this script's Python for
.gguf files.

Pack loaders' files written here (PACK_LOADER_INPUTS, PACK_WRITERS): ComfyUI-GGUF's `.gguf` UNets
(the tiny SD1 UNet, Q8_0 where a row is a multiple of 32 wide, F32 else) and its CLIP loaders'
text encoders (the tiny CLIP-L), IPAdapter_plus's `ip-adapter_sd15` layout over the tiny SD1
UNet's cross-attention widths and 224-px CLIP vision towers (`*224*` names). The workflows in
bench/pack_workflows/ use them:

    python bench/pack_parity.py --packs-dir /work/scratch/packs --pack ComfyUI-GGUF \
        --pack ComfyUI_IPAdapter_plus --comfyui COMFYUI_DIR --comfy-python COMFY_PY bench/pack_workflows/*.json

Flux.1 and SD3.5 (bench/pack_workflows/dit_*.json, core nodes only, so `--packs-dir` may be an
empty folder): files named `tiny_dit_<what>.safetensors` are tests/fixtures/dit_checkpoints.py's
float32 single files (`checkpoints/`: flux_dev, flux_schnell, sd3, sd35, sd35_medium) and their
parts (`diffusion_models/` the same names, `text_encoders/` clip_l, clip_g, t5xxl, `vae/`
flux_vae, sd3_vae); bench/comfyui_tiny_models makes ComfyUI build them at their widths.

Qwen-Image, HiDream-I1 and Lumina 2 (bench/pack_workflows/{qwen_image_t2i, qwen_image_edit,
hidream_i1, lumina2}.json, core nodes only): files named `tiny_llm_<what>.safetensors` (see
`_llm_writers`): the tiny DiTs of tests/fixtures/{qwen_image,hidream,lumina2}_files.py, the tiny
Qwen2.5-VL (with its vision tower), Llama 3, Gemma 2 (its SentencePiece model inside the file),
CLIP-L / CLIP-G / T5 towers, the tiny Wan 2.1 VAE (Qwen-Image's), a Qwen-Image LoRA; Flux's
`tiny_dit_flux_vae` serves HiDream and Lumina 2. Both engines tokenize with the same vocabularies:
Qwen's and Gemma's from ComfyUI's folder / the file, Llama 3's from Meta's tokenizer.model (the
`llama-models` package; bench/comfyui_tiny_models builds ComfyUI's tokenizer.json from it).

    python bench/pack_parity.py --packs-dir EMPTY_DIR --comfyui COMFYUI_DIR --comfy-python COMFY_PY \
        bench/pack_workflows/{qwen_image_t2i,qwen_image_edit,hidream_i1,lumina2}.json

Stable Audio Open (bench/pack_workflows/stable_audio.json, core nodes): `tiny_sa_checkpoint` (the
DiT 768 wide in ComfyUI's 24 heads of 32, so its RoPE table is ComfyUI's 32 channels; one block;
the seconds embedders at ComfyUI's 256 internal features, as wide as the text; the tiny Oobleck
VAE; float32) and `tiny_sa_t5_base` (tests/fixtures/stable_audio_files.py). Saved audio is
compared too (`SaveAudio`'s FLAC, decoded): per output, the largest and mean difference in
16-bit sample levels (ComfyUI 0.3.64's audio nodes need torchaudio in its Python).

LTX-Video 0.9 (bench/pack_workflows/ltxv_t2v.json, core nodes): `tiny_ltxv_checkpoint` (the tiny
DiT of tests/fixtures/ltxv_files.py over the 64-wide T5, and a 0.9.0-style causal video VAE at
ComfyUI's base width 128, its layout in the file's `config` metadata; float32),
`tiny_ltxv_checkpoint_causal` (the same with `causal_temporal_positioning` in the metadata, as
0.9.5+'s files) and `tiny_ltxv_t5xxl` (the tiny T5-XXL, bfloat16); see `_ltxv_writers`. Each
saved frame is compared.

HunyuanVideo 1.0 (bench/pack_workflows/hunyuan_video_t2v.json, core nodes): `tiny_hv_t2v` (the DiT
256 wide in ComfyUI's heads of 128, float32), `tiny_hv_clip_l` (fp16), `tiny_hv_llava_llama3` (the
tiny Llama 3, 4 blocks, LLaVA's token table, bf16) and `tiny_hv_vae` (the causal video VAE at the
ComfyUI side's tiny autoencoder widths 32, 64, 64, 64, float32); see `_hv_writers`. ComfyUI's
Python needs `llama-models` and `tiktoken` for Llama 3's tokenizer (bench/comfyui_tiny_models).
"""
from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
# packs' loader nodes whose files tests/fixtures/template_models.py should write: -> models folder
PACK_LOADER_INPUTS = {
    ("ControlNetLoaderAdvanced", "control_net_name"): "controlnet",
    ("easy fullLoader", "ckpt_name"): "checkpoints",
    ("easy a1111Loader", "ckpt_name"): "checkpoints",
    ("easy comfyLoader", "ckpt_name"): "checkpoints",
    ("CheckpointLoaderSimpleWithNoiseSelect", "ckpt_name"): "checkpoints",
    ("UnetLoaderGGUF", "unet_name"): "diffusion_models",
    ("UnetLoaderGGUFAdvanced", "unet_name"): "diffusion_models",
    ("CLIPLoaderGGUF", "clip_name"): "text_encoders",
    ("IPAdapterModelLoader", "ipadapter_file"): "ipadapter",
    ("UNETLoader", "unet_name"): "diffusion_models",
    ("CLIPLoader", "clip_name"): "text_encoders",
    ("DualCLIPLoader", "clip_name1"): "text_encoders",
    ("DualCLIPLoader", "clip_name2"): "text_encoders",
    ("TripleCLIPLoader", "clip_name1"): "text_encoders",
    ("TripleCLIPLoader", "clip_name2"): "text_encoders",
    ("TripleCLIPLoader", "clip_name3"): "text_encoders",
}
TINY_MODELS_FOR_COMFYUI = Path(__file__).resolve().parent / "comfyui_tiny_models"
sys.path.insert(0, str(REPO))


def pack_file_kind(folder: str, name: str) -> str | None:
    """The tiny writer for a pack loader's file, or None for tests/fixtures/template_models.py's rules."""
    if Path(name).name.startswith(HV_PREFIX):
        return f"hv:{Path(name).stem[len(HV_PREFIX):]}"
    if Path(name).name.startswith(LTXV_PREFIX):
        return f"ltxv:{Path(name).stem[len(LTXV_PREFIX):]}"
    if Path(name).name.startswith(SA_PREFIX):
        return f"sa:{Path(name).stem[len(SA_PREFIX):]}"
    if Path(name).name.startswith(LLM_PREFIX):
        return f"llm:{folder}:{Path(name).stem[len(LLM_PREFIX):]}"
    if Path(name).name.startswith(DIT_PREFIX):
        return f"dit:{folder}:{Path(name).stem[len(DIT_PREFIX):]}"
    if name.endswith(".gguf"):
        return "gguf_sd1"
    if folder == "ipadapter":
        return "ipadapter_sd15"
    if folder == "clip_vision" and "224" in name:
        return "clip_vision_224"
    if folder == "text_encoders":
        return "clip_l_sd1"
    return None


def _tiny_sd1_state() -> dict:
    from safetensors.torch import load_file

    from tests.fixtures.checkpoints import write_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sd1.safetensors"
        write_tiny_checkpoint(path, "sd1")
        return load_file(str(path))


def write_gguf_sd1(path: Path) -> None:
    """The tiny SD1 UNet as ComfyUI-GGUF reads it: architecture "sd1", bare UNet tensor names,
    2-D weights whose rows are a multiple of 32 wide in Q8_0, everything else F32."""
    import gguf  # ComfyUI-GGUF's own requirement

    prefix = "model.diffusion_model."
    writer = gguf.GGUFWriter(str(path), "sd1")
    for key, value in _tiny_sd1_state().items():
        if not key.startswith(prefix):
            continue
        data = value.float().numpy()
        kind = gguf.GGMLQuantizationType.Q8_0 if data.ndim == 2 and data.shape[-1] % 32 == 0 \
            else gguf.GGMLQuantizationType.F32
        writer.add_tensor(key[len(prefix):], gguf.quants.quantize(data, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_clip_l_sd1(path: Path) -> None:
    """The tiny SD1 checkpoint's CLIP-L as a text-encoder file (transformers names)."""
    from safetensors.torch import save_file

    from tests.fixtures.split_files import text_encoder_files

    save_file({k: v.contiguous() for k, v in text_encoder_files(_tiny_sd1_state(), "sd1")["clip_l"].items()},
              str(path))


def write_ipadapter_sd15(path: Path) -> None:
    """An `ip-adapter_sd15` file for the tiny SD1 UNet (32 channels x [1, 2, 2, 2], context 64):
    the image projection (4 tokens of width 64) and to_k_ip / to_v_ip per cross-attention, in
    IPAdapter_plus's order (input blocks 1, 2, 4, 5, 7, 8; output 3..11; middle), keys 1, 3, ..., 31."""
    import torch
    from safetensors.torch import save_file

    widths = [32, 32, 64, 64, 64, 64] + [64] * 6 + [32] * 3 + [64]
    g = torch.Generator().manual_seed(5)
    sd = {"image_proj.proj.weight": torch.randn(4 * 64, 64, generator=g) * 0.1,
          "image_proj.proj.bias": torch.randn(4 * 64, generator=g) * 0.1,
          "image_proj.norm.weight": 1 + 0.1 * torch.randn(64, generator=g),
          "image_proj.norm.bias": 0.1 * torch.randn(64, generator=g)}
    for n, width in enumerate(widths):
        for kv in ("k", "v"):
            sd[f"ip_adapter.{2 * n + 1}.to_{kv}_ip.weight"] = torch.randn(width, 64, generator=g) * 0.2
    save_file(sd, str(path))


def write_clip_vision_224(path: Path) -> None:
    """A tiny 224-px CLIP vision tower (IPAdapter_plus crops to 224), projection 64."""
    from tests.fixtures.clip_vision import write_tiny_clip_vision

    write_tiny_clip_vision(path, "clip", "hf", width=32, image_size=224, projection_dim=64)


# Flux.1 / SD3.5 files for the DiT workflows (bench/pack_workflows/dit_*.json), float32 so
# the two engines are compared on the same numbers: `tiny_dit_<what>.safetensors` in each
# folder, the parts of tests/fixtures/dit_checkpoints.py's single files (seed 0, so a split
# part holds what the single file holds).
DIT_PREFIX = "tiny_dit_"


def _dit_state(family: str) -> dict:
    from tests.fixtures import dit_checkpoints as dit

    if family.startswith("flux"):
        return dit.flux_state_dict(schnell=family == "flux_schnell")
    return dit.sd3_state_dict(family)


def _dit_writer(family: str, prefix: str):
    """Write the tensors of `family`'s single file under `prefix` (bare names), or all of it."""
    def write(path: Path) -> None:
        from tests.fixtures import dit_checkpoints as dit

        state = _dit_state(family)
        dit.save(dit.under(state, prefix) if prefix else state, path)
    return write


def _dit_writers() -> dict:
    from tests.fixtures.dit_checkpoints import TE, UNET

    writers = {}
    for family in ("flux_dev", "flux_schnell", "sd35", "sd35_medium", "sd3"):
        writers[f"dit:checkpoints:{family}"] = _dit_writer(family, "")
        writers[f"dit:diffusion_models:{family}"] = _dit_writer(family, UNET)
    for family, vae in (("flux", "vae."), ("sd3", "first_stage_model.")):
        writers[f"dit:vae:{family}_vae"] = _dit_writer("flux_dev" if family == "flux" else "sd35", vae)
    for slot in ("clip_l", "clip_g", "t5xxl"):  # the SD3.5 file's towers (Flux's CLIP-L / T5 are the same widths)
        writers[f"dit:text_encoders:{slot}"] = _dit_writer("sd35", f"{TE}{slot}.transformer.")
    return writers


# Qwen-Image, HiDream-I1 and Lumina 2 files for the LLM-encoder workflows
# (bench/pack_workflows/{qwen_image_t2i,qwen_image_edit,hidream_i1,lumina2}.json):
# `tiny_llm_<what>.safetensors`, each family's tiny fixture at the widths that fit together. The
# DiTs and VAEs are float32; the text encoders are stored as ComfyUI 0.3.64 keeps them on the CPU
# (CLIP towers fp16, T5 and the LLMs bf16 or fp16), so both engines compute on the same numbers.
LLM_PREFIX = "tiny_llm_"


def _llm_writers() -> dict:
    import torch

    from tests.fixtures import dit_checkpoints as dit

    def dit_file(state_fn):
        return lambda path: dit.save(state_fn(), path)

    def stored(state_fn, dtype):
        return lambda path: dit.save({k: v.to(dtype) for k, v in state_fn().items()}, path)

    def qwen_image():
        from tests.fixtures.qwen_image_files import tiny_qwen_image_state_dict
        from tests.fixtures.template_models_2026 import QWEN25VL_WIDTH
        return tiny_qwen_image_state_dict(seed=1, joint=QWEN25VL_WIDTH)

    def qwen25vl(path):
        from tests.fixtures.qwen25vl_files import tiny_qwen25vl_state_dict, write_qwen25vl_file
        write_qwen25vl_file(path, tiny_qwen25vl_state_dict(seed=3), dtype=torch.bfloat16)

    def qwen_lora(path):
        from tests.fixtures.template_models_2026 import WRITERS_2026
        WRITERS_2026["lora_qwen_image"](path)

    def wan21_vae():
        from tests.fixtures.wan_vae_files import original_state_dict
        return original_state_dict("2.1", seed=4, latent_channels=16)

    def hidream():  # text widths: T5 64, Llama 32, pooled CLIP-L + CLIP-G projections 32 + 32
        from tests.fixtures.hidream_files import tiny_hidream_state_dict
        return tiny_hidream_state_dict(seed=5, t5_width=dit.T5_WIDTH, llama_width=32, pooled_width=2 * dit.CLIP_WIDTH)

    def llama():  # 4 blocks: one Llama state per block of the tiny HiDream
        from tests.fixtures.llama_files import tiny_llama_state_dict
        return tiny_llama_state_dict(seed=9, num_hidden_layers=4)

    def lumina2():
        from tests.fixtures.lumina2_files import tiny_lumina2_state_dict
        return tiny_lumina2_state_dict(seed=10)

    def gemma2(path):
        from tests.fixtures.gemma_files import tiny_gemma_state_dict, write_gemma_file
        write_gemma_file(path, tiny_gemma_state_dict(seed=11), dtype=torch.float16)

    return {"llm:diffusion_models:qwen_image": dit_file(qwen_image), "llm:text_encoders:qwen25vl": qwen25vl,
            "llm:loras:qwen_image_lora": qwen_lora, "llm:vae:wan21_vae": dit_file(wan21_vae),
            "llm:diffusion_models:hidream": dit_file(hidream),
            "llm:text_encoders:clip_l": stored(lambda: dit.under(dit.clip_tower("te.", 2, 6, projection=True), "te."),
                                               torch.float16),
            "llm:text_encoders:clip_g": stored(
                lambda: dit.under(dit.clip_tower("te.", dit.CLIP_G_LAYERS, 7, projection=True), "te."), torch.float16),
            "llm:text_encoders:t5xxl": stored(lambda: dit.under(dit.t5_tower("te.", 8), "te."), torch.bfloat16),
            "llm:text_encoders:llama": stored(llama, torch.bfloat16),
            "llm:diffusion_models:lumina2": dit_file(lumina2), "llm:text_encoders:gemma2": gemma2}


# Stable Audio Open (bench/pack_workflows/stable_audio.json): `tiny_sa_<what>.safetensors`.
SA_PREFIX = "tiny_sa_"


def _stable_audio_writers() -> dict:
    import torch
    from safetensors.torch import save_file

    def checkpoint(path):
        from comfy_core.families.stable_audio.dit import StableAudioDiTConfig
        from tests.fixtures import stable_audio_files as sa

        dit = StableAudioDiTConfig(io_channels=64, embed_dim=768, depth=1, cond_token_dim=sa.T5_WIDTH,
                                   global_cond_dim=2 * sa.T5_WIDTH, rotary_dim=32)
        state = {sa.PREFIX + k: v for k, v in sa.tiny_dit_state_dict(seed=20, config=dit).items()}
        state.update({sa.VAE_PREFIX + k: v for k, v in sa.tiny_vae_state_dict(seed=21).items()})
        for seed, part in ((22, "seconds_start"), (23, "seconds_total")):
            state.update(sa.seconds_state_dict(f"conditioner.conditioners.{part}.", seed, half=128))
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.to(torch.float32).contiguous() for k, v in state.items()}, str(path))

    def t5_base(path):
        from tests.fixtures.stable_audio_files import write_t5_base
        write_t5_base(path, seed=24)

    return {"sa:checkpoint": checkpoint, "sa:t5_base": t5_base}


# LTX-Video 0.9 (bench/pack_workflows/ltxv_t2v.json): `tiny_ltxv_<what>.safetensors`. ComfyUI
# 0.3.64 reads the DiT's depth and widths from the weights (32 heads) and the rest from the file's
# `config` metadata `transformer` section (caption_channels: 4096 otherwise); it builds the VAE
# from the metadata's `vae` section at its fixed base width 128 (no section: a released layout
# guessed from the decoder's widths). So the VAE is a shallow 0.9.0-style layout at 128 channels
# (one layer per res block, three plain 2x2x2 stages after 4x4 patches: 32x / 8x) without
# timestep conditioning, so its decode mixes no noise into the latent.
LTXV_PREFIX = "tiny_ltxv_"
LTXV_VAE_BLOCKS = [["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x", {"num_layers": 1}],
                   ["compress_all", {}], ["res_x", {"num_layers": 1}], ["compress_all", {}],
                   ["res_x", {"num_layers": 1}]]
LTXV_VAE_FILE_CONFIG = {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
                        "latent_channels": 128, "encoder_blocks": LTXV_VAE_BLOCKS, "decoder_blocks": LTXV_VAE_BLOCKS,
                        "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4,
                        "latent_log_var": "uniform", "use_quant_conv": False, "causal_decoder": False,
                        "timestep_conditioning": False}


def _ltxv_vae_state(seed: int) -> dict:
    """Random weights of the layout above in ComfyUI's names (from this engine's module on the
    meta device): convolutions scaled by fan-in, latent statistics near N(0, 1)."""
    import torch

    from comfy_core.models.ltxv_vae import LTXVVAE, LTXVVAEConfig

    encoder = tuple(("res_x", 1) if name == "res_x" else ("compress_all", 128) for name, _ in LTXV_VAE_BLOCKS)
    decoder = tuple(("res_x", 1, False) if name == "res_x" else ("compress_all", 128, False)
                    for name, _ in LTXV_VAE_BLOCKS)
    with torch.device("meta"):
        module = LTXVVAE(LTXVVAEConfig(encoder_width=128, encoder_blocks=encoder, decoder_width=128,
                                       decoder_blocks=decoder))
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in module.state_dict().items():
        shape = tuple(tensor.shape)
        values = torch.randn(shape, generator=g)
        if "per_channel_statistics" in name:
            values = 0.5 + torch.rand(shape, generator=g) if "std" in name else 0.1 * values
        elif len(shape) >= 2:
            values = values / torch.tensor(shape[1:]).prod().item() ** 0.5
        else:
            values = 0.05 * values
        state[name] = values.contiguous()
    return state


def _ltxv_writers() -> dict:
    import json

    import torch

    from tests.fixtures import dit_checkpoints as dit

    def checkpoint(transformer: dict):
        def write(path):
            from safetensors.torch import save_file

            from tests.fixtures.ltxv_files import PREFIX, tiny_ltxv_state_dict

            state = tiny_ltxv_state_dict(prefix=PREFIX, seed=30, caption=dit.T5_WIDTH)
            state.update({"vae." + k: v for k, v in _ltxv_vae_state(31).items()})
            config = {"transformer": {"caption_channels": dit.T5_WIDTH, **transformer}, "vae": LTXV_VAE_FILE_CONFIG}
            path.parent.mkdir(parents=True, exist_ok=True)
            save_file({k: v.to(torch.float32).contiguous() for k, v in state.items()}, str(path),
                      metadata={"format": "pt", "config": json.dumps(config)})
        return write

    def t5(path):  # the tiny T5-XXL stored in bfloat16 (see _llm_writers)
        dit.save({k: v.to(torch.bfloat16) for k, v in dit.t5_tower("", 32).items()}, path)

    return {"ltxv:checkpoint": checkpoint({}),
            # as LTX-Video 0.9.5+'s files: RoPE time positions of the causal VAE's first frame
            "ltxv:checkpoint_causal": checkpoint({"causal_temporal_positioning": True}),
            "ltxv:t5xxl": t5}


# HunyuanVideo 1.0 (bench/pack_workflows/hunyuan_video_t2v.json): `tiny_hv_<what>.safetensors`.
# ComfyUI 0.3.64 reads the DiT's depths, patch, channels and text width from the weights but fixes
# its heads at 128 channels (num_heads = hidden // 128), the RoPE axes at 16 / 56 / 56 and the
# pooled-text width at CLIP-L's 768 (bench/comfyui_tiny_models takes that one from the weights).
# So the DiT is 256 wide in 2 heads of 128, over the tiny Llama's 32-wide states and the tiny
# CLIP-L's 32-wide pooled vector. It builds the VAE as its LDM AutoencoderKL with 3-D convolutions,
# at the tiny autoencoder's widths there (32 x [1, 2, 2, 2], one block per level: 32, 64, 64, 64).
# The DiT and the VAE are float32; CLIP-L is stored fp16, the Llama bf16 (see _llm_writers).
HV_PREFIX = "tiny_hv_"
HV_DIT = dict(hidden_size=256, num_heads=2, depth=2, depth_single_blocks=2, refiner_depth=2, mlp_ratio=4.0,
              patch_size=(1, 2, 2))
HV_VAE_WIDTHS = (32, 64, 64, 64)


def _hv_dit_state(seed: int) -> dict:
    """Random DiT weights in Tencent's names, scaled as tests/fixtures/template_models_hunyuan_video.py's
    (norms near 1, biases ~0.05, weights by fan-in)."""
    import torch

    from comfy_core.families.hunyuan_video.dit import HunyuanVideoConfig, HunyuanVideoTransformer
    from tests.fixtures import dit_checkpoints as dit
    from tests.fixtures.template_models_hunyuan_video import TEXT_WIDTH

    config = HunyuanVideoConfig(in_channels=16, out_channels=16, context_in_dim=TEXT_WIDTH, vec_in_dim=dit.CLIP_WIDTH,
                                guidance_embed=True, **HV_DIT)
    with torch.device("meta"):
        module = HunyuanVideoTransformer(config)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in module.state_dict().items():
        noise = torch.randn(tuple(tensor.shape), generator=g)
        if name.endswith(("norm.weight", "_norm.weight", "norm1.weight", "norm2.weight")):
            value = 1.0 + 0.1 * noise
        elif name.endswith("bias"):
            value = 0.05 * noise
        else:
            value = noise / max(tensor[0].numel() if tensor.ndim > 1 else 1, 1) ** 0.5
        state[name] = value.contiguous()
    return state


def _hv_vae_state(seed: int) -> dict:
    """Random VAE weights in the released (diffusers) names, which ComfyUI converts to its LDM
    names: convolutions scaled by fan-in, norms near 1."""
    import torch

    from comfy_core.models.hunyuan_video_vae import HunyuanVideoVAE, HunyuanVideoVAEConfig

    with torch.device("meta"):
        module = HunyuanVideoVAE(HunyuanVideoVAEConfig(block_out_channels=HV_VAE_WIDTHS, layers_per_block=1))
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in module.state_dict().items():
        shape = tuple(tensor.shape)
        noise = torch.randn(shape, generator=g)
        if "norm" in name and name.endswith("weight"):
            value = 1.0 + 0.1 * noise
        elif len(shape) >= 2:
            value = noise / torch.tensor(shape[1:]).prod().item() ** 0.5
        else:
            value = 0.05 * noise
        state[name] = value.contiguous()
    return state


def _hv_writers() -> dict:
    import torch

    from tests.fixtures import dit_checkpoints as dit

    def float32(state_fn):
        return lambda path: dit.save({k: v.to(torch.float32) for k, v in state_fn().items()}, path)

    def llava_llama3(path):  # the tiny Llama 3 with LLaVA's 128,320-token table, bf16; 4 blocks:
        # ComfyUI asserts |layer| < depth for the hidden layer it reads (-3)
        from tests.fixtures.llama_files import tiny_llama_state_dict, write_llama_file
        from tests.fixtures.template_models_hunyuan_video import LLAVA_VOCAB

        write_llama_file(path, tiny_llama_state_dict(seed=41, num_hidden_layers=4, vocab_size=LLAVA_VOCAB),
                         dtype=torch.bfloat16)

    def clip_l(path):  # 2 layers: ComfyUI's HunyuanVideo set routes a file with layer 1 to CLIP-L
        dit.save({k: v.to(torch.float16) if v.is_floating_point() else v
                  for k, v in dit.under(dit.clip_tower("te.", 2, 42, projection=True), "te.").items()}, path)

    def llava_llama3_fp8_scaled(path):  # the same Llama in ComfyUI's scaled-fp8 layout (the template's file)
        from tests.fixtures.llama_files import tiny_llama_state_dict
        from tests.fixtures.template_models import write_scaled_fp8
        from tests.fixtures.template_models_hunyuan_video import LLAVA_VOCAB

        state = tiny_llama_state_dict(seed=41, num_hidden_layers=4, vocab_size=LLAVA_VOCAB)
        write_scaled_fp8({k: v.to(torch.bfloat16) for k, v in state.items()}, path)

    return {"hv:t2v": float32(lambda: _hv_dit_state(40)), "hv:llava_llama3": llava_llama3,
            "hv:llava_llama3_fp8_scaled": llava_llama3_fp8_scaled, "hv:clip_l": clip_l,
            "hv:vae": float32(lambda: _hv_vae_state(43))}


PACK_WRITERS = {"gguf_sd1": write_gguf_sd1, "clip_l_sd1": write_clip_l_sd1,
                "ipadapter_sd15": write_ipadapter_sd15, "clip_vision_224": write_clip_vision_224,
                **_dit_writers(), **_llm_writers(), **_stable_audio_writers(), **_ltxv_writers(),
                **_hv_writers()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process over its own base directory (models and inputs linked from `shared`)."""

    def __init__(self, name: str, command: list[str], cwd: Path, base: Path, shared: Path, packs: list[Path]) -> None:
        self.name = name
        (base / "custom_nodes").mkdir(parents=True)
        for pack in packs:
            (base / "custom_nodes" / pack.name).symlink_to(pack.resolve(), target_is_directory=True)
        for folder in ("models", "input"):
            (base / folder).symlink_to(shared / folder, target_is_directory=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(base / "server.log", "w")
        self.proc = subprocess.Popen(command + ["--base-directory", str(base), "--listen", "127.0.0.1",
                                                "--port", str(self.port), "--cpu", "--preview-method", "none"],
                                     cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return response.read()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited; see {self.log.name}")
            try:
                self.get("/object_info/KSampler")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} server did not answer in {timeout:.0f} s")

    def run(self, prompt: dict, timeout: float) -> dict:
        """The history entry of `prompt` once it finished (or {"error": ...})."""
        body = json.dumps({"prompt": prompt, "client_id": str(uuid.uuid4())}).encode()
        request = urllib.request.Request(self.url + "/prompt", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                prompt_id = json.loads(response.read())["prompt_id"]
        except urllib.error.HTTPError as ex:
            return {"error": f"rejected: {ex.read()[:300].decode(errors='replace')}"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            history = json.loads(self.get(f"/history/{prompt_id}"))
            if prompt_id in history and history[prompt_id].get("status", {}).get("completed") is not None:
                entry = history[prompt_id]
                if entry["status"].get("status_str") == "error":
                    messages = [m[1] for m in entry["status"].get("messages", []) if m[0] == "execution_error"]
                    return {"error": (messages[0].get("exception_message", "") if messages else "error")[:300]}
                return entry
            time.sleep(0.5)
        return {"error": f"not finished in {timeout:.0f} s"}

    def images(self, entry: dict) -> dict[str, list[np.ndarray]]:
        out: dict[str, list[np.ndarray]] = {}
        for node_id, output in entry.get("outputs", {}).items():
            for image in output.get("images", []):
                query = urllib.parse.urlencode({k: image.get(k, "") for k in ("filename", "subfolder", "type")})
                pixels = Image.open(io.BytesIO(self.get(f"/view?{query}"))).convert("RGB")
                out.setdefault(node_id, []).append(np.asarray(pixels, dtype=np.int16))
        return out

    def audios(self, entry: dict) -> dict[str, list[np.ndarray]]:
        """The saved audio of each output node, decoded to 16-bit sample levels `[channels, samples]`."""
        from comfy_core.video.audio_files import read_audio

        out: dict[str, list[np.ndarray]] = {}
        for node_id, output in entry.get("outputs", {}).items():
            for audio in output.get("audio", []):
                query = urllib.parse.urlencode({k: audio.get(k, "") for k in ("filename", "subfolder", "type")})
                with tempfile.NamedTemporaryFile(suffix=Path(audio["filename"]).suffix) as file:
                    file.write(self.get(f"/view?{query}"))
                    file.flush()
                    waveform, rate = read_audio(file.name)
                levels = np.round(waveform.numpy().astype(np.float64) * 32768).astype(np.int64)
                out.setdefault(node_id, []).append((levels, rate))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def common_parser(doc: str, timeout: float) -> argparse.ArgumentParser:
    """The arguments both parity scripts take (this one and pack_parity_real.py)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("workflows", nargs="+", type=Path)
    parser.add_argument("--packs-dir", type=Path, required=True)
    parser.add_argument("--pack", action="append", default=[])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--comfyui", type=Path, required=True)
    parser.add_argument("--comfy-python", required=True)
    parser.add_argument("--timeout", type=float, default=timeout)
    parser.add_argument("--keep", action="store_true", help="keep the base directories and print where")
    return parser


def work_folders(prefix: str) -> tuple[Path, Path]:
    """A fresh temporary folder and, inside it, the `shared/` folder (models/, input/) both servers read."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    shared = tmp / "shared"
    (shared / "models").mkdir(parents=True)
    (shared / "input").mkdir()
    return tmp, shared


def main(argv: list[str] | None = None) -> int:
    args = common_parser(__doc__, timeout=600.0).parse_args(argv)
    import tests.fixtures.template_models as template_models
    from tests.fixtures.template_models import LOADER_INPUTS, WRITERS, provide_files, register_writer

    LOADER_INPUTS.update(PACK_LOADER_INPUTS)
    for kind, writer in PACK_WRITERS.items():
        register_writer(kind, writer)
    template_kind = template_models.file_kind
    # provide_files looks the kind up through the module's global: pack files first
    template_models.file_kind = lambda folder, name: pack_file_kind(folder, name) or template_kind(folder, name)

    # ComfyUI's detection needs SD1's transformer count per block, which the quick "sd1_fast"
    # stand-in of the template tests leaves out: the full tiny SD1 layout here.
    register_writer("sd1", WRITERS["sd1_full"])

    packs = [args.packs_dir / name for name in args.pack]
    prompts = {wf.stem: json.loads(wf.read_text()) for wf in args.workflows}
    tmp, shared = work_folders("pack_parity_")
    for prompt in prompts.values():
        provide_files(prompt, shared)
    servers = [Server("ours", [args.python, str(REPO / "main.py")], REPO, tmp / "ours", shared, packs),
               Server("ComfyUI", [args.comfy_python, str(args.comfyui / "main.py")], args.comfyui, tmp / "comfy",
                      shared, packs + [TINY_MODELS_FOR_COMFYUI])]
    try:
        for server in servers:
            server.wait_ready(args.timeout)
        for name, prompt in prompts.items():
            ours, theirs = (server.run(prompt, args.timeout) for server in servers)
            for line in compare_with(servers, ours, theirs):
                print(f"{name:36} {line}", flush=True)
    finally:
        for server in servers:
            server.stop()
        if args.keep:
            print("base directories:", tmp)
    return 0


def compare_with(servers: list[Server], ours: dict, theirs: dict) -> list[str]:
    if "error" in ours or "error" in theirs:
        return [f"ours: {ours.get('error', 'ok')} | ComfyUI: {theirs.get('error', 'ok')}"]
    lines = compare_images(servers[0].images(ours), servers[1].images(theirs))
    sounds = compare_audio(servers[0].audios(ours), servers[1].audios(theirs))
    return sounds if lines == ["no images"] and sounds else lines + sounds


def compare_audio(a: dict, b: dict) -> list[str]:
    """Per output node and clip (ours `a`, ComfyUI's `b`, each `(levels [C, S], rate)`): shape, rate,
    the largest and mean difference in 16-bit sample levels."""
    lines = []
    for node_id in sorted(set(a) | set(b)):
        x, y = a.get(node_id, []), b.get(node_id, [])
        if len(x) != len(y):
            lines.append(f"node {node_id}: {len(x)} clips here, {len(y)} on ComfyUI")
            continue
        for i, ((p, rate_p), (q, rate_q)) in enumerate(zip(x, y)):
            if p.shape != q.shape or rate_p != rate_q:
                lines.append(f"node {node_id}[{i}]: {p.shape} at {rate_p} Hz here, {q.shape} at {rate_q} Hz on ComfyUI")
            else:
                d = np.abs(p - q)
                lines.append(f"node {node_id}[{i}] audio {p.shape[0]}ch {p.shape[1]} samples {rate_p} Hz: "
                             f"max {d.max()} mean {d.mean():.3f} (16-bit levels)")
    return lines


def compare_images(a: dict[str, list[np.ndarray]], b: dict[str, list[np.ndarray]]) -> list[str]:
    """Per output node and image (ours `a`, ComfyUI's `b`): the largest and mean difference in levels."""
    lines = []
    for node_id in sorted(set(a) | set(b)):
        x, y = a.get(node_id, []), b.get(node_id, [])
        if len(x) != len(y):
            lines.append(f"node {node_id}: {len(x)} images here, {len(y)} on ComfyUI")
            continue
        for i, (p, q) in enumerate(zip(x, y)):
            if p.shape != q.shape:
                lines.append(f"node {node_id}[{i}]: shape {p.shape} here, {q.shape} on ComfyUI")
            else:
                d = np.abs(p - q)
                lines.append(f"node {node_id}[{i}] {p.shape[1]}x{p.shape[0]}: max {d.max()} mean {d.mean():.3f}")
    return lines or ["no images"]


if __name__ == "__main__":
    raise SystemExit(main())
