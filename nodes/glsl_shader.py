"""GLSLShader ("GLSL Shader") of today's ComfyUI's comfy_extras/nodes_glsl.py, declared as
ComfyUI's V3 schema renders it (graph/v3_schema.py); behaviour read from that file, written here
(the rendering in comfy_core/image/glsl/).

A GLSL ES 3.00 fragment shader (the editor's text) runs over each item of the image batch on an
off-screen OpenGL context:

* inputs: `images` (u_image0..4, at least one), `floats` (u_float0..19), `ints` (u_int0..19),
  `bools` (u_bool0..9), `curves` (u_curve0..3, each a 256-sample lookup table of the curve, as
  ComfyUI's `CurveInput.to_lut()`), each group in the order the prompt gives it; `u_resolution`
  and `u_pass` always. `size_mode` "from_input" renders at the first image's size, "custom" at
  `width` x `height` (the inputs are sampled bilinearly to it).
* outputs: IMAGE0..3 from fragColor0..3 (a plain `fragColor` is IMAGE0), `[B, H, W, 4]` float32:
  RGBA, unclamped; the ones the shader does not write are black. The batch is the first image's;
  every other image must have at least as many items (item i of each is used together).
* the editor's preview (V3 `has_intermediate_output`): the inputs and IMAGE0 written to the temp
  folder as PNG, `ui = {"input_images": [...], "images": [...]}`, as ComfyUI does.

A shader the driver rejects is a `NodeInputError` on `fragment_shader` carrying the compiler's log
(its cause is comfy_core's `ShaderCompileError`); a machine where no OpenGL context can be made
raises `GLUnavailableError`, which names what to install. OpenGL, numpy and torch are imported
when the node runs, never at start-up.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from comfy_core.image.glsl.program import (DEFAULT_FRAGMENT_SHADER, MAX_BOOLS, MAX_CURVES, MAX_IMAGES, MAX_OUTPUTS,
                                           MAX_UNIFORMS)
from graph.native import MAX_RESOLUTION
from graph.v3_schema import (Autogrow, Boolean, ComboOption, DynamicCombo, Float, Int, Output, Socket, String,
                             Widget, v3_node)
from nodes.errors import NodeInputError, describe
from nodes.histogram import DEFAULT_CURVE, Curve

MODULE = "comfy_extras.nodes_glsl"
LUT_SIZE = 256  # ComfyUI's CurveInput.to_lut() default

SIZE_MODE = DynamicCombo("size_mode", tooltip=(
    "Output size: 'from_input' uses first input image dimensions, 'custom' allows manual size"), options=(
    ComboOption("from_input", ()),
    ComboOption("custom", (Int("width", default=512, min=1, max=MAX_RESOLUTION),
                           Int("height", default=512, min=1, max=MAX_RESOLUTION))),
))


def _output(index: int) -> Any:
    return Output("IMAGE", f"IMAGE{index}",
                  tooltip=f"Available via layout(location = {index}) out vec4 fragColor{index} in the shader code")


@v3_node("GLSLShader", display_name="GLSL Shader", category="image/shader", python_module=MODULE,
         description="Apply GLSL ES fragment shaders to images. u_resolution (vec2) is always available.",
         experimental=True, has_intermediate_output=True,
         inputs=[String("fragment_shader", default=DEFAULT_FRAGMENT_SHADER, multiline=True,
                        tooltip="GLSL fragment shader source code (GLSL ES 3.00 / WebGL 2.0 compatible)"),
                 SIZE_MODE,
                 Autogrow("images", Socket("image", "IMAGE"), prefix="image", min=1, max=MAX_IMAGES,
                          tooltip=f"Images are available as u_image0-{MAX_IMAGES - 1} (sampler2D) in the shader code"),
                 Autogrow("floats", Float("float", default=0.0), prefix="u_float", min=0, max=MAX_UNIFORMS,
                          tooltip=f"Floats are available as u_float0-{MAX_UNIFORMS - 1} in the shader code"),
                 Autogrow("ints", Int("int", default=0), prefix="u_int", min=0, max=MAX_UNIFORMS,
                          tooltip=f"Ints are available as u_int0-{MAX_UNIFORMS - 1} in the shader code"),
                 Autogrow("bools", Boolean("bool", default=False), prefix="u_bool", min=0, max=MAX_BOOLS,
                          tooltip=f"Booleans are available as u_bool0-{MAX_BOOLS - 1} (bool) in the shader code"),
                 Autogrow("curves", Widget("curve", "CURVE", default=DEFAULT_CURVE), prefix="u_curve", min=0,
                          max=MAX_CURVES,
                          tooltip=f"Curves are available as u_curve0-{MAX_CURVES - 1} (sampler2D, 1D LUT) in the "
                                  "shader code. Sample with texture(u_curve0, vec2(x, 0.5)).r")],
         outputs=[_output(i) for i in range(MAX_OUTPUTS)])
def glsl_shader(fragment_shader: str, size_mode: dict, images: dict, floats: dict | None = None,
                ints: dict | None = None, bools: dict | None = None, curves: dict | None = None) -> dict:
    """IMAGE0..3 of the shader run over the batch, and the editor's preview (module docstring)."""
    import numpy as np
    import torch

    from comfy_core.image.glsl.program import ShaderCompileError
    from comfy_core.image.glsl.render import render_batches

    if not isinstance(fragment_shader, str):
        raise NodeInputError("fragment_shader", "GLSL source text", describe(fragment_shader))
    image_list = []
    for name, image in (images or {}).items():
        if image is None:
            continue
        if not isinstance(image, torch.Tensor) or image.ndim != 4 or image.shape[-1] not in (3, 4) or 0 in image.shape:
            raise NodeInputError(f"images.{name}", "an IMAGE [B, H, W, C] with C = 3 or 4", describe(image))
        image_list.append((name, image))
    if not image_list:
        raise NodeInputError("images", "at least one IMAGE (images.image0)", "none")
    first = image_list[0][1]
    batch = int(first.shape[0])
    for name, image in image_list[1:]:
        if image.shape[0] < batch:
            raise NodeInputError(f"images.{name}", f"a batch of at least {batch} (the first image's)",
                                 f"{int(image.shape[0])} images")
    width, height = _output_size(size_mode, first)
    float_list = [0.0 if v is None else _number(v, f"floats.{k}") for k, v in (floats or {}).items()]
    int_list = [0 if v is None else _integer(v, f"ints.{k}") for k, v in (ints or {}).items()]
    bool_list = [bool(v) for v in (bools or {}).values()]
    luts = [_curve_lut(v, f"curves.{k}") for k, v in (curves or {}).items() if v is not None]

    items = [[image[i].detach().to("cpu", torch.float32).numpy() for _, image in image_list] for i in range(batch)]
    try:
        rendered = render_batches(fragment_shader, width, height, items, float_list, int_list, bool_list, luts)
    except ShaderCompileError as exc:
        raise NodeInputError("fragment_shader", "a GLSL ES 3.00 fragment shader that compiles",
                             f"one the OpenGL driver rejects: {exc}") from exc
    outputs = tuple(torch.from_numpy(np.stack([item[k] for item in rendered])) for k in range(MAX_OUTPUTS))
    return {"result": outputs, "ui": _preview([image for _, image in image_list], outputs[0])}


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NodeInputError(name, "a FLOAT", describe(value))
    return float(value)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeInputError(name, "an INT", describe(value))
    return int(value)


