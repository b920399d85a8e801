"""A fixture pack that loads models the way ComfyUI-GGUF does (its loader.py / ops.py / nodes.py),
without the `gguf` package: weights are held in a `torch.Tensor` subclass over packed bytes
(`QTensor`, as GGUF's `GGMLTensor`: `.shape` is the logical shape, `.to()` keeps the class,
`clone()`/`detach()` return the tensor itself), the UNet is built by
`comfy.sd.load_diffusion_model_state_dict(sd, model_options={"custom_operations": QOps})` from
layer classes subclassing `comfy.ops.manual_cast` that take such tensors in their own
`_load_from_state_dict` and dequantize them in `forward_comfy_cast_weights`, and the MODEL is
re-classed with `QModelPatcher.clone(model)` (a `comfy.model_patcher.ModelPatcher` subclass with
GGUF's overrides). The text encoders load through `comfy.sd.load_text_encoder_state_dicts` with
the same `custom_operations`, and the CLIP's patcher is re-classed with
`QModelPatcher.clone(clip.patcher)`, as CLIPLoaderGGUF does.

Quantization: per output row, a float32 scale and int8 values (`quantize_rows`); 2-D weights
whose rows are at least 16 wide are quantized, everything else stays a plain tensor.
"""
import collections

import torch

import comfy.lora
import comfy.model_management
import comfy.model_patcher
import comfy.ops
import comfy.sd
import comfy.utils
import folder_paths

Q8_ROWS = "Q8_ROWS"


def quantize_rows(weight):
    """[rows, cols] float -> uint8 [rows, 4 + cols]: the row's float32 scale, then int8 values."""
    scale = weight.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127  # [rows, 1]
    values = torch.round(weight.float() / scale).clamp(-127, 127).to(torch.int8)
    return torch.cat([scale.contiguous().view(torch.uint8), values.view(torch.uint8)], dim=1)


def dequantize_rows(data, shape, dtype):
    scale = data[:, :4].contiguous().view(torch.float32)  # [rows, 1]
    values = data[:, 4:].contiguous().view(torch.int8)
    return (values.to(torch.float32) * scale).to(dtype).reshape(shape)


class QTensor(torch.Tensor):
    """Packed weights with their logical shape (GGUF's GGMLTensor pattern)."""

    def __new__(cls, data, *, tensor_type, tensor_shape, patches=()):
        return torch.Tensor._make_subclass(cls, data)

    def __init__(self, data, *, tensor_type, tensor_shape, patches=()):
        super().__init__()
        self.tensor_type = tensor_type
        self.tensor_shape = tensor_shape
        self.patches = list(patches)

    def to(self, *args, **kwargs):
        new = super().to(*args, **kwargs)
        new.tensor_type = getattr(self, "tensor_type", None)
        new.tensor_shape = getattr(self, "tensor_shape", new.data.shape)
        new.patches = list(getattr(self, "patches", []))
        return new

    def clone(self, *args, **kwargs):
        return self

    def detach(self, *args, **kwargs):
        return self

    @property
    def shape(self):
        if not hasattr(self, "tensor_shape"):
            self.tensor_shape = self.size()
        return self.tensor_shape


def is_quantized(tensor):
    return getattr(tensor, "tensor_type", None) == Q8_ROWS


def quantized_state_dict(sd, prefix="model.diffusion_model."):
    """The UNet tensors of a checkpoint state dict, 2-D weights quantized (as gguf_sd_loader gives them)."""
    out = {}
    for key, value in sd.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if value.ndim == 2 and value.shape[1] >= 16:
            out[name] = QTensor(quantize_rows(value), tensor_type=Q8_ROWS, tensor_shape=torch.Size(value.shape))
        else:
            out[name] = value
    return out


def dequantized_state_dict(qsd):
    return {k: dequantize_rows(v.data, v.tensor_shape, torch.float32) if is_quantized(v) else v for k, v in qsd.items()}


class QLayer(torch.nn.Module):
    comfy_cast_weights = True
    patches_applied = 0

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        weight = state_dict.get(prefix + "weight")
        if is_quantized(weight) or isinstance(self, torch.nn.Linear):
            for key, value in state_dict.items():
                if key[len(prefix):] == "weight":
                    self.weight = torch.nn.Parameter(value, requires_grad=False)
                elif key[len(prefix):] == "bias" and value is not None:
                    self.bias = torch.nn.Parameter(value, requires_grad=False)
                else:
                    unexpected_keys.append(key)
            if self.weight is None:
                missing_keys.append(prefix + "weight")
            return
        return super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                             unexpected_keys, error_msgs)

    def get_weight(self, tensor, dtype):
        if tensor is None:
            return None
        weight = dequantize_rows(tensor.data, tensor.tensor_shape, dtype) if is_quantized(tensor) else tensor.to(dtype)
        if isinstance(weight, QTensor):
            weight = torch.Tensor(weight)
        for patches, key in getattr(tensor, "patches", []):
            weight = comfy.lora.calculate_weight(patches, weight, key)
        return weight

    def cast_bias_weight(self, input=None, dtype=None, device=None, bias_dtype=None):
        dtype = input.dtype if dtype is None else dtype
        bias = None if self.bias is None else self.get_weight(self.bias.to(input.device), dtype)
        weight = self.get_weight(self.weight.to(input.device), dtype)
        return comfy.ops.cast_to(weight, dtype, input.device, copy=False), bias

    def forward_comfy_cast_weights(self, input, *args, **kwargs):
        if is_quantized(self.weight):
            out = self.forward_quantized(input, *args, **kwargs)
        else:
            out = super().forward_comfy_cast_weights(input, *args, **kwargs)
        if isinstance(out, QTensor):
            out = torch.Tensor(out)
        return out


