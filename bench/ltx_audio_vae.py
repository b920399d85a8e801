"""Time and peak memory of LTX-2's audio VAE at the published widths (random weights), per stage.

    .venv/bin/python bench/ltx_audio_vae.py [--seconds 2] [--bwe] [--threads N]

The model is built from a config of the published sizes (stereo 64-bin log-mel at 16 kHz / hop 160,
autoencoder `ch` 128 x (1, 2, 4), 2 res blocks, pixel norm, causal; 8 x 16 latent; HiFi-GAN vocoder
of width 1024 upsampling x240 to 24 kHz, or with `--bwe` LTX-2.3's BigVGAN v2 vocoder to 16 kHz
plus a bandwidth extender to 48 kHz) with random weights, float32 on the CPU (CUDA when present).
Printed per stage: wall and process CPU seconds, and the peak resident-set growth (CPU) or CUDA's
allocator high-water mark. `--seconds` of audio: 25 latent frames a second. Nothing is
extrapolated; a real LTX-2 clip is the video's length (97 frames at 25 fps: 3.9 s).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from comfy_core.models.ltx_audio_vae import LTXAudioVAE  # noqa: E402


def published_metadata(bwe: bool) -> dict:
    ddconfig = {"ch": 128, "out_ch": 2, "ch_mult": [1, 2, 4], "num_res_blocks": 2, "attn_resolutions": [],
                "in_channels": 2, "resolution": 256, "z_channels": 8, "double_z": True, "mid_block_add_attention": False,
                "norm_type": "pixel", "causality_axis": "height", "mel_bins": 64}
    audio_vae = {"model": {"params": {"ddconfig": ddconfig, "sampling_rate": 16000,
                                      "preprocessing": {"stft": {"filter_length": 1024, "hop_length": 160}}}}}
    if not bwe:
        vocoder = {"resblock_kernel_sizes": [3, 7, 11], "upsample_rates": [6, 5, 2, 2, 2],
                   "upsample_kernel_sizes": [16, 15, 8, 4, 4], "resblock_dilation_sizes": [[1, 3, 5]] * 3,
                   "upsample_initial_channel": 1024, "stereo": True, "resblock": "1", "output_sample_rate": 24000}
    else:
        generator = {"resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5]] * 3, "stereo": True,
                     "resblock": "AMP1", "activation": "snakebeta", "use_bias_at_final": False}
        vocoder = {"vocoder": {**generator, "upsample_rates": [5, 2, 2, 2, 2, 2], "upsample_kernel_sizes": [11, 4, 4, 4, 4, 4],
                               "upsample_initial_channel": 1536, "apply_final_activation": False},
                   "bwe": {**generator, "upsample_rates": [6, 5, 2, 2, 2], "upsample_kernel_sizes": [12, 11, 4, 4, 4],
                           "upsample_initial_channel": 512, "input_sampling_rate": 16000, "output_sampling_rate": 48000,
                           "hop_length": 80, "n_fft": 512, "num_mels": 64}}
    return {"config": json.dumps({"audio_vae": audio_vae, "vocoder": vocoder})}


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(name: str, fn, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss()
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _rss() - base
    print(f"{name:>10}: {time.perf_counter() - wall:7.2f} s wall, {time.process_time() - cpu:7.2f} s cpu, "
          f"peak +{peak / 2 ** 20:8.1f} MiB, out {tuple(out.shape)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--bwe", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = LTXAudioVAE(published_metadata(args.bwe))
    for p in model.parameters():
        p.data.normal_(0, 0.02)
    model.to(device).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"device {device}, {torch.get_num_threads()} threads, {params / 1e6:.1f} M parameters, "
          f"{args.seconds} s of stereo audio, vocoder out {model.output_sample_rate} Hz")
    wave = 0.1 * torch.randn(1, 2, int(args.seconds * 44100), device=device)
    latent = measure("encode", lambda: model.encode(wave, 44100), device)
    mel = measure("decoder", lambda: model.decode_mel(latent), device)
    measure("vocoder", lambda: model.run_vocoder(mel), device)


if __name__ == "__main__":
    main()
