"""Running a fragment shader over images (behaviour of `_render_shader_batch` in today's ComfyUI's
comfy_extras/nodes_glsl.py; written here).

For each item of a batch the shader draws one full-screen triangle into `width` x `height`
float32 render targets (RGBA32F: values are neither clamped nor quantised, and no sRGB / linear
conversion happens anywhere: the shader sees the IMAGE's numbers and its outputs are read back as
written). What the shader sees:

* `u_image0..4` (texture units 0..4): the images, RGBA32F, bilinear, clamped to the edge; an RGB
  image gets alpha 1. Uploaded bottom row first, as OpenGL counts rows, and read back flipped, so
  `v_texCoord` (0..1) has y = 1 at the image's top row and the output is upright; likewise
  `gl_FragCoord.y` counts from the bottom row.
* `u_resolution` (vec2): the output's width and height; `u_pass` (int): the pass index.
* `u_float0..`, `u_int0..`, `u_bool0..` in the order given; `u_curve0..3` (units 5..8): each
  curve's lookup table as an R32F texture `len(lut)` x 1, bilinear, clamped.

`#pragma passes N`: passes 0..N-2 draw `fragColor0` into one of two ping-pong textures, and
pass p > 0 reads the previous pass's result as `u_image0` (the other images stay bound); the last
pass draws every render target. Targets the shader does not name come back black (zeros).
Every GL object made for the run is deleted afterwards, also when it fails.
"""
from __future__ import annotations

from typing import Any, Sequence

from comfy_core.image.glsl.program import MAX_IMAGES, MAX_OUTPUTS, build_program, output_count, pass_count


def _texture(gl: Any, width: int, height: int, internal: Any, fmt: Any, data: Any = None) -> int:
    """A float texture, bilinear and clamped to the edge, bound to the active unit."""
    texture = int(gl.glGenTextures(1))
    gl.glBindTexture(gl.GL_TEXTURE_2D, texture)
    for name, value in ((gl.GL_TEXTURE_MIN_FILTER, gl.GL_LINEAR), (gl.GL_TEXTURE_MAG_FILTER, gl.GL_LINEAR),
                        (gl.GL_TEXTURE_WRAP_S, gl.GL_CLAMP_TO_EDGE), (gl.GL_TEXTURE_WRAP_T, gl.GL_CLAMP_TO_EDGE)):
        gl.glTexParameteri(gl.GL_TEXTURE_2D, name, value)
    gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, internal, width, height, 0, fmt, gl.GL_FLOAT, data)
    return texture


def _framebuffer(gl: Any, textures: Sequence[int]) -> int:
    framebuffer = int(gl.glGenFramebuffers(1))
    gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, framebuffer)
    for index, texture in enumerate(textures):
        gl.glFramebufferTexture2D(gl.GL_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0 + index, gl.GL_TEXTURE_2D, texture, 0)
    gl.glDrawBuffers(len(textures), [gl.GL_COLOR_ATTACHMENT0 + i for i in range(len(textures))])
    if gl.glCheckFramebufferStatus(gl.GL_FRAMEBUFFER) != gl.GL_FRAMEBUFFER_COMPLETE:
        raise RuntimeError("the float32 frame buffer is not complete on this driver")
    return framebuffer


def _upload_rgba(image: Any) -> Any:
    """`[H, W, 3|4]` float32 -> contiguous RGBA, bottom row first."""
    import numpy as np

    flipped = image[::-1]
    if flipped.shape[2] == 4:
        return np.ascontiguousarray(flipped, dtype=np.float32)
    rgba = np.ones((*flipped.shape[:2], 4), dtype=np.float32)
    rgba[..., :3] = flipped
    return rgba


def _set_uniform(gl: Any, program: int, name: str, setter: str, *values: Any) -> None:
    location = gl.glGetUniformLocation(program, name)
    if location >= 0:  # the shader may not declare (or may optimise away) any of them
        getattr(gl, setter)(location, *values)


