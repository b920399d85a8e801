"""Best time and peak memory of a repeated call: the measuring loop the memory benchmarks share.

Peak memory is the device allocator's high-water mark on CUDA, and the growth of the process's
peak RSS on the CPU (`ru_maxrss`), both counted from just before the first timed call, so run
each case in a fresh process (the benchmarks do) and warm up before calling this.
"""
from __future__ import annotations

import resource
import time
from typing import Any, Callable


def time_and_peak(run: Callable[[], Any], device: Any, repeat: int) -> dict:
    """`{"seconds": best of repeat, "peak_bytes": growth, "device": str}` for `run()` on `device`."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        del out
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"seconds": min(times), "peak_bytes": max(0, peak), "device": str(device)}
