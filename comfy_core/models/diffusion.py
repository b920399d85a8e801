"""`DiffusionModel`: the UNet wrapped as a k-diffusion-style denoiser, what MODEL's patcher holds.

Behaviour follows ComfyUI's `comfy/model_base.py: BaseModel.apply_model` (the denoiser wrapper of
Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based Generative Models", via
k-diffusion's `external.py`): scale the noisy input with `model_sampling.calculate_input`, map
sigma to the discrete timestep the network was trained on, run the UNet in its weight dtype, and
turn its eps/v output back into a denoised estimate with `model_sampling.calculate_denoised`.

What the network gets besides the latent and the text context is the family's
`ModelConditions` (comfy_core/models/model_conditions.py): SDXL's and unCLIP's label embedding
(`encode_adm`), SD3's pooled text, Flux's guidance and reference latents (`extra_inputs`). Those
extra inputs reach the network as keyword arguments, as ComfyUI's `_apply_model` passes them.

Inpainting and instruct-pix2pix UNets take extra input channels (`c_concat`), built by
`concat_cond` from the conditioning and the run's latent and denoise mask as ComfyUI's
`concat_cond` (comfy_core/models/concat_inputs.py); the family says which (`Family.concat`).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from comfy_core import extension_points, wrappers
from comfy_core.models import conv_prepack
from comfy_core.models.latent_formats import LatentFormat
# re-exported: their home was this module
from comfy_core.models.model_conditions import (UNCLIP_MERGE_DEFAULT, UNCLIP_SEED_OFFSET,  # noqa: F401
                                                ConditioningError, ModelConditions, SdxlConditions,
                                                SdxlRefinerConditions, UnclipConditions, size_embedding)
from comfy_core.models.model_sampling import model_type_of

ADM_NONE = "none"
ADM_SDXL = "sdxl"
ADM_SDXL_REFINER = "sdxl_refiner"
ADM_UNCLIP = "unclip"
# The conditioning objects behind the ADM names a caller may still pass (`adm="sdxl"`).
_CONDITIONS_BY_NAME = {ADM_NONE: ModelConditions, ADM_SDXL: SdxlConditions, ADM_SDXL_REFINER: SdxlRefinerConditions,
                       ADM_UNCLIP: UnclipConditions}


def _conditions_of(adm: Any) -> ModelConditions:
    if isinstance(adm, ModelConditions):
        return adm
    if adm is None:
        return ModelConditions()
    try:
        return _CONDITIONS_BY_NAME[adm]()
    except (KeyError, TypeError):
        raise ValueError(f"DiffusionModel: unknown ADM kind {adm!r}") from None


# The positional arguments DIFFUSION_MODEL wrappers receive: ComfyUI's network `_forward` order,
# which differs per network (the UNet's is this; Flux puts guidance and reference latents before
# `control`, Wan its CLIP-vision features, Anima none of `transformer_options`, which then comes as
# a keyword). A network class states its own as `wrapper_arguments`; names are the model inputs'
# (an input the call lacks is None there). Packs' wrappers index these, as on ComfyUI.
UNET_WRAPPER_ARGUMENTS = ("x", "timesteps", "context", "y", "control", "transformer_options")
_CALL_INPUTS = frozenset(UNET_WRAPPER_ARGUMENTS)


def wrapper_arguments(network: Any) -> tuple[str, ...]:
    """The positional layout of `network`'s DIFFUSION_MODEL wrapper calls (see above)."""
    return getattr(network, "wrapper_arguments", UNET_WRAPPER_ARGUMENTS)


