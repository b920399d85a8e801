"""A fixture pack doing weighted AND prompts the way smZNodes does (tests/compat/test_compat_smz_and.py).

smZNodes replaces `comfy.samplers.sampling_function`; when the positive conditioning holds more
than one entry carrying a `weight`, it calls `comfy.samplers.calc_cond_batch` itself with a
`model_function_wrapper` that, after each forward pass, walks up the stack to the frame holding a
list named `out_conds` (ComfyUI's `_calc_cond_batch`) and rewrites that frame's locals: it swaps
`out_conds` for its own list carrying every pass's output with the frame's `area` and `mult`
(and `out_conds`, `out_counts`), and sets `batch_chunks` to 0 so that the frame accumulates
nothing. `calc_cond_batch` then returns the swapped list, from which the pack does its own
accumulation: A1111's `uncond + sum_i w_i * (cfg / n) * (cond_i - uncond)`.

`EVENTS` records each rewritten frame's pass (its `cond_or_uncond` and areas)."""
import ctypes
import inspect
import sys

import comfy.samplers
import torch

EVENTS = []
_ORIGINAL = {}


class OutputsList(list):
    """The list the pack swaps in for the frame's `out_conds` (attributes set on it later)."""


def _write_back(frame):
    """Make a change of `frame.f_locals` reach the running frame (CPython before 3.13)."""
    locals_to_fast = getattr(ctypes.pythonapi, "PyFrame_LocalsToFast", None)
    if locals_to_fast is not None:
        locals_to_fast(ctypes.py_object(frame), ctypes.c_int(1))


def _set_local(frame, name, value):
    frame.f_locals[name] = value  # a write-through proxy from Python 3.13 on
    _write_back(frame)


def _record(frame, output):
    store = frame.f_locals["out_conds"]
    if not isinstance(store, OutputsList):
        store = OutputsList()
        store.outputs = []
        _set_local(frame, "out_conds", store)
    output.area = frame.f_locals["area"]
    output.mult = frame.f_locals["mult"]
    store.outputs.append(output)
    store.out_counts = frame.f_locals["out_counts"]
    _set_local(frame, "batch_chunks", 0)
    EVENTS.append((list(output.cond_or_uncond), list(output.area)))


def _wrapper(apply_model, args):
    cond_or_uncond = args["cond_or_uncond"]
    output = apply_model(args["input"], args["timestep"], **args["c"])
    output.cond_or_uncond = cond_or_uncond
    output.output_chunks = output.chunk(len(cond_or_uncond))
    output.chunk = lambda *a, **k: output  # the frame's `.chunk(batch_chunks)` gets the whole output
    frame = inspect.currentframe().f_back
    while frame is not None:
        if isinstance(frame.f_locals.get("out_conds"), list):
            _record(frame, output)
            break
        frame = frame.f_back
    del frame
    return output


def weighted_and(model, x, timestep, uncond, cond, cond_scale, model_options):
    """A1111's composable CFG over `cond`'s weighted entries, from the swapped `out_conds`."""
    model_options = dict(model_options)
    model_options["model_function_wrapper"] = _wrapper
    out = comfy.samplers.calc_cond_batch(model, [cond, uncond], x, timestep, model_options)
    out_counts = out.out_counts
    uncond_sum = torch.zeros_like(x)
    oconds = []
    for output in out.outputs:
        for o, cond_index in enumerate(output.cond_or_uncond):
            if output.area[o] is not None:
                raise NotImplementedError("areas: not used by this fixture")
            if cond_index == 0:
                oconds.append(output.output_chunks[o] * output.mult[o])
            else:
                uncond_sum += output.output_chunks[o] * output.mult[o]
                out_counts[cond_index] += output.mult[o]
    out_uncond = uncond_sum / out_counts[1]
    weights = [entry.get("weight") for entry in cond]
    weights.reverse()  # the batch holds the entries last to first, as ComfyUI's
    scale = cond_scale / max(len(oconds), 1)
    result = out_uncond.clone()
    for i, ocond in enumerate(oconds):
        result += (ocond - out_uncond) * (weights[i] * scale)
    return result


def sampling_function(model, x, timestep, uncond, cond, cond_scale, model_options={}, seed=None):
    weights = [entry.get("weight") for entry in cond]
    if len(weights) > 1 and any(w is not None for w in weights):
        return weighted_and(model, x, timestep, uncond, cond, cond_scale, model_options)
    return _ORIGINAL["sampling_function"](model, x, timestep, uncond, cond, cond_scale, model_options, seed)


def register():
    if "sampling_function" not in _ORIGINAL:
        _ORIGINAL["sampling_function"] = comfy.samplers.sampling_function
        comfy.samplers.sampling_function = sampling_function


def unregister():
    if "sampling_function" in _ORIGINAL:
        comfy.samplers.sampling_function = _ORIGINAL.pop("sampling_function")


NODE_CLASS_MAPPINGS = {}
