"""A fixture V1 pack that uses ComfyUI's model-code API the way IPAdapter_plus, FreeU-style
nodes and KJNodes do: an attn2 replacement calling `optimized_attention`, an output-block patch,
and a module-wide replacement of `comfy.ldm.modules.attention.optimized_attention`."""
import comfy.ldm.modules.attention
import comfy.ops
from comfy.ldm.modules.attention import optimized_attention
from comfy.ldm.modules.diffusionmodules import openaimodel


class LdmAttn2Scale:
    """IPAdapter-style: every attn2 of the input blocks replaced by `scale * attention(q, k, v)`."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "scale": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests/ldm"

    def patch(self, model, scale):
        def attn2(q, k, v, extra_options):
            return optimized_attention(q, k, v, extra_options["n_heads"]) * scale

        patched = model.clone()
        unet = patched.model.diffusion_model
        for index, block in enumerate(unet.input_blocks):
            for layer in block:
                if isinstance(layer, comfy.ldm.modules.attention.SpatialTransformer):
                    for b, _ in enumerate(layer.transformer_blocks):
                        patched.set_model_attn2_replace(attn2, "input", index, b)
        return (patched,)


class LdmOutputBlockScale:
    """FreeU-style: the backbone features of every output block scaled by `b`."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "b": ("FLOAT", {"default": 1.0})}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "tests/ldm"

    def patch(self, model, b):
        def output_block_patch(h, hsp, transformer_options):
            return h * b, hsp

        patched = model.clone()
        patched.set_model_output_block_patch(output_block_patch)
        return (patched,)


class CountingAttention:
    """A module-wide replacement of `optimized_attention` that calls the one it replaced."""

    def __init__(self, previous):
        self.previous = previous
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.previous(*args, **kwargs)


def install_counting_attention():
    """Replace `comfy.ldm.modules.attention.optimized_attention` as KJNodes-style packs do;
    returns the replacement (its `previous` restores)."""
    counting = CountingAttention(comfy.ldm.modules.attention.optimized_attention)
    comfy.ldm.modules.attention.optimized_attention = counting
    return counting


def manual_cast_linear(in_features, out_features, dtype):
    """A `comfy.ops.manual_cast.Linear` as packs build their own layers."""
    return comfy.ops.manual_cast.Linear(in_features, out_features, dtype=dtype)


NODE_CLASS_MAPPINGS = {
    "LdmAttn2Scale": LdmAttn2Scale,
    "LdmOutputBlockScale": LdmOutputBlockScale,
}
