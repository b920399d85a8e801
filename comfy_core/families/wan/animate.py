"""Wan 2.2 Animate (the first release, "Wan-Animate"; Wan Team 2025, arXiv 2509.14055,
github.com/Wan-Video/Wan2.2 `wan/modules/animate`): the Wan 2.1 i2v 14B DiT driven by a pose video
and a face video. ComfyUI's `comfy/ldm/wan/model_animate.py` (`AnimateWanModel`) and
`model_base.WAN22_Animate` were read for behaviour and state-dict names; written here.

Besides the i2v network's weights (36 input channels: latent, 4 mask channels, 16 image channels;
CLIP-vision tokens through `img_emb`) the file holds:

- `pose_patch_embedding` (Conv3d 16 -> dim, the 1x2x2 patch): the pose video's latent, embedded and
  added to the patch tokens of latent frames 1.. (frame 0 is the reference image's slot): pose
  frame j lands on frame j + 1, pose frames past the end are dropped.
- `motion_encoder` (LIA's motion encoder, Wang et al. 2022, "Latent Image Animator", arXiv
  2203.09043; its StyleGAN2 layers after Karras et al. 2020, arXiv 1912.04958): each 512 x 512 face
  frame in -1..1 through an equalised-learning-rate conv tower (`enc.net_app`: a 1x1 conv, seven
  residual blocks halving the size with a [1, 3, 3, 1] blur before each strided conv, a 4x4 conv
  to a 512-vector), four equalised linears and one to 20 motion coefficients (`enc.fc`), then the
  coefficients times an orthonormal basis of 512-d directions (`dec.direction.weight` + 1e-8 I,
  QR-orthonormalised) -> one 512-d motion code per frame.
- `face_encoder`: the per-frame codes `[B, T, 512]` through three causal 1-D convolutions along
  time (kernel 3, left replicate padding; strides 1, 2, 2: T frames -> (T + 3) // 4, the latent's
  frame count for T = 4k + 1), the first one producing 4 heads x 1024 channels that are then
  treated as 4 separate sequences, each followed by a LayerNorm without affine and SiLU; a linear
  to the model width, and a learned padding token appended -> `[B, T', 5, dim]`.
- `face_adapter.fuser_blocks.N` (num_layers // 5 of them): after main block i with i % 5 == 0,
  block i // 5 adds cross-attention of the video tokens of each latent frame (LayerNorm, `linear1_q`,
  RMS-normed per head) to the 5 face tokens of the same frame (LayerNorm, `linear1_kv`, keys
  RMS-normed), through `linear2`. The face sequence gets a zero frame in front (the reference
  slot) and is padded with zero frames or cut to the latent's frames.

Without `pose_latents` and `face_pixel_values` the network is the plain i2v network.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.wan.animate_config import ADAPTER_EVERY, FACE_WIDTH, MODEL_TYPE, POSE_CHANNELS
from comfy_core.families.wan.blocks import attention, cast_param
from comfy_core.families.wan.dit import WanModel, _conv_in
from comfy_core.models.unet_blocks import operations_or_default

FACE_SIZE = 512  # the motion encoder's input frames (seven halvings to the final 4x4 conv)
STYLE_DIM = 512  # the motion code's width
MOTION_DIM = 20  # LIA's motion coefficients
FACE_HEADS = 4  # face tokens per frame before the padding token
TOWER = (32, 64, 128, 256, 512, 512, 512, 512)  # net_app's widths: the 1x1 conv, then seven residual blocks
BLUR = (1.0, 3.0, 3.0, 1.0)
MOTION_BATCH = 8  # face frames per motion-encoder call (ComfyUI's encode_bs)
EPS = 1e-6
LEAK, GAIN = 0.2, math.sqrt(2.0)


# -- the motion encoder (LIA) ----------------------------------------------------------------------

def _leaky(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """StyleGAN2's fused bias + leaky ReLU (slope 0.2) with the sqrt(2) gain; without a bias the
    plain leaky ReLU (its `ScaledLeakyReLU`, no gain)."""
    if bias is None:
        return F.leaky_relu(x, LEAK)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return F.leaky_relu(x + cast_param(bias, x).reshape(shape), LEAK) * GAIN


class EqualConv2d(nn.Module):
    """A conv whose weight is scaled by 1 / sqrt(fan in) at run time (equalised learning rate)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True,
                 dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin, kernel, kernel, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(cout, dtype=dtype, device=device)) if bias else None
        self.scale, self.stride, self.padding = 1.0 / math.sqrt(cin * kernel * kernel), stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = cast_param(self.bias, x) if self.bias is not None else None
        return F.conv2d(x, cast_param(self.weight, x) * self.scale, bias, stride=self.stride, padding=self.padding)