class QOps(comfy.ops.manual_cast):
    class Linear(QLayer, comfy.ops.manual_cast.Linear):
        def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
            torch.nn.Module.__init__(self)  # no weights until the state dict gives them (as GGMLOps)
            self.in_features = in_features
            self.out_features = out_features
            self.weight = None
            self.bias = None

        def forward_quantized(self, input):
            weight, bias = self.cast_bias_weight(input)
            return torch.nn.functional.linear(input, weight, bias)

    class Conv2d(QLayer, comfy.ops.manual_cast.Conv2d):
        pass

    class GroupNorm(QLayer, comfy.ops.manual_cast.GroupNorm):
        pass

    class LayerNorm(QLayer, comfy.ops.manual_cast.LayerNorm):
        pass


class QModelPatcher(comfy.model_patcher.ModelPatcher):
    """GGUFModelPatcher's overrides: patches on quantized weights ride on the tensor; `clone`
    keeps the class even when called unbound on a plain ModelPatcher."""

    patch_on_device = False

    def patch_weight_to_device(self, key, device_to=None, inplace_update=False):
        if key not in self.patches:
            return
        weight = comfy.utils.get_attr(self.model, key)
        if is_quantized(weight):
            out_weight = weight.to(device_to)
            out_weight.patches = [(self.patches[key], key)]
        else:
            if key not in self.backup:
                self.backup[key] = collections.namedtuple("Dimension", ["weight", "inplace_update"])(
                    weight.to(device=self.offload_device, copy=True), False)
            out_weight = comfy.lora.calculate_weight(self.patches[key], weight.to(torch.float32, copy=True), key)
            out_weight = out_weight.to(weight.dtype)
        comfy.utils.set_attr_param(self.model, key, out_weight)

    def unpatch_model(self, device_to=None, unpatch_weights=True):
        if unpatch_weights:
            for p in self.model.parameters():
                if is_quantized(p) and getattr(p, "patches", []):
                    p.patches = []
        return super().unpatch_model(device_to=device_to, unpatch_weights=unpatch_weights)

    def clone(self, *args, **kwargs):
        src_cls = self.__class__
        self.__class__ = QModelPatcher
        n = super().clone(*args, **kwargs)
        n.__class__ = QModelPatcher
        self.__class__ = src_cls
        n.patch_on_device = getattr(self, "patch_on_device", False)
        return n


class QuantizedUnetLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ckpt_name": (folder_paths.get_filename_list("checkpoints"),)}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load_unet"
    CATEGORY = "tests/gguf_like"

    def load_unet(self, ckpt_name):
        sd = comfy.utils.load_torch_file(folder_paths.get_full_path("checkpoints", ckpt_name))
        model = comfy.sd.load_diffusion_model_state_dict(quantized_state_dict(sd),
                                                         model_options={"custom_operations": QOps})
        if model is None:
            raise RuntimeError(f"could not detect the model type of {ckpt_name}")
        return (QModelPatcher.clone(model),)


class QuantizedCLIPLoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"clip_name": (folder_paths.get_filename_list("text_encoders"),)}}

    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load_clip"
    CATEGORY = "tests/gguf_like"

    def load_clip(self, clip_name):
        sd = comfy.utils.load_torch_file(folder_paths.get_full_path("text_encoders", clip_name), safe_load=True)
        clip = comfy.sd.load_text_encoder_state_dicts(
            clip_type=comfy.sd.CLIPType.STABLE_DIFFUSION, state_dicts=[sd],
            model_options={"custom_operations": QOps,
                           "initial_device": comfy.model_management.text_encoder_offload_device()},
            embedding_directory=folder_paths.get_folder_paths("embeddings"))
        # as CLIPLoaderGGUF: the CLIP's patcher (a ModelPatcher in ComfyUI) re-classed as the pack's
        clip.patcher = QModelPatcher.clone(clip.patcher)
        return (clip,)


NODE_CLASS_MAPPINGS = {"QuantizedUnetLoader": QuantizedUnetLoader, "QuantizedCLIPLoader": QuantizedCLIPLoader}
