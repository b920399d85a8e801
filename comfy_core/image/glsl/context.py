"""The one off-screen OpenGL 3.3 core context of the process (GLSLShader's, as the singleton
`GLContext` of ComfyUI's comfy_extras/nodes_glsl.py; written here).

Created on the first `current_context()`, from the first backend that works, in this order:

1. EGL (libEGL through ctypes): a GPU's EGL device (EGL_EXT_platform_device, e.g. NVIDIA's
   driver with no display), then Mesa's surfaceless platform (a GPU through its DRI render node,
   else llvmpipe on the CPU), then EGL's default display (X11 / Wayland when one is set). No
   window or pbuffer: the renders go to frame buffer objects (EGL_KHR_surfaceless_context; a
   1x1 pbuffer where that extension is missing).
2. OSMesa (libOSMesa), Mesa's software renderer, where it is installed.
3. GLFW (the `glfw` package) with a hidden window, only when a display exists.

PyOpenGL picks its platform (which library its GL functions come from) once per process, from
PYOPENGL_PLATFORM, when `OpenGL.platform` is first imported. That import happens here, after the
backend is known ("egl", "osmesa", or PyOpenGL's own guess for GLFW), with the variable set only
around the import and restored at once: the process environment is left as it was. A pack that
imported OpenGL earlier has fixed the platform already; it is kept (glvnd's libOpenGL dispatches
to whichever context is current).

The context is made current on the calling thread for one run and released afterwards, under a
lock, so the executor's threads take turns. A failure to create it is kept: later runs raise the
same `GLUnavailableError` at once instead of probing the drivers again.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "GLSLShader needs an OpenGL 3.3 driver reachable without a display. On Debian / Ubuntu: "
    "`apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0` (EGL; Mesa's llvmpipe runs it on "
    "the CPU, a GPU's driver on the GPU) or `apt-get install libosmesa6` (OSMesa), and the Python package "
    "PyOpenGL (`pip install PyOpenGL`, in requirements.txt).")


class GLUnavailableError(RuntimeError):
    """No OpenGL backend could give a 3.3 core context: each backend tried and why it failed,
    and what to install."""

    def __init__(self, attempts: list[tuple[str, str]]) -> None:
        self.attempts = list(attempts)
        tried = "; ".join(f"{name}: {why}" for name, why in attempts) or "no backend was tried"
        super().__init__(f"no OpenGL context could be created ({tried}). {INSTALL_HINT}")


@dataclass
class GLContext:
    """A live context: `gl` is PyOpenGL's `OpenGL.GL` module, bound to it while current."""

    backend: str
    gl: Any
    renderer: str
    version: str
    _make_current: Callable[[], None] = field(repr=False)
    _release: Callable[[], None] = field(repr=False)
    _vao: int = field(default=0, repr=False)

    def make_current(self) -> None:
        self._make_current()
        if self._vao:
            self.gl.glBindVertexArray(self._vao)  # core profile: drawing needs a vertex array bound

    def release(self) -> None:
        self._release()


# -- PyOpenGL, imported once the platform is known -------------------------------------------------

def _import_gl(platform: str | None) -> Any:
    """`OpenGL.GL`, with PyOpenGL's platform `platform` if it is not chosen yet (None: its own
    guess). PYOPENGL_PLATFORM is set only around the import (module docstring)."""
    if "OpenGL.platform" not in sys.modules and platform is not None:
        previous = os.environ.get("PYOPENGL_PLATFORM")
        os.environ["PYOPENGL_PLATFORM"] = platform
        try:
            import OpenGL.platform  # noqa: F401  (reads the variable once, here)
        finally:
            if previous is None:
                os.environ.pop("PYOPENGL_PLATFORM", None)
            else:
                os.environ["PYOPENGL_PLATFORM"] = previous
    from OpenGL import GL

    return GL


