"""`torch.compile` for a MODEL, as an APPLY_MODEL wrapper on its patcher.

The behaviour is ComfyUI's (comfy_api/torch_helpers/torch_compile.py, the `TorchCompileModel`
node of comfy_extras/nodes_torch_compile.py): the modules named by `keys` (default the UNet,
`"diffusion_model"`) are taken from the patcher when the wrapper is set, and for every model
call the compiled versions are swapped into the model object and the originals put back after
it, so the base module is never left changed. The compile options are kept in
`model_options["torch_compile_kwargs"]`.

What is ours:

- **Lazy.** `torch.compile` (and the import of `torch._dynamo`) happens at the first model call,
  not when the node runs; the compiled modules are then kept by the wrapper, so every clone
  below it (a LoRA applied after TorchCompileModel, another sampler) shares them. Weight patches
  (LoRA) take effect through the compiled module: our patcher swaps the tensors on the base
  module while it runs, and TorchDynamo reads a module's parameters as graph inputs, so the same
  compiled code runs with the patched weights (ComfyUI behaves the same; what TorchDynamo
  re-checks, and recompiles on, is shapes, dtypes and devices, not tensor identity).
- **Compile time reported.** A call during which TorchDynamo compiled something logs one line,
  "torch.compile: compiled diffusion_model in X s" (the time spent compiling, counted from
  TorchDynamo's compile start/end callbacks; a recompile for a new shape logs again).
- **Typed errors.** A backend that cannot work here (unknown, `cudagraphs` off CUDA, `inductor`
  with no C++ compiler on the CPU or no triton on CUDA) is refused when the wrapper is set
  (`check_backend`), and a compile that fails anyway (TorchDynamo or the backend raising) is
  re-raised as `TorchCompileError` from the sampling node, with the patcher's state restored
  as after any error. ComfyUI raises the backend's own error from deep inside the sampler.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Hashable

from comfy_core.patching.signature import identity_token
from comfy_core.wrappers import WrappersMP

log = logging.getLogger(__name__)

COMPILE_KEY = "torch.compile"  # the wrapper key (ComfyUI's), so a second compile replaces the first
TORCH_COMPILE_KWARGS = "torch_compile_kwargs"  # the model_options entry (ComfyUI's)
DEFAULT_KEYS = ("diffusion_model",)


class TorchCompileError(RuntimeError):
    """`torch.compile` cannot be used, or failed: names the backend, the compiled module(s) and why."""

    def __init__(self, backend: str | Callable, keys: Collection[str], reason: str) -> None:
        backend = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
        self.backend = backend
        self.keys = tuple(keys)
        self.reason = reason
        super().__init__(f"torch.compile (backend {backend!r}) of {', '.join(self.keys)}: {reason}")


# --- which backends can work here (a pure decision, testable without the device) ---

def compile_problem(backend: str, device_type: str, known_backends: Collection[str], *,
                    has_cxx_compiler: bool, has_triton: bool) -> str | None:
    """Why `backend` cannot compile a model running on `device_type` ("cpu", "cuda", "mps", ...),
    or None when it can. `known_backends`: what `torch._dynamo.list_backends()` names (plus the
    debug backends); the two flags say whether inductor's code generators can run (a C++
    compiler for CPU kernels, triton for GPU kernels). A callable backend (a pack's own) is
    not judged here."""
    if not isinstance(backend, str):
        return None
    if backend not in known_backends:
        return f"unknown backend (this torch has: {', '.join(sorted(known_backends))})"
    if backend == "cudagraphs" and device_type != "cuda":
        return f"the cudagraphs backend records CUDA graphs and needs a CUDA device; the model runs on {device_type}"
    if backend == "inductor":
        if device_type == "cpu" and not has_cxx_compiler:
            return ("inductor compiles CPU kernels with a C++ compiler and none was found "
                    "(install g++ or clang++, or name one in the CXX environment variable)")
        if device_type in ("cuda", "xpu") and not has_triton:
            return f"inductor generates {device_type} kernels with triton, which is not installed (pip install triton)"
    return None


def known_backends() -> set[str]:
    """The backend names `torch.compile` accepts here, the debug ones (eager, aot_eager) included."""
    import torch._dynamo

    return set(torch._dynamo.list_backends(exclude_tags=()))


def has_cxx_compiler() -> bool:
    """Whether inductor finds a C++ compiler (its own search: `CXX`, then its candidates)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        compiler = get_cpp_compiler()
    except Exception:  # inductor raises its InvalidCxxCompiler (or fails to import) when none works
        return False
    return bool(compiler) and shutil.which(compiler) is not None


def has_triton() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def check_backend(backend: str | Callable, device: Any, keys: Collection[str] = DEFAULT_KEYS) -> None:
    """Raise `TorchCompileError` when `backend` cannot compile a model on `device`."""
    if not isinstance(backend, str):
        return
    device_type = getattr(device, "type", None) or str(device).split(":")[0]
    problem = compile_problem(backend, device_type, known_backends(),
                              has_cxx_compiler=(backend != "inductor" or device_type != "cpu" or has_cxx_compiler()),
                              has_triton=(backend != "inductor" or device_type == "cpu" or has_triton()))
    if problem is not None:
        raise TorchCompileError(backend, keys, problem)


# --- compile-time accounting ---

class CompileClock:
    """Seconds TorchDynamo spends compiling while this context is open (its compile start/end
    callbacks; nested starts count once, as TorchDynamo reports them)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.compiles = 0
        self._started: float | None = None

    def _start(self, _args: Any) -> None:
        self._started = time.perf_counter()

    def _end(self, _args: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self.compiles += 1
            self._started = None

    def __enter__(self) -> "CompileClock":
        import torch._dynamo

        handler = torch._dynamo.callback_handler
        handler.register_start_callback(self._start)
        handler.register_end_callback(self._end)
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch._dynamo

        handler = torch._dynamo.callback_handler
        for remove, fn in ((handler.remove_start_callback, self._start), (handler.remove_end_callback, self._end)):
            try:
                remove(fn)
            except ValueError:  # torch._dynamo.reset() inside the call cleared every callback
                pass


def _is_compile_failure(exc: BaseException) -> bool:
    """TorchDynamo's and the backends' own errors (inductor's InductorError is one of them)."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(exc, TorchDynamoException)


def _reason(exc: BaseException) -> str:
    """One line for the user: the backend's own error when TorchDynamo wrapped one (its message
    adds only how to get more logs), else TorchDynamo's first line."""
    inner = getattr(exc, "inner_exception", None)
    shown = inner if isinstance(inner, BaseException) else exc
    lines = [line.strip() for line in str(shown).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return f"{type(shown).__name__}: {text}"[:500] if text else type(shown).__name__


# --- the wrapper ---

def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _set(obj: Any, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


@dataclass(frozen=True)
class CompileSettings:
    """`torch.compile`'s arguments (ComfyUI keeps the same dict in model_options)."""

    backend: str | Callable
    options: dict | None = None
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None

    def kwargs(self) -> dict[str, Any]:
        return {"backend": self.backend, "options": self.options, "mode": self.mode,
                "fullgraph": self.fullgraph, "dynamic": self.dynamic}


class TorchCompileWrapper:
    """The APPLY_MODEL wrapper: `modules` (key -> the module taken from the patcher when the wrapper
    was set) compiled at the first call, swapped in for each call and put back after it."""

    def __init__(self, modules: dict[str, Any], settings: CompileSettings) -> None:
        self.modules = dict(modules)
        self.settings = settings
        self._compiled: dict[str, Callable] | None = None
        self._lock = threading.Lock()

    @property
    def is_compiled(self) -> bool:
        """Whether `torch.compile` has been called (the first model call does it)."""
        return self._compiled is not None

    def compiled(self) -> dict[str, Callable]:
        with self._lock:
            if self._compiled is None:
                import torch

                self._compiled = {key: torch.compile(module, **self.settings.kwargs())
                                  for key, module in self.modules.items()}
            return self._compiled

    def cache_signature(self) -> Hashable | None:
        """Equal for the same modules compiled the same way (so re-running TorchCompileModel on an
        unchanged MODEL leaves the downstream cache valid)."""
        tokens = tuple((key, identity_token(module)) for key, module in sorted(self.modules.items()))
        if any(token is None for _, token in tokens):
            return None
        settings = self.settings
        if not isinstance(settings.backend, str):
            return None  # a callable backend has no lasting identity
        options = tuple(sorted((str(k), repr(v)) for k, v in (settings.options or {}).items()))
        return ("torch.compile", tokens, settings.backend, options, settings.mode, settings.fullgraph,
                settings.dynamic)

    def __call__(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        compiled = self.compiled()
        names = ", ".join(compiled)
        originals: dict[str, Any] = {}
        clock = CompileClock()
        try:
            for key, module in compiled.items():
                originals[key] = _get(executor.class_obj, key)
                _set(executor.class_obj, key, module)
            with clock:
                return executor(*args, **kwargs)
        except Exception as exc:
            if _is_compile_failure(exc):
                raise TorchCompileError(self.settings.backend, compiled, f"compiling failed: {_reason(exc)}") from exc
            raise
        finally:
            for key, original in originals.items():
                _set(executor.class_obj, key, original)
            if clock.compiles:
                log.info("torch.compile: compiled %s in %.1f s", names, clock.seconds)


def set_torch_compile_wrapper(model: Any, backend: str | Callable, options: dict | None = None, mode: str | None = None,
                              fullgraph: bool = False, dynamic: bool | None = None,
                              keys: Collection[str] | None = None, *, check: bool = True) -> TorchCompileWrapper:
    """Compile `keys` (default the UNet) of `model` (a MODEL patcher, changed in place: callers
    clone first) at its first call. `check`: refuse a backend that cannot work on the model's
    load device now (`TorchCompileError`) rather than at the first sampling step."""
    keys = list(keys or DEFAULT_KEYS)
    if check:
        check_backend(backend, getattr(model, "load_device", "cpu"), keys)
    model.remove_wrappers_with_key(WrappersMP.APPLY_MODEL, COMPILE_KEY)  # one compile wrapper at a time
    settings = CompileSettings(backend, options, mode, fullgraph, dynamic)
    wrapper = TorchCompileWrapper({key: model.get_model_object(key) for key in keys}, settings)
    model.add_wrapper_with_key(WrappersMP.APPLY_MODEL, COMPILE_KEY, wrapper)
    model.model_options[TORCH_COMPILE_KWARGS] = settings.kwargs()
    return wrapper
