"""ACE-Step 1's DiT and music VAE side by side with ComfyUI 0.3.64's modules, same random weights.

    .venv/bin/python bench/ace_step1_parity.py --comfyui /path/to/ComfyUI-0.3.64

ComfyUI 0.3.64 cannot load tiny ACE-Step files through its loaders (its `unet_config` for this
family is `{"audio_model": "ace"}`, so it always builds the released 1536-wide, 28-block DiT, and
its VAE the released DC-AE), so whole-workflow parity (bench/pack_parity.py) needs the full 3.5 B
file. This script instead imports ComfyUI's own classes from `--comfyui` in this process (CPU,
float32), builds them at small widths (DiT 128 wide, 2 blocks, the released lyric encoder; DC-AE
32..64 wide, a 2-stage ConvNeXt + 128-channel HiFi-GAN vocoder), loads the same random weights
into ours, and prints the largest absolute difference of: the DiT's output, its encoder states,
the VAE's decode (latent -> waveform) and the DC-AE encoder. torchaudio (ComfyUI's mel scale) is
stood in for by an empty class, which neither compared path calls.
"""
from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _import_comfyui(path: str) -> None:
    sys.path.insert(0, path)
    sys.argv = [sys.argv[0], "--cpu"]
    audio = types.ModuleType("torchaudio")
    transforms = types.ModuleType("torchaudio.transforms")

    class MelScale(torch.nn.Module):  # not called by the compared paths
        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    transforms.MelScale = MelScale
    audio.transforms = transforms
    sys.modules.setdefault("torchaudio", audio)
    sys.modules.setdefault("torchaudio.transforms", transforms)
    import comfy.options

    comfy.options.enable_args_parsing()


def _random_like(state: dict, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in state.items():
        if "mel_transform" in name:
            continue
        x = torch.randn(value.shape, generator=gen) * (0.05 if "dcae" not in name and "vocoder" not in name else 0.1)
        if name.endswith(("original0", "gamma")) or ("norm" in name and name.endswith("weight")):
            x = x + 1.0
        out[name] = x
    return out


def dit() -> None:
    import comfy.ldm.ace.model as reference_module
    import comfy.ops

    from comfy_core.families.ace_step.dit import AceStepConfig, AceStepTransformer

    reference = reference_module.ACEStepTransformer2DModel(
        in_channels=8, num_layers=2, inner_dim=128, attention_head_dim=64, num_attention_heads=2, out_channels=8,
        lyric_encoder_vocab_size=300, operations=comfy.ops.disable_weight_init)
    state = _random_like(reference.state_dict(), 0)
    reference.load_state_dict(state, strict=True)
    reference.eval()
    ours = AceStepTransformer(AceStepConfig.detect_from_weights(state)).eval()
    ours.load_state_dict(state, strict=True)
    torch.manual_seed(1)
    x, t = torch.randn(1, 8, 16, 12), torch.tensor([500.0])
    context, lyrics, speaker = torch.randn(1, 5, 768), torch.randint(0, 300, (1, 7)), torch.zeros(1, 512)
    with torch.no_grad():
        a = reference(x, t, context=context, speaker_embeds=speaker, lyric_token_idx=lyrics, lyrics_strength=0.7)
        b = ours(x, t, context=context, speaker_embeds=speaker, lyric_token_idx=lyrics, lyrics_strength=0.7)
        states_a, _ = reference.encode(context, None, speaker, lyrics, None, 0.7)
        states_b = ours.encode(context, speaker, lyrics, 0.7)
    print(f"DiT output            max |diff| {(a - b).abs().max().item():.3e}  (max |out| {a.abs().max().item():.3f})")
    print(f"DiT encoder states    max |diff| {(states_a - states_b).abs().max().item():.3e}")


def vae() -> None:
    from comfy.ldm.ace.vae.music_dcae_pipeline import MusicDCAE as Reference

    from comfy_core.models.music_dcae import MusicDCAE, MusicDCAEConfig, music_dcae_state_dict

    dcae = dict(encoder_block_out_channels=(32, 32, 32, 64), decoder_block_out_channels=(32, 32, 32, 64),
                encoder_layers_per_block=(1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 2))
    vocoder = dict(depths=[1, 1], dims=[16, 32], num_mels=32, upsample_initial_channel=128,
                   resblock_kernel_sizes=(3, 7), resblock_dilation_sizes=((1, 3, 5), (1, 3, 5)))
    reference = Reference(source_sample_rate=44100, dcae_config=dcae, vocoder_config=vocoder).eval()
    state = _random_like(reference.state_dict(), 2)
    reference.load_state_dict(state, strict=False)
    ours_state = music_dcae_state_dict(state)
    ours = MusicDCAE(MusicDCAEConfig.detect_from_weights(ours_state)).eval()
    ours.load_state_dict(ours_state, strict=True)
    torch.manual_seed(3)
    z, mel = torch.randn(1, 8, 16, 2), torch.randn(1, 2, 128, 32)
    with torch.no_grad():
        a, b = reference.decode(z), ours.decode(z)
        e1, e2 = reference.dcae.encoder(mel), ours.dcae.encoder(mel)
    print(f"VAE decode (waveform) max |diff| {(a - b).abs().max().item():.3e}  (max |out| {a.abs().max().item():.3f})")
    print(f"DC-AE encoder         max |diff| {(e1 - e2).abs().max().item():.3e}  "
          f"(max |out| {e1.abs().max().item():.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", required=True, help="a ComfyUI 0.3.64 checkout")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    _import_comfyui(args.comfyui)
    dit()
    vae()


if __name__ == "__main__":
    main()
