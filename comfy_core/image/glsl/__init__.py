"""GLSL fragment shaders run over IMAGE batches on an off-screen OpenGL context: the runtime of
the GLSLShader node (behaviour of today's ComfyUI's comfy_extras/nodes_glsl.py, read there and
written here).

* `context`: the one OpenGL context of the process, created on first use from the first backend
  that works (EGL on a GPU device, Mesa's surfaceless EGL (a GPU through its render node, or
  llvmpipe on the CPU), EGL's default display, OSMesa, GLFW where a display exists), made current
  per run under a lock; `GLUnavailableError` names what to install when none works.
* `program`: the shader sources (GLSL ES 3.00 as the editor writes them, made desktop GLSL 3.30
  with the user's line numbers kept), what they ask for (`#pragma passes N`, fragColor0..3), the
  compile and link with `ShaderCompileError` carrying the compiler's log.
* `render`: uniforms, textures, multi-pass ping-pong, multiple render targets, read-back.

PyOpenGL (and numpy) are imported only inside the functions that use them: importing this
package or its modules costs nothing, so `/object_info` and start-up never load OpenGL.
"""
