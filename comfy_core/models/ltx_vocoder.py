"""LTX-2's vocoders: mel spectrogram `[B, 2, mels, T]` to a stereo waveform `[B, 2, S]`.

Two generators, chosen by the checkpoint's `vocoder` config (the safetensors metadata), with
ComfyUI's module names (`comfy/ldm/lightricks/vocoders/vocoder.py`) so its files load as they are:

- `Vocoder`: HiFi-GAN (Kong et al. 2020, "HiFi-GAN: Generative Adversarial Networks for Efficient
  and High Fidelity Speech Synthesis"): `conv_pre`, transposed-convolution upsamplers `ups.N`, each
  followed by the mean of multi-receptive-field residual blocks (`resblock` "1": three dilated
  pairs, "2": two dilated convolutions, LeakyReLU 0.1), `act_post`, `conv_post`, then tanh (or a
  clamp). `resblock` "AMP1" is BigVGAN v2's anti-aliased multi-periodicity block (Lee et al. 2023,
  "BigVGAN: A Universal Neural Vocoder with Large-Scale Training"): Snake / SnakeBeta periodic
  activations run at twice the rate between Kaiser-windowed sinc low-pass filters.
- `VocoderWithBWE` (LTX-2.3): the vocoder at a low rate, then a bandwidth extender: a causal
  log-mel of that waveform (an STFT as a convolution with the checkpoint's DFT x window bases)
  drives a second generator whose output is added to the waveform upsampled by a Hann-windowed
  sinc filter, clamped to -1..1.

Written here from the published architectures and ComfyUI's configuration keys; numerics are
tested against diffusers' `LTX2Vocoder` / `LTX2VocoderWithBWE` (tests/comfy_core/test_ltx_audio_vae.py).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

LRELU_SLOPE = 0.1
RESBLOCK_KINDS = ("1", "2", "AMP1")


class VocoderConfigError(ValueError):
    """A vocoder config (the checkpoint's metadata) that names an unknown block or is inconsistent."""


def _same_padding(kernel: int, dilation: int = 1) -> int:
    return (kernel * dilation - dilation) // 2


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> torch.Tensor:
    """A Kaiser-windowed sinc low-pass filter `[1, 1, kernel_size]` summing to 1 (BigVGAN's
    `kaiser_sinc_filter1d`; the Kaiser beta from the transition width by Kaiser's formula)."""
    half = kernel_size // 2
    attenuation = 2.285 * (half - 1) * math.pi * (4 * half_width) + 7.95
    if attenuation > 50.0:
        beta = 0.1102 * (attenuation - 8.7)
    elif attenuation >= 21.0:
        beta = 0.5842 * (attenuation - 21) ** 0.4 + 0.07886 * (attenuation - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel_size, beta=beta, periodic=False)
    if kernel_size % 2 == 0:
        t = torch.arange(-half, half) + 0.5
    else:
        t = torch.arange(kernel_size) - half
    if cutoff == 0:
        taps = torch.zeros_like(t)
    else:
        x = 2 * cutoff * t
        sinc = torch.where(x == 0, torch.ones_like(x), torch.sin(math.pi * x) / (math.pi * x))
        taps = 2 * cutoff * window * sinc
        taps = taps / taps.sum()
    return taps.view(1, 1, kernel_size)


class LowPassFilter1d(nn.Module):
    """Depthwise low-pass (replicate padding), optionally strided: BigVGAN's anti-alias filter."""

    def __init__(self, cutoff: float, half_width: float, stride: int, kernel_size: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad_left = kernel_size // 2 - int(kernel_size % 2 == 0)
        self.pad_right = kernel_size // 2
        self.register_buffer("filter", kaiser_sinc_filter(cutoff, half_width, kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S] -> [B, C, S / stride]
        channels = x.shape[1]
        x = F.pad(x, (self.pad_left, self.pad_right), mode="replicate")
        taps = self.filter.to(device=x.device, dtype=x.dtype).expand(channels, -1, -1)
        return F.conv1d(x, taps, stride=self.stride, groups=channels)


class UpSample1d(nn.Module):
    """Integer-ratio upsampling by a transposed depthwise sinc filter (replicate edges).

    `window="kaiser"`: BigVGAN's anti-alias upsampler; `window="hann"`: the Hann-windowed sinc
    (rolloff 0.99, 6 zero crossings) of torchaudio's `sinc_interp_hann` resampling, which the
    LTX-2.3 bandwidth extender uses for its skip path."""

    def __init__(self, ratio: int = 2, kernel_size: int | None = None, window: str = "kaiser",
                 persistent: bool = True) -> None:
        super().__init__()
        self.ratio = ratio
        if window == "hann":
            rolloff, zero_crossings = 0.99, 6
            width = math.ceil(zero_crossings / rolloff)
            self.kernel_size = 2 * width * ratio + 1
            self.pad = width
            self.pad_left = 2 * width * ratio
            self.pad_right = self.kernel_size - ratio
            t = (torch.arange(self.kernel_size) / ratio - width) * rolloff
            hann = torch.cos(t.clamp(-zero_crossings, zero_crossings) * math.pi / zero_crossings / 2) ** 2
            taps = (torch.sinc(t) * hann * rolloff / ratio).view(1, 1, -1)
        elif window == "kaiser":
            self.kernel_size = int(6 * ratio // 2) * 2 if kernel_size is None else kernel_size
            self.pad = self.kernel_size // ratio - 1
            self.pad_left = self.pad * ratio + (self.kernel_size - ratio) // 2
            self.pad_right = self.pad * ratio + (self.kernel_size - ratio + 1) // 2
            taps = kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, self.kernel_size)
        else:
            raise VocoderConfigError(f"UpSample1d: unknown window {window!r} (expected 'kaiser' or 'hann')")
        self.register_buffer("filter", taps, persistent=persistent)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S] -> [B, C, S * ratio]
        channels = x.shape[1]
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        taps = self.filter.to(device=x.device, dtype=x.dtype).expand(channels, -1, -1)
        x = self.ratio * F.conv_transpose1d(x, taps, stride=self.ratio, groups=channels)
        return x[..., self.pad_left:-self.pad_right]


class DownSample1d(nn.Module):
    def __init__(self, ratio: int = 2, kernel_size: int | None = None) -> None:
        super().__init__()
        size = int(6 * ratio // 2) * 2 if kernel_size is None else kernel_size
        self.lowpass = LowPassFilter1d(0.5 / ratio, 0.6 / ratio, ratio, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lowpass(x)


class Activation1d(nn.Module):
    """An activation run at twice the rate: upsample, activate, low-pass and decimate."""

    def __init__(self, activation: nn.Module, ratio: int = 2, kernel_size: int = 12) -> None:
        super().__init__()
        self.act = activation
        self.upsample = UpSample1d(ratio, kernel_size)
        self.downsample = DownSample1d(ratio, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(self.act(self.upsample(x)))


class Snake(nn.Module):
    """Snake, `x + sin^2(a x) / a` per channel (Ziyin et al. 2020); `a` stored as a log."""

    def __init__(self, channels: int, beta: bool = False) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels)) if beta else None
        self.eps = 1e-9

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S]
        a = self.alpha.to(x).view(1, -1, 1).exp()
        amplitude = a if self.beta is None else self.beta.to(x).view(1, -1, 1).exp()
        return x + torch.sin(x * a).pow(2) / (amplitude + self.eps)


def _activation(kind: str, channels: int) -> nn.Module:
    """ComfyUI's AMP activations: "snakebeta" is SnakeBeta, anything else Snake."""
    return Snake(channels, beta=kind == "snakebeta")


class ResBlock1(nn.Module):
    """HiFi-GAN's MRF block "1": three (LeakyReLU, dilated conv, LeakyReLU, conv) residual pairs."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, dilation=d,
                                              padding=_same_padding(kernel, d)) for d in dilations[:3])
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, padding=_same_padding(kernel))
                                    for _ in dilations[:3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for first, second in zip(self.convs1, self.convs2):
            x = x + second(F.leaky_relu(first(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
        return x


class ResBlock2(nn.Module):
    """HiFi-GAN's lighter MRF block "2": two (LeakyReLU, dilated conv) residuals."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, dilation=d,
                                             padding=_same_padding(kernel, d)) for d in dilations[:2])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, LRELU_SLOPE))
        return x