def _pyopengl_platform() -> str | None:
    """The platform PyOpenGL already runs on ("egl", "osmesa", "glx", ...), or None when it is
    not imported yet."""
    module = sys.modules.get("OpenGL.platform")
    if module is None:
        return None
    name = type(getattr(module, "PLATFORM", None)).__name__.lower()
    for key in ("egl", "osmesa", "glx", "wgl", "darwin", "wayland"):
        if key in name:
            return key
    return name


def _gl_string(gl: Any, name: Any) -> str:
    value = gl.glGetString(name)
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "unknown")


# -- EGL through ctypes ---------------------------------------------------------------------------

EGL_NONE = 0x3038
EGL_EXTENSIONS = 0x3055
EGL_SURFACE_TYPE = 0x3033
EGL_PBUFFER_BIT = 0x0001
EGL_RENDERABLE_TYPE = 0x3040
EGL_OPENGL_BIT = 0x0008
EGL_OPENGL_API = 0x30A2
EGL_WIDTH = 0x3057
EGL_HEIGHT = 0x3056
EGL_CONTEXT_MAJOR_VERSION = 0x3098
EGL_CONTEXT_MINOR_VERSION = 0x30FB
EGL_CONTEXT_OPENGL_PROFILE_MASK = 0x30FD
EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT = 0x0001
EGL_PLATFORM_DEVICE_EXT = 0x313F
EGL_PLATFORM_SURFACELESS_MESA = 0x31DD


def _attribs(*values: int) -> Any:
    return (ctypes.c_int32 * (len(values) + 1))(*values, EGL_NONE)


class _EGL:
    """The few libEGL entry points the context needs, typed for ctypes."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("EGL") or "libEGL.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            raise RuntimeError(f"libEGL not found ({exc})") from None
        vp, i32, u32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32
        signatures = {
            "eglGetProcAddress": (vp, [ctypes.c_char_p]), "eglGetError": (i32, []),
            "eglQueryString": (ctypes.c_char_p, [vp, i32]), "eglGetDisplay": (vp, [vp]),
            "eglInitialize": (u32, [vp, ctypes.POINTER(i32), ctypes.POINTER(i32)]),
            "eglTerminate": (u32, [vp]), "eglBindAPI": (u32, [u32]),
            "eglChooseConfig": (u32, [vp, ctypes.POINTER(i32), ctypes.POINTER(vp), i32, ctypes.POINTER(i32)]),
            "eglCreateContext": (vp, [vp, vp, vp, ctypes.POINTER(i32)]),
            "eglDestroyContext": (u32, [vp, vp]),
            "eglCreatePbufferSurface": (vp, [vp, vp, ctypes.POINTER(i32)]),
            "eglMakeCurrent": (u32, [vp, vp, vp, vp]),
        }
        for fn_name, (restype, argtypes) in signatures.items():
            fn = getattr(lib, fn_name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, fn_name, fn)

    def extension(self, name: str, restype: Any, argtypes: list) -> Any:
        """An EGL extension function, or None where the library lacks it."""
        address = self.eglGetProcAddress(name.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None

    def error(self, what: str) -> str:
        return f"{what} failed (EGL error 0x{self.eglGetError() & 0xFFFF:04X})"


def _egl_displays(egl: _EGL) -> Iterator[tuple[str, Any]]:
    """(label, EGLDisplay) candidates: GPU devices, Mesa's surfaceless platform, the default."""
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    client = (egl.eglQueryString(None, EGL_EXTENSIONS) or b"").decode()
    platform_display = egl.extension("eglGetPlatformDisplayEXT", vp, [ctypes.c_uint32, vp, ctypes.POINTER(i32)])
    if platform_display is not None and "EGL_EXT_platform_device" in client:
        query_devices = egl.extension("eglQueryDevicesEXT", ctypes.c_uint32,
                                      [i32, ctypes.POINTER(vp), ctypes.POINTER(i32)])
        query_string = egl.extension("eglQueryDeviceStringEXT", ctypes.c_char_p, [vp, i32])
        devices, count = (vp * 16)(), i32(0)
        if query_devices is not None and query_devices(16, devices, ctypes.byref(count)):
            for index in range(count.value):
                extensions = (query_string(devices[index], EGL_EXTENSIONS) or b"").decode() if query_string else ""
                if "EGL_MESA_device_software" in extensions:
                    continue  # the CPU renderer: Mesa's surfaceless platform below reaches it
                yield f"EGL device {index}", platform_display(EGL_PLATFORM_DEVICE_EXT, devices[index], None)
    if platform_display is not None and "EGL_MESA_platform_surfaceless" in client:
        yield "EGL surfaceless (Mesa)", platform_display(EGL_PLATFORM_SURFACELESS_MESA, None, None)
    yield "EGL default display", egl.eglGetDisplay(None)


