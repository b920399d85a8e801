"""TorchCompileModel, with ComfyUI 0.3.64's name, sockets and semantics
(comfy_extras/nodes_torch_compile.py): a clone of the MODEL whose UNet is compiled with
`torch.compile` when it is sampled (comfy_core/patching/torch_compile.py).

The compile itself happens at the first sampling step, in the sampler's node, and its time is
logged ("torch.compile: compiled diffusion_model in X s"); the compiled UNet is kept with the
clone, so sampling it again, or a LoRA clone of it, does not compile again (TorchDynamo compiles
again only for a new latent shape, batch or dtype). A backend that cannot work on the model's
device (`cudagraphs` off CUDA, `inductor` without a C++ compiler on the CPU or triton on a GPU)
fails here, in this node, with a `TorchCompileError` naming why; a compile that fails anyway
fails the sampler's node with the same error type.
"""
from __future__ import annotations

from typing import Any

from graph.native import Combo, Input, Output, node
import nodes.checks as checks

# torch and comfy_core are imported inside the function that runs: registering this node and
# rendering /object_info must not import torch (server start-up).

BACKENDS = ["inductor", "cudagraphs"]


@node("TorchCompileModel", display_name=None, category="_for_testing",
      python_module="comfy_extras.nodes_torch_compile", experimental=True,
      inputs=[Input("model", "MODEL"), Combo("backend", BACKENDS)], outputs=[Output("MODEL")])
def torch_compile_model(model: Any, backend: str) -> tuple[Any]:
    """A clone of `model` whose diffusion model is compiled with `backend` at its first call."""
    from comfy_core.patching.torch_compile import set_torch_compile_wrapper

    model = checks.model(model)
    backend = checks.choice(backend, BACKENDS, "backend")
    patched = model.clone()
    set_torch_compile_wrapper(patched, backend)
    return (patched,)