class AMPBlock1(nn.Module):
    """BigVGAN v2's AMP block: block "1" with anti-aliased periodic activations."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], activation: str) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, dilation=d,
                                              padding=_same_padding(kernel, d)) for d in dilations[:3])
        self.convs2 = nn.ModuleList(nn.Conv1d(channels, channels, kernel, 1, padding=_same_padding(kernel))
                                    for _ in dilations[:3])
        self.acts1 = nn.ModuleList(Activation1d(_activation(activation, channels)) for _ in self.convs1)
        self.acts2 = nn.ModuleList(Activation1d(_activation(activation, channels)) for _ in self.convs2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for first, second, act1, act2 in zip(self.convs1, self.convs2, self.acts1, self.acts2):
            x = x + second(act2(first(act1(x))))
        return x


class Vocoder(nn.Module):
    """HiFi-GAN / BigVGAN v2 generator configured as ComfyUI reads the checkpoint's `vocoder` dict."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        config = dict(config or {})
        kernels = list(config.get("resblock_kernel_sizes", [3, 7, 11]))
        rates = list(config.get("upsample_rates", [5, 4, 2, 2, 2]))
        up_kernels = list(config.get("upsample_kernel_sizes", [16, 16, 8, 4, 4]))
        dilations = [tuple(d) for d in config.get("resblock_dilation_sizes", [[1, 3, 5]] * 3)]
        width = int(config.get("upsample_initial_channel", 1024))
        stereo = bool(config.get("stereo", True))
        activation = str(config.get("activation", "snake"))
        self.resblock = str(config.get("resblock", "1"))
        if self.resblock not in RESBLOCK_KINDS:
            raise VocoderConfigError(f"vocoder: unknown resblock {self.resblock!r} (expected one of {RESBLOCK_KINDS})")
        if len(rates) != len(up_kernels) or len(kernels) != len(dilations):
            raise VocoderConfigError(f"vocoder: {len(rates)} upsample rates for {len(up_kernels)} kernels, "
                                     f"{len(kernels)} resblock kernels for {len(dilations)} dilation sets")
        self.output_sample_rate = config.get("output_sample_rate")
        self.use_tanh_at_final = bool(config.get("use_tanh_at_final", True))
        self.apply_final_activation = bool(config.get("apply_final_activation", True))
        self.num_kernels = len(kernels)
        self.num_upsamples = len(rates)
        # ComfyUI fixes the input width: 64 mel bins per channel.
        self.conv_pre = nn.Conv1d(128 if stereo else 64, width, 7, 1, padding=3)
        self.ups = nn.ModuleList(nn.ConvTranspose1d(width // 2 ** i, width // 2 ** (i + 1), k, u, padding=(k - u) // 2)
                                 for i, (u, k) in enumerate(zip(rates, up_kernels)))
        self.resblocks = nn.ModuleList()
        channels = width
        for i in range(len(rates)):
            channels = width // 2 ** (i + 1)
            for kernel, dilation in zip(kernels, dilations):
                if self.resblock == "AMP1":
                    self.resblocks.append(AMPBlock1(channels, kernel, dilation, activation))
                elif self.resblock == "2":
                    self.resblocks.append(ResBlock2(channels, kernel, dilation))
                else:
                    self.resblocks.append(ResBlock1(channels, kernel, dilation))
        self.act_post = Activation1d(_activation(activation, channels)) if self.resblock == "AMP1" else nn.LeakyReLU()
        self.conv_post = nn.Conv1d(channels, 2 if stereo else 1, 7, 1, padding=3,
                                   bias=bool(config.get("use_bias_at_final", True)))
        self.upsample_factor = math.prod(rates)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """`mel` `[B, mels, T]` (mono) or `[B, 2, mels, T]` (stereo) -> waveform `[B, 1|2, T * factor]`."""
        if mel.ndim == 4:
            if mel.shape[1] != 2:
                raise VocoderConfigError(f"vocoder: a 4-D mel must be stereo [B, 2, mels, T], got {tuple(mel.shape)}")
            mel = torch.cat((mel[:, 0], mel[:, 1]), dim=1)  # [B, 2 * mels, T], left channel's bins first
        x = self.conv_pre(mel)
        for i, up in enumerate(self.ups):
            if self.resblock != "AMP1":
                x = F.leaky_relu(x, LRELU_SLOPE)
            x = up(x)
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / self.num_kernels
        x = self.conv_post(self.act_post(x))
        if self.apply_final_activation:
            x = torch.tanh(x) if self.use_tanh_at_final else x.clamp(-1, 1)
        return x


class _STFTFn(nn.Module):
    """A causal STFT as a strided convolution with the checkpoint's DFT x window bases
    (`forward_basis` `[2 * bins, 1, n_fft]`, real rows then imaginary rows)."""

    def __init__(self, filter_length: int, hop_length: int, win_length: int) -> None:
        super().__init__()
        self.hop_length = hop_length
        self.win_length = win_length
        bins = filter_length // 2 + 1
        self.register_buffer("forward_basis", torch.zeros(bins * 2, 1, filter_length))
        self.register_buffer("inverse_basis", torch.zeros(bins * 2, 1, filter_length))

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`y` `[B, S]` -> magnitude and phase `[B, bins, frames]`; left padding only (no lookahead)."""
        y = F.pad(y.unsqueeze(1), (max(0, self.win_length - self.hop_length), 0))
        spec = F.conv1d(y, self.forward_basis.to(y), stride=self.hop_length)
        bins = spec.shape[1] // 2
        real, imag = spec[:, :bins], spec[:, bins:]
        return torch.sqrt(real ** 2 + imag ** 2), torch.atan2(imag.float(), real.float()).to(real.dtype)


class MelSTFT(nn.Module):
    """Causal log-mel: `log(clamp(mel_basis @ |STFT|, 1e-5))` with the checkpoint's filterbank."""

    def __init__(self, filter_length: int, hop_length: int, win_length: int, mels: int) -> None:
        super().__init__()
        self.stft_fn = _STFTFn(filter_length, hop_length, win_length)
        self.register_buffer("mel_basis", torch.zeros(mels, filter_length // 2 + 1))

    def forward(self, y: torch.Tensor) -> torch.Tensor:  # [B, S] -> [B, mels, frames]
        magnitude, _ = self.stft_fn(y)
        return torch.log(torch.clamp(self.mel_basis.to(magnitude) @ magnitude, min=1e-5))


class VocoderWithBWE(nn.Module):
    """LTX-2.3's vocoder plus bandwidth extension (config `{"vocoder": ..., "bwe": ...}`), run in float32."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        bwe = dict(config["bwe"])
        for key in ("input_sampling_rate", "output_sampling_rate", "hop_length", "n_fft", "num_mels"):
            if key not in bwe:
                raise VocoderConfigError(f"vocoder: the bandwidth extender's config lacks {key!r}")
        self.vocoder = Vocoder(config.get("vocoder", {}))
        self.bwe_generator = Vocoder({**bwe, "apply_final_activation": False})
        self.input_sample_rate = int(bwe["input_sampling_rate"])
        self.output_sample_rate = int(bwe["output_sampling_rate"])
        if self.output_sample_rate % self.input_sample_rate:
            raise VocoderConfigError(f"vocoder: bandwidth extension from {self.input_sample_rate} Hz to "
                                     f"{self.output_sample_rate} Hz is not an integer ratio")
        self.hop_length = int(bwe["hop_length"])
        n_fft = int(bwe["n_fft"])
        self.mel_stft = MelSTFT(n_fft, self.hop_length, n_fft, int(bwe["num_mels"]))
        self.resampler = UpSample1d(self.output_sample_rate // self.input_sample_rate, window="hann", persistent=False)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """`mel` `[B, 2, mels, T]` -> `[B, 2, S * out / in]` at `output_sample_rate`."""
        dtype = mel.dtype
        with torch.autocast(device_type=mel.device.type, enabled=False):
            x = self._float(self.vocoder)(mel.float())  # [B, C, S]
            batch, channels, length = x.shape
            out_length = length * self.output_sample_rate // self.input_sample_rate
            if length % self.hop_length:
                x = F.pad(x, (0, self.hop_length - length % self.hop_length))
            low_mel = self.mel_stft(x.reshape(batch * channels, -1).float())
            low_mel = low_mel.reshape(batch, channels, *low_mel.shape[1:])  # [B, C, mels, frames]
            residual = self._float(self.bwe_generator)(low_mel)
            skip = self.resampler(x)
            return torch.clamp(residual + skip, -1, 1)[..., :out_length].to(dtype)

    @staticmethod
    def _float(module: nn.Module) -> nn.Module:
        """The generator as is when stored in float32; low-precision weights are used upcast per call."""
        for parameter in module.parameters():
            if parameter.dtype != torch.float32:
                return _Float32View(module)
            break
        return module


class _Float32View:
    """Calls a module with its weights upcast to float32 for this call only (bf16 storage keeps
    its memory; the BigVGAN chain of ~100 convolutions loses quality when accumulated in bf16)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        from torch.func import functional_call

        state = {name: t.float() for name, t in self.module.state_dict(keep_vars=True).items()}
        return functional_call(self.module, state, (x,))


def vocoder_from_config(config: Mapping[str, Any]) -> nn.Module:
    """ComfyUI's choice: a `bwe` section makes `VocoderWithBWE`, otherwise a plain `Vocoder`."""
    return VocoderWithBWE(config) if "bwe" in config else Vocoder(config)


def vocoder_output_rate(vocoder: nn.Module, mel_sample_rate: int, mel_hop_length: int) -> int:
    """The waveform's rate: the config's `output_sample_rate` where given, otherwise the mel's frame
    rate times the generator's total upsampling (`sample_rate * factor / hop`), as ComfyUI computes it."""
    rate = getattr(vocoder, "output_sample_rate", None)
    if rate is not None:
        return int(rate)
    return int(mel_sample_rate * vocoder.upsample_factor / mel_hop_length)