def _egl_context_on(egl: _EGL, display: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """A 3.3 core context on an initialised `display`: (make_current, release)."""
    if not egl.eglBindAPI(EGL_OPENGL_API):
        raise RuntimeError(egl.error("eglBindAPI(OpenGL)"))
    config, found = ctypes.c_void_p(), ctypes.c_int32(0)
    for surface_bits in (EGL_PBUFFER_BIT, 0):  # 0: any config (a surfaceless-only driver)
        if egl.eglChooseConfig(display, _attribs(EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_SURFACE_TYPE, surface_bits),
                               ctypes.byref(config), 1, ctypes.byref(found)) and found.value:
            break
    else:
        raise RuntimeError("eglChooseConfig found no OpenGL config")
    context = egl.eglCreateContext(display, config, None, _attribs(
        EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 3,
        EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT))
    if not context:
        raise RuntimeError(egl.error("eglCreateContext(OpenGL 3.3 core)"))
    surface = None
    if "EGL_KHR_surfaceless_context" not in (egl.eglQueryString(display, EGL_EXTENSIONS) or b"").decode():
        surface = egl.eglCreatePbufferSurface(display, config, _attribs(EGL_WIDTH, 1, EGL_HEIGHT, 1))
        if not surface:
            egl.eglDestroyContext(display, context)
            raise RuntimeError(egl.error("eglCreatePbufferSurface"))

    def make_current() -> None:
        if not egl.eglMakeCurrent(display, surface, surface, context):
            raise RuntimeError(egl.error("eglMakeCurrent"))

    def release() -> None:
        egl.eglMakeCurrent(display, None, None, None)

    make_current()
    return make_current, release


def _create_egl() -> tuple[str, Callable[[], None], Callable[[], None]]:
    egl = _EGL()
    failures = []
    for label, display in _egl_displays(egl):
        if not display:
            failures.append(f"{label}: no display")
            continue
        major, minor = ctypes.c_int32(0), ctypes.c_int32(0)
        if not egl.eglInitialize(display, ctypes.byref(major), ctypes.byref(minor)):
            failures.append(f"{label}: {egl.error('eglInitialize')}")
            continue
        try:
            make_current, release = _egl_context_on(egl, display)
        except RuntimeError as exc:
            egl.eglTerminate(display)
            failures.append(f"{label}: {exc}")
            continue
        return f"{label}, EGL {major.value}.{minor.value}", make_current, release
    raise RuntimeError(", ".join(failures) or "no EGL display")


def _egl_backend() -> GLContext:
    platform = _pyopengl_platform()
    if platform not in (None, "egl"):
        raise RuntimeError(f"PyOpenGL already runs on its {platform!r} platform")
    label, make_current, release = _create_egl()
    return _finish(label, _import_gl("egl"), make_current, release)


# -- OSMesa and GLFW (through PyOpenGL) -------------------------------------------------------------

def _osmesa_backend() -> GLContext:
    platform = _pyopengl_platform()
    if platform not in (None, "osmesa"):
        raise RuntimeError(f"PyOpenGL already runs on its {platform!r} platform")
    if platform is None and not ctypes.util.find_library("OSMesa"):
        raise RuntimeError("libOSMesa not found")
    gl = _import_gl("osmesa")
    from OpenGL import osmesa

    context = osmesa.OSMesaCreateContextAttribs([
        osmesa.OSMESA_FORMAT, osmesa.OSMESA_RGBA, osmesa.OSMESA_PROFILE, osmesa.OSMESA_CORE_PROFILE,
        osmesa.OSMESA_CONTEXT_MAJOR_VERSION, 3, osmesa.OSMESA_CONTEXT_MINOR_VERSION, 3, 0], None)
    if not context:
        raise RuntimeError("OSMesaCreateContextAttribs(OpenGL 3.3 core) failed")
    buffer = (ctypes.c_ubyte * 4)()  # a 1x1 default frame buffer: the renders go to FBOs

    def make_current() -> None:
        if not osmesa.OSMesaMakeCurrent(context, buffer, gl.GL_UNSIGNED_BYTE, 1, 1):
            raise RuntimeError("OSMesaMakeCurrent failed")

    make_current()
    return _finish("OSMesa", gl, make_current, lambda: None)


def _glfw_backend() -> GLContext:
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and sys.platform.startswith("linux"):
        raise RuntimeError("no display (DISPLAY / WAYLAND_DISPLAY unset)")
    try:
        import glfw
    except ImportError:
        raise RuntimeError("the glfw package is not installed") from None
    if not glfw.init():
        raise RuntimeError("glfw.init() failed")
    for hint, value in ((glfw.VISIBLE, glfw.FALSE), (glfw.CONTEXT_VERSION_MAJOR, 3), (glfw.CONTEXT_VERSION_MINOR, 3),
                        (glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE), (glfw.OPENGL_FORWARD_COMPAT, True)):
        glfw.window_hint(hint, value)
    window = glfw.create_window(16, 16, "GLSLShader", None, None)
    if not window:
        glfw.terminate()
        raise RuntimeError("glfw.create_window() failed")

    def make_current() -> None:
        glfw.make_context_current(window)

    make_current()
    return _finish("GLFW", _import_gl(None), make_current, lambda: glfw.make_context_current(None))


def _finish(label: str, gl: Any, make_current: Callable[[], None], release: Callable[[], None]) -> GLContext:
    """The context current: a vertex array for the full-screen triangle, the driver's names."""
    vao = int(gl.glGenVertexArrays(1))
    context = GLContext(label, gl, _gl_string(gl, gl.GL_RENDERER), _gl_string(gl, gl.GL_VERSION),
                        make_current, release, vao)
    gl.glBindVertexArray(vao)
    release()
    return context


BACKENDS: tuple[tuple[str, Callable[[], GLContext]], ...] = (
    ("EGL", _egl_backend), ("OSMesa", _osmesa_backend), ("GLFW", _glfw_backend))


# -- the process's context ------------------------------------------------------------------------

_lock = threading.Lock()
_state: dict[str, Any] = {"context": None, "failure": None}


def create_context(backends: tuple[tuple[str, Callable[[], GLContext]], ...] = BACKENDS) -> GLContext:
    """A new context from the first of `backends` that works (released, not current), or
    `GLUnavailableError` naming each backend's failure."""
    attempts: list[tuple[str, str]] = []
    for name, backend in backends:
        try:
            context = backend()
        except Exception as exc:  # a driver's failure of any kind: try the next backend
            attempts.append((name, f"{type(exc).__name__}: {exc}" if not isinstance(exc, RuntimeError) else str(exc)))
            continue
        logger.info("GLSL: OpenGL context from %s: %s, %s", context.backend, context.renderer, context.version)
        return context
    raise GLUnavailableError(attempts)


@contextmanager
def current_context() -> Iterator[GLContext]:
    """The process's context, current on this thread for the `with` block (created on first use;
    other threads wait their turn)."""
    with _lock:
        if _state["context"] is None:
            if _state["failure"] is not None:
                raise _state["failure"]
            try:
                _state["context"] = create_context()
            except GLUnavailableError as exc:
                _state["failure"] = exc
                raise
        context: GLContext = _state["context"]
        context.make_current()
        try:
            yield context
        finally:
            context.release()