def _output_size(size_mode: Any, first: Any) -> tuple[int, int]:
    """(width, height): the first image's, or size_mode's custom width and height."""
    mode = size_mode.get("size_mode") if isinstance(size_mode, dict) else None
    if mode == "from_input":
        return int(first.shape[2]), int(first.shape[1])
    if mode != "custom":
        raise NodeInputError("size_mode", "'from_input' or 'custom'", repr(mode))
    sides = []
    for side in ("width", "height"):
        value = size_mode.get(side, 512)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESOLUTION:
            raise NodeInputError(f"size_mode.{side}", f"an INT in 1..{MAX_RESOLUTION}", repr(value))
        sides.append(value)
    return sides[0], sides[1]


def _curve_lut(value: Any, name: str) -> Any:
    """A CURVE value (a pack's object with `to_lut()`, ours, or the editor's dict) as its lookup
    table: the curve at LUT_SIZE evenly spaced x in 0..1."""
    import numpy as np

    if hasattr(value, "to_lut") and not isinstance(value, Curve):
        return np.asarray(value.to_lut(), dtype=np.float32)
    try:
        curve = Curve.from_raw(value)
    except NodeInputError as exc:
        raise NodeInputError(name, exc.expected, exc.received) from None
    return np.array([curve.evaluate(float(x)) for x in np.linspace(0.0, 1.0, LUT_SIZE)], dtype=np.float32)


def _preview(inputs: list, output: Any) -> dict:
    """ComfyUI's UI record: every input batch and IMAGE0 as PNG files in the temp folder."""
    from comfy_core.image.png import PREVIEW_COMPRESS_LEVEL, save_images
    from nodes.environment import current_env

    temp = Path(current_env().temp_dir)

    def save(images: Any, prefix: str) -> list[dict]:
        return save_images(images, temp, prefix, folder_type="temp", compress_level=PREVIEW_COMPRESS_LEVEL,
                           metadata=False)

    shown_inputs = [record for image in inputs for record in save(image, "GLSLShader_input")]
    return {"input_images": shown_inputs, "images": save(output, "GLSLShader_output")}