class EqualLinear(nn.Module):
    """A linear layer with the equalised-learning-rate weight scale 1 / sqrt(fan in)."""

    def __init__(self, cin: int, cout: int, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(cout, dtype=dtype, device=device))
        self.scale = 1.0 / math.sqrt(cin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, cast_param(self.weight, x) * self.scale, cast_param(self.bias, x))


class LeakyBias(nn.Module):
    """The learned bias of a fused leaky ReLU (`bias` `[1, C, 1, 1]`, the release's shape)."""

    def __init__(self, channels: int, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.empty(1, channels, 1, 1, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _leaky(x, self.bias)


class Blur(nn.Module):
    """The normalised separable [1, 3, 3, 1] low-pass per channel after zero padding (StyleGAN2's
    `upfirdn2d` with no up / down sampling); the kernel is a constant, not a weight."""

    def __init__(self, pad: tuple[int, int]) -> None:
        super().__init__()
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = torch.tensor(BLUR, dtype=x.dtype, device=x.device)
        k = torch.outer(k, k)
        k = (k / k.sum()).flip(0, 1).expand(x.shape[1], 1, *k.shape)
        p0, p1 = self.pad
        return F.conv2d(F.pad(x, (p0, p1, p0, p1)), k, groups=x.shape[1])


class LeakyReLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _leaky(x, None)


def conv_layer(cin: int, cout: int, kernel: int, downsample: bool = False, bias: bool = True, activate: bool = True,
               factory: dict[str, Any] | None = None) -> nn.Sequential:
    """StyleGAN2's ConvLayer as a Sequential with the release's child indices: [blur,] conv [, act]."""
    factory = factory or {}
    layers: list[nn.Module] = []
    if downsample:
        p = len(BLUR) - 2 + kernel - 1
        layers.append(Blur(((p + 1) // 2, p // 2)))
        stride, padding = 2, 0
    else:
        stride, padding = 1, kernel // 2
    layers.append(EqualConv2d(cin, cout, kernel, stride, padding, bias=bias and not activate, **factory))
    if activate:
        layers.append(LeakyBias(cout, **factory) if bias else LeakyReLU())
    return nn.Sequential(*layers)


class ResBlock(nn.Module):
    """Two 3x3 conv layers (the second halving the size) plus a blurred strided 1x1 skip, / sqrt 2."""

    def __init__(self, cin: int, cout: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.conv1 = conv_layer(cin, cin, 3, factory=factory)
        self.conv2 = conv_layer(cin, cout, 3, downsample=True, factory=factory)
        self.skip = conv_layer(cin, cout, 1, downsample=True, bias=False, activate=False, factory=factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.conv2(self.conv1(x)) + self.skip(x)) / math.sqrt(2.0)


class MotionEncoder(nn.Module):
    """LIA's encoder + motion direction basis (module docstring): faces `[N, 3, 512, 512]` in -1..1
    -> motion codes `[N, 512]`. Attribute names are the release's (`enc.net_app.convs`, `enc.fc`,
    `dec.direction.weight`)."""

    def __init__(self, factory: dict[str, Any]) -> None:
        super().__init__()
        convs: list[nn.Module] = [conv_layer(3, TOWER[0], 1, factory=factory)]
        convs += [ResBlock(a, b, factory) for a, b in zip(TOWER[:-1], TOWER[1:])]
        convs.append(EqualConv2d(TOWER[-1], STYLE_DIM, 4, bias=False, **factory))
        self.enc = nn.Module()
        self.enc.net_app = nn.Module()
        self.enc.net_app.convs = nn.ModuleList(convs)
        self.enc.fc = nn.Sequential(*[EqualLinear(STYLE_DIM, STYLE_DIM, **factory) for _ in range(4)],
                                    EqualLinear(STYLE_DIM, MOTION_DIM, **factory))
        self.dec = nn.Module()
        self.dec.direction = nn.Module()
        self.dec.direction.weight = nn.Parameter(torch.empty(STYLE_DIM, MOTION_DIM, **factory))

    def directions(self, like: torch.Tensor) -> torch.Tensor:
        """The orthonormal basis `[512, 20]` (QR in float32 of the stored directions + 1e-8 I)."""
        w = self.dec.direction.weight.to(device=like.device, dtype=torch.float32)
        w = w + 1e-8 * torch.eye(*w.shape, device=w.device, dtype=w.dtype)
        return torch.linalg.qr(w)[0]

    def forward(self, faces: torch.Tensor) -> torch.Tensor:
        h = faces
        for conv in self.enc.net_app.convs:
            h = conv(h)
        coefficients = self.enc.fc(h.flatten(1))  # [N, 20]
        return coefficients @ self.directions(faces).to(coefficients.dtype).T  # [N, 512]


# -- the face encoder and the face adapter ------------------------------------------------------------

class CausalConv1d(nn.Module):
    """A 1-D convolution along time padded on the left by replicating the first frame (kernel - 1)."""

    def __init__(self, cin: int, cout: int, stride: int, ops: Any, factory: dict[str, Any], kernel: int = 3) -> None:
        super().__init__()
        self.pad = kernel - 1
        self.conv = ops.Conv1d(cin, cout, kernel, stride=stride, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (self.pad, 0), mode="replicate"))


class FaceEncoder(nn.Module):
    """Motion codes `[B, T, C]` -> face tokens `[B, (T + 3) // 4, 5, dim]` (module docstring)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.conv1_local = CausalConv1d(in_dim, FACE_WIDTH * FACE_HEADS, 1, ops, factory)
        self.conv2 = CausalConv1d(FACE_WIDTH, FACE_WIDTH, 2, ops, factory)
        self.conv3 = CausalConv1d(FACE_WIDTH, FACE_WIDTH, 2, ops, factory)
        self.out_proj = ops.Linear(FACE_WIDTH, dim, **factory)
        self.padding_tokens = nn.Parameter(torch.empty(1, 1, 1, dim, **factory))

    @staticmethod
    def _norm_act(x: torch.Tensor) -> torch.Tensor:
        """`[N, C, T]` -> LayerNorm over C (no affine), SiLU, `[N, T, C]`."""
        return F.silu(F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=EPS))

    def forward(self, motion: torch.Tensor) -> torch.Tensor:
        b = motion.shape[0]
        h = self.conv1_local(motion.transpose(1, 2))  # [B, 4 * 1024, T]
        h = h.reshape(b * FACE_HEADS, FACE_WIDTH, h.shape[-1])  # each head a sequence of its own
        h = self._norm_act(h)
        h = self._norm_act(self.conv2(h.transpose(1, 2)))
        h = self._norm_act(self.conv3(h.transpose(1, 2)))  # [B*4, T', 1024]
        h = self.out_proj(h)
        h = h.reshape(b, FACE_HEADS, *h.shape[1:]).transpose(1, 2)  # [B, T', 4, dim]
        pad = cast_param(self.padding_tokens, h).expand(b, h.shape[1], 1, h.shape[-1])
        return torch.cat([h, pad], dim=2)  # [B, T', 5, dim]


class RMSNorm(nn.Module):
    """RMS normalisation over the last axis with a learned scale (torch.nn.RMSNorm's names)."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight=cast_param(self.weight, x), eps=EPS)


class FaceBlock(nn.Module):
    """Per-frame cross-attention of the video tokens to that frame's face tokens (module docstring)."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.linear1_kv = ops.Linear(dim, 2 * dim, **factory)
        self.linear1_q = ops.Linear(dim, dim, **factory)
        self.linear2 = ops.Linear(dim, dim, **factory)
        self.q_norm = RMSNorm(dim // heads, factory)
        self.k_norm = RMSNorm(dim // heads, factory)

    def forward(self, x: torch.Tensor, faces: torch.Tensor, transformer_options: Any = None) -> torch.Tensor:
        """x `[B, T*S, dim]` (T latent frames of S tokens), faces `[B, T, N, dim]` -> `[B, T*S, dim]`."""
        b, t, n, dim = faces.shape
        d = dim // self.heads
        kv = self.linear1_kv(F.layer_norm(faces, (dim,), eps=EPS))  # [B, T, N, 2 dim]
        k = self.k_norm(kv[..., :dim].unflatten(-1, (self.heads, d)))
        v = kv[..., dim:].unflatten(-1, (self.heads, d)).to(k.dtype)
        q = self.q_norm(self.linear1_q(F.layer_norm(x, (dim,), eps=EPS)).unflatten(-1, (self.heads, d))).to(v.dtype)
        q = q.reshape(b * t, -1, dim)  # [(B T), S, dim]: frame by frame
        out = attention(q, k.reshape(b * t, n, dim), v.reshape(b * t, n, dim), self.heads, transformer_options)
        return self.linear2(out.reshape(b, -1, dim))


class FaceAdapter(nn.Module):
    def __init__(self, dim: int, heads: int, count: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.fuser_blocks = nn.ModuleList(FaceBlock(dim, heads, ops, factory) for _ in range(count))


# -- the network ------------------------------------------------------------------------------------

class AnimateWanModel(WanModel):
    """Wan 2.2 Animate (module docstring): the i2v DiT plus the pose embedding (through the
    `add_control` hook), the face path (its tokens through `hint_tokens`) and the face adapter
    after every fifth block (`add_hints`). ComfyUI's `AnimateWanModel`."""

    def __init__(self, model_type: str = MODEL_TYPE, motion_encoder_dim: int = STYLE_DIM, **kwargs: Any) -> None:
        import dataclasses

        super().__init__(model_type=MODEL_TYPE, **kwargs)
        self.config = dataclasses.replace(self.config, motion_encoder_dim=motion_encoder_dim)
        ops = operations_or_default(kwargs.get("operations"))
        factory = {"dtype": kwargs.get("dtype"), "device": kwargs.get("device")}
        self.pose_patch_embedding = ops.Conv3d(POSE_CHANNELS, self.dim, kernel_size=self.patch_size,
                                               stride=self.patch_size, **factory)
        self.motion_encoder = MotionEncoder(factory)
        self.face_adapter = FaceAdapter(self.dim, self.num_heads, self.num_layers // ADAPTER_EVERY, ops, factory)
        self.face_encoder = FaceEncoder(motion_encoder_dim, self.dim, ops, factory)

    def add_control(self, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        """Pose frame j's embedding added to latent frame j + 1 of the patch tokens `[B, C, T, H, W]`."""
        pose = kwargs.get("pose_latents")
        if pose is None:
            return x
        pose = _conv_in(self.pose_patch_embedding, pad_to_patch_size(pose.to(x.dtype), self.patch_size))
        n = min(pose.shape[2], x.shape[2] - 1)
        if n <= 0:
            return x
        return torch.cat([x[:, :, :1], x[:, :, 1:n + 1] + pose[:, :, :n].to(x.dtype), x[:, :, n + 1:]], dim=2)

    def face_tokens(self, faces: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Face video `[B, 3, T, 512, 512]` in -1..1 -> `[B, 1 + (T + 3) // 4, 5, dim]` (a zero frame
        in front for the reference slot)."""
        b, _, t = faces.shape[:3]
        frames = faces.to(dtype).movedim(2, 1).reshape(b * t, *faces.shape[1:2], *faces.shape[3:])
        motion = torch.cat([self.motion_encoder(chunk) for chunk in frames.split(MOTION_BATCH)])
        tokens = self.face_encoder(motion.reshape(b, t, -1))
        return torch.cat([torch.zeros_like(tokens[:, :1]), tokens], dim=1)

    def hint_tokens(self, kwargs: Mapping[str, Any], dtype: torch.dtype) -> torch.Tensor | None:
        faces = kwargs.get("face_pixel_values")
        return None if faces is None else self.face_tokens(faces, dtype)

    def add_hints(self, i: int, x: torch.Tensor, x_orig: torch.Tensor, faces: torch.Tensor,
                  kwargs: Mapping[str, Any], e0: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                  context_img_len: int | None, options: dict[str, Any]) -> torch.Tensor:
        index, rest = divmod(i, ADAPTER_EVERY)
        if rest or index >= len(self.face_adapter.fuser_blocks):
            return x
        frames = options["grid_sizes"][0]
        if faces.shape[1] < frames:  # zero frames after the face video's end
            faces = torch.cat([faces, faces.new_zeros(faces.shape[0], frames - faces.shape[1], *faces.shape[2:])], 1)
        return x + self.face_adapter.fuser_blocks[index](x, faces[:, :frames].to(x.dtype), options)