def _cast_extra(value: Any, dtype: torch.dtype) -> Any:
    """An extra model input in the network's dtype (floating tensors, also inside lists), as
    ComfyUI's `_apply_model` casts them; integer tensors and other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, list):
        return [_cast_extra(v, dtype) for v in value]
    return value


def model_class_for(family_name: str | None) -> type | None:
    """The class a model of `family_name` is made an instance of in this context: what the
    `model_class` resolver of the extension points in force answers (None: `DiffusionModel`)."""
    resolver = extension_points.current().model_class
    if resolver is None or family_name is None:
        return None
    return resolver(family_name)


class DiffusionModel(nn.Module):
    """`.diffusion_model` (the UNet or DiT), `.model_sampling`, `.family`, `.latent_format`,
    `.conditions` (the family's `ModelConditions`; `.adm` its name)."""

    def __init__(self, unet: nn.Module, model_sampling: Any, latent_format: LatentFormat,
                 family: Any = None, adm: "str | ModelConditions | None" = None) -> None:
        super().__init__()
        self.diffusion_model = unet
        self.model_sampling = model_sampling
        self.latent_format = latent_format
        self.family = family
        if adm is None:
            adm = getattr(family, "conditioning", None)
        # Not a submodule: a plain policy object (see model_conditions).
        self.__dict__["conditions"] = _conditions_of(adm)
        # ComfyUI's `BaseModel.manual_cast_dtype`: the dtype the UNet computes in when its weights
        # are stored in another one (fp8 storage, comfy_core/models/storage_cast.py); None: the
        # weights' own dtype.
        self.manual_cast_dtype: torch.dtype | None = None
        # CPU forwards reorder large convolution weights once (comfy_core/models/conv_prepack.py);
        # False runs every convolution through plain F.conv2d. Not a submodule: a cache of copies.
        self.cpu_conv_prepack = True
        self.__dict__["_conv_prepack_cache"] = conv_prepack.PrepackCache()
        # A host may have models be instances of its own subclass per family (ComfyUI's
        # comfy.model_base classes): the `model_class` resolver of the extension points in force
        # when the model is built; the subclass adds no state.
        registered = model_class_for(getattr(family, "name", None))
        if registered is not None and type(self) is DiffusionModel:
            if not issubclass(registered, DiffusionModel):
                raise TypeError(f"family class for {family.name!r}: {registered!r} is not a DiffusionModel subclass")
            self.__class__ = registered

    # --- ComfyUI's BaseModel surface, for samplers and node packs ---

    @property
    def model_type(self) -> Any:
        """ComfyUI's `ModelType` of the loaded parametrisation (EPS, V_PREDICTION, ...)."""
        return model_type_of(self.model_sampling)

    @property
    def model_config(self) -> Any:
        """ComfyUI's config object for this family (comfy_core/models/model_config.py)."""
        from comfy_core.models.model_config import config_for

        return config_for(self)

    @property
    def memory_usage_factor(self) -> float:
        return self.__dict__.get("_memory_usage_factor") or self.model_config.memory_usage_factor

    @memory_usage_factor.setter
    def memory_usage_factor(self, value: float) -> None:
        self.__dict__["_memory_usage_factor"] = value

    def memory_required(self, input_shape: Any, cond_shapes: Any = None) -> float:
        """Bytes a forward pass on `input_shape` is estimated to need: ComfyUI's attention-backend
        estimate, `batch * spatial area * dtype size * 0.01 * memory_usage_factor` MiB."""
        dtype = self.manual_cast_dtype or self.get_dtype()
        area = input_shape[0] * math.prod(input_shape[2:])
        return area * torch.empty((), dtype=dtype).element_size() * 0.01 * self.memory_usage_factor * (1024 * 1024)

    @property
    def adm(self) -> str:
        """The name of the model conditioning ("none", "sdxl", "sdxl_refiner", "unclip", "pooled", "flux")."""
        return self.conditions.name

    def _reference_weight(self) -> torch.Tensor:
        # The output layer's weight (a UNet's `out[2]`), else the network's last parameter: a
        # pack's layer may hold its first weights packed, the output projection is the one
        # ComfyUI's dtype logic and ours read.
        out = getattr(self.diffusion_model, "out", None)
        if isinstance(out, nn.Sequential) and len(out) > 2 and getattr(out[2], "weight", None) is not None:
            return out[2].weight
        *_, last = self.diffusion_model.parameters()
        return last

    def get_dtype(self) -> torch.dtype:
        return self._reference_weight().dtype

    @property
    def device(self) -> torch.device:
        """Where the network's weights are now (ComfyUI's `BaseModel.device`, which samplers in
        packs read to place their tensors: RES4LYF's)."""
        return self._reference_weight().device

    @property
    def adm_channels(self) -> int:
        config = getattr(self.diffusion_model, "config", None)
        return getattr(config, "adm_in_channels", None) or 0

    def _context_width(self) -> int | None:
        config = getattr(self.diffusion_model, "config", None)
        architecture = getattr(self.family, "architecture", None)
        if architecture is not None and config is not None:
            return architecture.context_width(config)
        return getattr(config, "context_dim", None)

    def process_latent_in(self, latent: torch.Tensor) -> torch.Tensor:
        return self.latent_format.process_in(latent)

    def process_latent_out(self, latent: torch.Tensor) -> torch.Tensor:
        return self.latent_format.process_out(latent)

    def apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_crossattn: torch.Tensor | None = None,
                    y: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                    *, c_concat: torch.Tensor | None = None, control: Any = None, **kwargs: Any) -> torch.Tensor:
        """x [B, C, h, w] noisy latent (model space), sigma [B], c_crossattn [B, M, ctx], y [B, adm]
        -> denoised [B, C, h, w] float32. `control`: ControlNet residuals for the UNet (the dict
        a ControlNet's `get_control` returns).

        Runs through the APPLY_MODEL wrappers of `transformer_options` (comfy_core/patching/
        wrappers.py), which get ComfyUI's arguments `(x, t, c_concat, c_crossattn, control,
        transformer_options, **kwargs)` with `y` among the kwargs, and `executor.class_obj` = self."""
        to = transformer_options if transformer_options is not None else {}
        if y is not None:
            kwargs["y"] = y
        return wrappers.run_wrapped(wrappers.WrappersMP.APPLY_MODEL, to, self._apply_model, x, sigma, c_concat,
                                    c_crossattn, control, to, class_obj=self, is_model_options=False, **kwargs)

    def _apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_concat: torch.Tensor | None = None,
                     c_crossattn: torch.Tensor | None = None, control: Any = None,
                     transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """The unwrapped model call, in ComfyUI's argument order (see `apply_model`)."""
        y = kwargs.pop("y", None)
        if c_crossattn is None:
            raise ConditioningError("DiffusionModel.apply_model: c_crossattn (the text conditioning) is required")
        ctx_dim = self._context_width()
        if ctx_dim is not None and c_crossattn.shape[-1] != ctx_dim:
            raise ConditioningError(
                f"DiffusionModel.apply_model: conditioning is {c_crossattn.shape[-1]} wide, this "
                f"{getattr(self.family, 'name', 'model')} network expects {ctx_dim} (wrong CLIP for this model?)")
        dtype = self.manual_cast_dtype or self.get_dtype()
        xc = self.model_sampling.calculate_input(sigma, x)  # [B, C, h, w]
        if c_concat is not None:
            xc = torch.cat([xc, c_concat], dim=1)
        t = self.model_sampling.timestep(sigma).float()  # [B] integer-valued (discrete), sigma-scaled (flow)
        to = transformer_options if transformer_options is not None else {}
        # Further model inputs (Flux's guidance, reference latents, ...) go to the network as
        # keyword arguments in its dtype, as ComfyUI's `_apply_model` passes its extra conds.
        extra = {k: _cast_extra(v, dtype) for k, v in kwargs.items()}
        # DIFFUSION_MODEL wrappers get the network's inputs in ComfyUI's order for it
        # (`wrapper_arguments`) and `executor.class_obj` = the network.
        layout = wrapper_arguments(self.diffusion_model)
        inputs = {"x": xc.to(dtype), "timesteps": t, "context": c_crossattn.to(dtype),
                  "y": None if y is None else y.to(dtype), "control": control,
                  "transformer_options": transformer_options, **extra}
        positional = [inputs.pop(name, None) for name in layout]
        if inputs.get("y", 0) is None:  # as ComfyUI: `y` only when the model has one (its extra conds)
            del inputs["y"]
        out = wrappers.run_wrapped(
            wrappers.WrappersMP.DIFFUSION_MODEL, to, self._run_network, *positional, class_obj=self.diffusion_model,
            is_model_options=False, **inputs).float()
        return self.model_sampling.calculate_denoised(sigma, out, x)

    def _run_network(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The network call behind the DIFFUSION_MODEL wrappers: their positional arguments named
        back by the network's layout; an input of the layout that is None and was not one of the
        call's own (x, timesteps, context, y, control, transformer_options) is left out, as absent."""
        named = dict(zip(wrapper_arguments(self.diffusion_model), args))
        named.update(kwargs)
        extra = {k: v for k, v in named.items() if k not in _CALL_INPUTS and (v is not None or k in kwargs)}
        return self._run_unet(named["x"], named["timesteps"], named["context"], named.get("y"), named.get("control"),
                              named.get("transformer_options"), **extra)

    def _run_unet(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None,
                  control: Any, transformer_options: dict[str, Any] | None, **kwargs: Any) -> torch.Tensor:
        # `y` by keyword, as ComfyUI's `_apply_model` passes every input: Chroma's network takes
        # `guidance` fourth (comfy/ldm/chroma/model.py) and ignores `y` among its **kwargs.
        if not self._prepacks_convolutions(x):
            return self.diffusion_model(x, timesteps, context, y=y, transformer_options=transformer_options,
                                        control=control, **kwargs)
        with conv_prepack.PrepackedConvMode(self._conv_prepack_cache):
            return self.diffusion_model(x, timesteps, context, y=y, transformer_options=transformer_options,
                                        control=control, **kwargs)

    def forget_derived_weights(self) -> None:
        """Drop the packed convolution weights (the patcher calls this when it changes weights)."""
        self._conv_prepack_cache.clear()

    def _prepacks_convolutions(self, x: torch.Tensor) -> bool:
        """A CPU float32 forward of an uncompiled network, with packing on and available."""
        network = self.diffusion_model
        return (self.cpu_conv_prepack and x.device.type == "cpu" and x.dtype == torch.float32
                and isinstance(network, nn.Module) and not hasattr(network, "_orig_mod")  # torch.compile's wrapper
                and not torch.compiler.is_compiling() and conv_prepack.available())

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.apply_model(*args, **kwargs)

    def scale_latent_inpaint(self, sigma: torch.Tensor, noise: torch.Tensor, latent_image: torch.Tensor,
                             **kwargs: Any) -> torch.Tensor:
        """What the region a denoise mask keeps is set to at `sigma` (ComfyUI's
        `BaseModel.scale_latent_inpaint`): the latent re-noised to sigma, unless the family's
        conditions keep it clean (Wan 2.2 TI2V, `ModelConditions.scale_latent_inpaint`)."""
        own = getattr(self.conditions, "scale_latent_inpaint", None)
        if own is not None:
            return own(self, sigma=sigma, noise=noise, latent_image=latent_image)
        s = sigma.reshape([sigma.shape[0]] + [1] * (noise.ndim - 1)) if sigma.ndim == 1 else sigma
        return self.model_sampling.noise_scaling(s, noise, latent_image)

    def encode_adm(self, **kwargs: Any) -> torch.Tensor | None:
        """The network's `y` input from a conditioning entry's options (None for models without
        one): the family's `ModelConditions.encode_adm` (SDXL's size embedding, unCLIP's image
        embedding, SD3's and Flux's pooled text)."""
        return self.conditions.encode_adm(self, **kwargs)

    def extra_inputs(self, **kwargs: Any) -> dict[str, Any]:
        """Further network inputs from a conditioning entry's options (Flux's `guidance`,
        `ref_latents`, ...): the family's `ModelConditions.extra_conds` (ComfyUI's
        `BaseModel.extra_conds` less the inputs every model has: c_crossattn, y, c_concat)."""
        return self.conditions.extra_conds(self, **kwargs)

    def _device(self) -> torch.device:
        return self._reference_weight().device

    def concat_cond(self, **kwargs: Any) -> torch.Tensor | None:
        """The UNet's extra input channels `[B, k, h, w]` for this family (None for plain models).

        Reads `noise`, `device`, `latent_image`, `denoise_mask`, `concat_latent_image`,
        `concat_mask` (the conditioning entry's options and the run's tensors, as ComfyUI's
        `extra_conds` receives them)."""
        from comfy_core.models import concat_inputs

        kind = getattr(self.family, "concat", "none")
        if kind == "none":
            return self.conditions.concat_cond(self, **kwargs)
        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        if kind == "ip2p":
            out = concat_inputs.ip2p_concat(noise, device, kwargs.get("concat_latent_image"))
        else:
            out = concat_inputs.inpaint_concat(
                noise, device, latent_image=kwargs.get("latent_image"), denoise_mask=kwargs.get("denoise_mask"),
                concat_latent_image=kwargs.get("concat_latent_image"), concat_mask=kwargs.get("concat_mask"),
                process_latent_in=self.process_latent_in)
        expected = self.diffusion_model.config.in_channels - noise.shape[1]
        if out.shape[1] != expected:
            raise ConditioningError(
                f"{getattr(self.family, 'name', 'model')}: the concatenated inputs have {out.shape[1]} channels, "
                f"the UNet takes {expected} besides the latent")
        return out
