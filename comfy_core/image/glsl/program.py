"""GLSLShader's shader sources and programs (behaviour of today's ComfyUI's
comfy_extras/nodes_glsl.py; written here).

The editor's shaders are GLSL ES 3.00 (WebGL 2: `#version 300 es`, `precision highp float;`),
which ComfyUI compiles as they are on an OpenGL ES context (ANGLE), and before that turned into
desktop GLSL 3.30 by dropping the version and precision lines. Here they become desktop GLSL 3.30
core too (`desktop_source`), on a desktop context (EGL, OSMesa and GLFW all give one, at full
float precision), but with the user's line numbers kept (the dropped lines stay as blank lines and
a `#line` follows the new `#version`), so the compiler's messages point at the editor's lines.

What a shader asks for is read from its text, as ComfyUI does: `#pragma passes N` (N >= 1) runs
it N times, ping-ponging its first output into `u_image0`; the highest `fragColorK` it names
(K <= 3) sets how many render targets are read back (one when it names none: a plain
`out vec4 fragColor;` is location 0).
"""
from __future__ import annotations

import re
from typing import Any

MAX_IMAGES = 5  # u_image0..4 (texture units 0..4)
MAX_UNIFORMS = 20  # u_float0..19, u_int0..19
MAX_BOOLS = 10  # u_bool0..9
MAX_CURVES = 4  # u_curve0..3 (texture units 5..8)
MAX_OUTPUTS = 4  # fragColor0..3

DEFAULT_FRAGMENT_SHADER = """#version 300 es
precision highp float;

uniform sampler2D u_image0;
uniform vec2 u_resolution;

in vec2 v_texCoord;
layout(location = 0) out vec4 fragColor0;

void main() {
    fragColor0 = texture(u_image0, v_texCoord);
}
"""

# One triangle covering the viewport, its corners from gl_VertexID (no vertex buffer):
# (-1,-1), (3,-1), (-1,3); v_texCoord is 0..1 over the visible square, y = 0 at the bottom row.
VERTEX_SHADER = """#version 330 core
out vec2 v_texCoord;
void main() {
    vec2 corner = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
    v_texCoord = corner * 0.5 + 0.5;
    gl_Position = vec4(corner, 0.0, 1.0);
}
"""

_VERSION = re.compile(r"^[ \t]*#[ \t]*version[^\n]*", re.MULTILINE)
_PRECISION = re.compile(r"\bprecision\s+(?:lowp|mediump|highp)\s+\w+\s*;")
_PASSES = re.compile(r"#pragma\s+passes\s+(\d+)")
_OUTPUT = re.compile(r"fragColor(\d+)")


class ShaderCompileError(ValueError):
    """The driver rejected a shader: `stage` ("fragment", "vertex" or "link") and the
    compiler's or linker's `log`."""

    def __init__(self, stage: str, log: str) -> None:
        self.stage = stage
        self.log = log.strip()
        what = "shader program link" if stage == "link" else f"{stage} shader compilation"
        super().__init__(f"{what} failed:\n{self.log}")


def desktop_source(source: str) -> str:
    """GLSL ES 3.00 -> desktop GLSL 3.30 core, line numbers kept (module docstring)."""
    def blank(match: re.Match) -> str:
        return "\n" * match.group(0).count("\n")

    body = _PRECISION.sub(blank, _VERSION.sub("", source))
    return "#version 330 core\n#line 1\n" + body


def pass_count(source: str) -> int:
    """`#pragma passes N` (at least 1), 1 without it."""
    found = _PASSES.search(source)
    return max(1, int(found.group(1))) if found else 1


def output_count(source: str) -> int:
    """Render targets read back: highest `fragColorK` named + 1 (at most MAX_OUTPUTS), else 1."""
    indices = [int(k) for k in _OUTPUT.findall(source)]
    return min(max(indices) + 1, MAX_OUTPUTS) if indices else 1


def _log(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


def _compile(gl: Any, source: str, kind: Any, stage: str) -> int:
    shader = gl.glCreateShader(kind)
    gl.glShaderSource(shader, source)
    gl.glCompileShader(shader)
    if not gl.glGetShaderiv(shader, gl.GL_COMPILE_STATUS):
        log = _log(gl.glGetShaderInfoLog(shader))
        gl.glDeleteShader(shader)
        raise ShaderCompileError(stage, log)
    return shader


def build_program(gl: Any, fragment_source: str) -> int:
    """The linked program of `VERTEX_SHADER` and the user's fragment shader (ES source, made
    desktop here); `ShaderCompileError` with the driver's log when it does not compile or link."""
    vertex = _compile(gl, VERTEX_SHADER, gl.GL_VERTEX_SHADER, "vertex")
    try:
        fragment = _compile(gl, desktop_source(fragment_source), gl.GL_FRAGMENT_SHADER, "fragment")
    except ShaderCompileError:
        gl.glDeleteShader(vertex)
        raise
    program = gl.glCreateProgram()
    gl.glAttachShader(program, vertex)
    gl.glAttachShader(program, fragment)
    gl.glLinkProgram(program)
    gl.glDeleteShader(vertex)  # flagged: freed with the program
    gl.glDeleteShader(fragment)
    if not gl.glGetProgramiv(program, gl.GL_LINK_STATUS):
        log = _log(gl.glGetProgramInfoLog(program))
        gl.glDeleteProgram(program)
        raise ShaderCompileError("link", log)
    return program