def render_batches(fragment_source: str, width: int, height: int, batches: Sequence[Sequence[Any]],
                   floats: Sequence[float] = (), ints: Sequence[int] = (), bools: Sequence[bool] = (),
                   curves: Sequence[Any] = ()) -> list[list[Any]]:
    """For each batch item (its images, `[H, W, 3|4]` float32 arrays, at most MAX_IMAGES), the
    MAX_OUTPUTS outputs `[height, width, 4]` float32 (module docstring). The program is built
    once for the whole batch; `ShaderCompileError` when the driver rejects it."""
    import numpy as np

    from comfy_core.image.glsl.context import current_context

    if not batches:
        return []
    outputs, passes = output_count(fragment_source), pass_count(fragment_source)
    with current_context() as context:
        gl = context.gl
        textures: list[int] = []
        framebuffers: list[int] = []
        program = 0
        try:
            program = build_program(gl, fragment_source)
            gl.glUseProgram(program)
            targets = [_texture(gl, width, height, gl.GL_RGBA32F, gl.GL_RGBA) for _ in range(outputs)]
            textures += targets
            main = _framebuffer(gl, targets)
            framebuffers.append(main)
            ping_pong: list[tuple[int, int]] = []  # (texture, framebuffer)
            if passes > 1:
                for _ in range(2):
                    texture = _texture(gl, width, height, gl.GL_RGBA32F, gl.GL_RGBA)
                    textures.append(texture)
                    framebuffers.append(_framebuffer(gl, [texture]))
                    ping_pong.append((texture, framebuffers[-1]))
            inputs = []
            for unit in range(len(batches[0])):
                gl.glActiveTexture(gl.GL_TEXTURE0 + unit)
                inputs.append(_texture(gl, 1, 1, gl.GL_RGBA32F, gl.GL_RGBA))
                _set_uniform(gl, program, f"u_image{unit}", "glUniform1i", unit)
            textures += inputs
            for index, lut in enumerate(curves):
                gl.glActiveTexture(gl.GL_TEXTURE0 + MAX_IMAGES + index)
                lut = np.ascontiguousarray(lut, dtype=np.float32).reshape(-1)
                textures.append(_texture(gl, len(lut), 1, gl.GL_R32F, gl.GL_RED, lut))
                _set_uniform(gl, program, f"u_curve{index}", "glUniform1i", MAX_IMAGES + index)
            _set_uniform(gl, program, "u_resolution", "glUniform2f", float(width), float(height))
            for index, value in enumerate(floats):
                _set_uniform(gl, program, f"u_float{index}", "glUniform1f", float(value))
            for index, value in enumerate(ints):
                _set_uniform(gl, program, f"u_int{index}", "glUniform1i", int(value))
            for index, value in enumerate(bools):
                _set_uniform(gl, program, f"u_bool{index}", "glUniform1i", 1 if value else 0)
            pass_location = gl.glGetUniformLocation(program, "u_pass")
            gl.glViewport(0, 0, width, height)
            gl.glDisable(gl.GL_BLEND)  # the outputs are the shader's values, alpha included

            results = []
            for images in batches:
                for unit, image in enumerate(images):
                    gl.glActiveTexture(gl.GL_TEXTURE0 + unit)
                    gl.glBindTexture(gl.GL_TEXTURE_2D, inputs[unit])
                    rgba = _upload_rgba(image)
                    gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_RGBA32F, rgba.shape[1], rgba.shape[0], 0,
                                    gl.GL_RGBA, gl.GL_FLOAT, rgba)
                for index in range(passes):
                    last = index == passes - 1
                    gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, main if last else ping_pong[index % 2][1])
                    if passes > 1:  # u_image0: the input, then the previous pass's result
                        gl.glActiveTexture(gl.GL_TEXTURE0)
                        gl.glBindTexture(gl.GL_TEXTURE_2D, inputs[0] if index == 0 else ping_pong[(index - 1) % 2][0])
                    if pass_location >= 0:
                        gl.glUniform1i(pass_location, index)
                    gl.glClearColor(0.0, 0.0, 0.0, 0.0)
                    gl.glClear(gl.GL_COLOR_BUFFER_BIT)
                    gl.glDrawArrays(gl.GL_TRIANGLES, 0, 3)
                gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, main)
                item = []
                for index in range(outputs):
                    gl.glReadBuffer(gl.GL_COLOR_ATTACHMENT0 + index)
                    pixels = np.empty((height, width, 4), dtype=np.float32)  # bottom row first
                    gl.glReadPixels(0, 0, width, height, gl.GL_RGBA, gl.GL_FLOAT, pixels)
                    item.append(np.ascontiguousarray(pixels[::-1]))
                item += [np.zeros((height, width, 4), dtype=np.float32) for _ in range(outputs, MAX_OUTPUTS)]
                results.append(item)
            return results
        finally:
            gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, 0)
            gl.glUseProgram(0)
            if framebuffers:
                gl.glDeleteFramebuffers(len(framebuffers), framebuffers)
            if textures:
                gl.glDeleteTextures(len(textures), textures)
            if program:
                gl.glDeleteProgram(program)
