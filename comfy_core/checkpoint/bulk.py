"""Bringing many tensors of a checkpoint into memory at once: zero-copy where possible, in parallel.

A load is a set of requests `{tensor name: wanted dtype}`. Each tensor is served one of two ways:

- **zero-copy**: when the wanted dtype is the stored one (fp16 weights kept as fp16), the tensor is
  a view of the file's private copy-on-write memory map (`CheckpointFile.stored_view`). No second
  copy of the weights exists and no fresh anonymous memory is faulted in; writes (e.g. a patcher
  applying a LoRA in place) copy the touched pages and never reach the file. Its pages are read
  in ("touched") before the load returns, so a loaded model is resident like a copied one and
  the first sampling step does not stall on disk reads.
- **copy**: otherwise (a dtype cast such as fp16 -> fp32, `zero_copy=False`, or a tensor whose
  offset in the file is not aligned to its element size) a new tensor is allocated and filled
  from the mapping in one pass (the cast happens during the copy: no staging buffer), after which
  the source pages are unmapped from this process (`MADV_DONTNEED`; they stay in the page cache),
  so peak memory stays near one copy of the weights rather than file + copy.

The work is cut into jobs of at most `chunk_bytes` of file data (merged byte ranges to touch;
packed chunks of tensors to copy), in file order, and run on a small thread pool (`BulkRead`):
page faults on the mapping (disk reads), page faults on the fresh destination and the casts all
release the GIL, several reads in flight keep a virtual or network disk busier than one
sequential reader (what `safetensors.torch.load_file` + access does), and the caller builds its
modules on the meta device while the bytes arrive.
"""
from __future__ import annotations

import bisect
import functools
import mmap
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import torch

if TYPE_CHECKING:
    from comfy_core.checkpoint.reader import CheckpointFile

DEFAULT_WORKERS = 4
DEFAULT_CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class Chunk:
    """Elements `[start, stop)` of the flattened tensor `name`, which live at file bytes
    `[file_start, file_stop)`."""

    name: str
    start: int
    stop: int
    file_start: int
    file_stop: int


def plan_chunks(extents: Mapping[str, tuple[int, int, int]], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[Chunk]:
    """Cut tensors into chunks of at most `chunk_bytes` (whole elements), sorted by file position.

    `extents` maps a name to `(file_start, file_stop, itemsize)`. Pure: no I/O.
    """
    if chunk_bytes < 1:
        raise ValueError(f"plan_chunks: chunk_bytes must be >= 1, got {chunk_bytes}")
    chunks: list[Chunk] = []
    for name, (file_start, file_stop, itemsize) in extents.items():
        numel = (file_stop - file_start) // itemsize
        step = max(1, chunk_bytes // itemsize)
        for start in range(0, numel, step):
            stop = min(numel, start + step)
            chunks.append(Chunk(name, start, stop, file_start + start * itemsize, file_start + stop * itemsize))
    chunks.sort(key=lambda c: c.file_start)
    return chunks


def plan_touches(ranges: list[tuple[int, int]], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[tuple[int, int]]:
    """Merge overlapping or adjacent byte ranges, then cut them into pieces of at most `chunk_bytes`.

    Reading a zero-copy tensor in needs no per-tensor work, so a thousand small biases become a
    few range touches instead of a thousand calls. Pure: no I/O.
    """
    if chunk_bytes < 1:
        raise ValueError(f"plan_touches: chunk_bytes must be >= 1, got {chunk_bytes}")
    merged: list[list[int]] = []
    for start, stop in sorted(r for r in ranges if r[1] > r[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    pieces = []
    for start, stop in merged:
        pieces += [(a, min(stop, a + chunk_bytes)) for a in range(start, stop, chunk_bytes)]
    return pieces


def pack(chunks: list[Chunk], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[list[Chunk]]:
    """Group consecutive chunks into jobs of at most `chunk_bytes` (a chunk never exceeds it), so
    small tensors cost one task each batch rather than one each. Pure."""
    jobs: list[list[Chunk]] = []
    size = 0
    for chunk in chunks:
        nbytes = chunk.file_stop - chunk.file_start
        if not jobs or size + nbytes > chunk_bytes:
            jobs.append([])
            size = 0
        jobs[-1].append(chunk)
        size += nbytes
    return jobs


class BulkRead:
    """Reading a set of tensors `{name: dtype}` of a checkpoint, started at construction on a
    thread pool so that the caller can build modules meanwhile; `result()` waits for it.

    See the module docstring for when a tensor is a view of the file and when it is a copy.
    `workers=1` reads on the calling thread inside `result()`. Use as a context manager: leaving
    it (e.g. on an error while building) cancels the reads not started yet and waits for the
    others, so no thread outlives the load.
    """

    def __init__(self, checkpoint: "CheckpointFile", requests: Mapping[str, torch.dtype], *, zero_copy: bool = True,
                 workers: int = DEFAULT_WORKERS, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if workers < 1:
            raise ValueError(f"BulkRead: workers must be >= 1, got {workers}")
        self.requests = dict(requests)
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future[None]] = []
        self._pending: list[Callable[[], None]] = []
        self._done = False
        self._jobs_of: dict[str, list[int]] = {}  # name -> indexes of the jobs that fill it
        if checkpoint.format != "safetensors":
            self._tensors = _from_pickled(checkpoint, requests, zero_copy)
            return
        self._tensors = {}
        sources: dict[str, torch.Tensor] = {}  # name -> flat view of the mapping, for copies
        targets: dict[str, torch.Tensor] = {}  # name -> flat destination to fill from sources[name]
        extents: dict[str, tuple[int, int, int]] = {}
        touches: list[tuple[int, int]] = []
        zero_copied: dict[str, tuple[int, int]] = {}  # name -> its byte range, for views of the map
        for name, dtype in requests.items():
            source = checkpoint.stored_view(name)
            info = checkpoint.tensors[name]
            if source is None:  # misaligned in the file: one (small, rare) copy through read()
                self._tensors[name] = checkpoint.read(name, dtype)
                continue
            start = checkpoint.data_start + info.begin
            if zero_copy and source.dtype == dtype:
                self._tensors[name] = source
                touches.append((start, start + info.nbytes))
                zero_copied[name] = touches[-1]
                continue
            self._tensors[name] = torch.empty(info.shape, dtype=dtype)  # [*shape]; faulted in by the workers
            sources[name] = source.reshape(-1)
            targets[name] = self._tensors[name].reshape(-1)
            extents[name] = (start, start + info.nbytes, source.element_size())
        file_bytes = checkpoint.file_bytes()
        release = checkpoint.release_pages

        def touch(start: int, stop: int) -> None:
            _touch(file_bytes[start:stop])

        def copy(job: list[Chunk]) -> None:
            for chunk in job:
                targets[chunk.name][chunk.start:chunk.stop].copy_(sources[chunk.name][chunk.start:chunk.stop])
                release(chunk.file_start, chunk.file_stop)  # the copy no longer needs its source pages

        # (file start, file stop, names served, job): a touch serves the zero-copy tensors inside
        # its byte range, a copy job the tensors it has chunks of.
        work = [(a, b, (), functools.partial(touch, a, b)) for a, b in plan_touches(touches, chunk_bytes)]
        work += [(job[0].file_start, job[-1].file_stop, {c.name for c in job}, functools.partial(copy, job))
                 for job in pack(plan_chunks(extents, chunk_bytes), chunk_bytes)]
        work.sort(key=lambda w: w[0])  # file order: the disk sees a mostly sequential stream
        self._jobs_of = _jobs_serving(work, zero_copied)
        if workers == 1 or len(work) < 2:
            self._pending = [fn for *_, fn in work]
            return
        self._pool = ThreadPoolExecutor(max_workers=min(workers, len(work)), thread_name_prefix="checkpoint-read")
        self._futures = [self._pool.submit(fn) for *_, fn in work]

    def tensor(self, name: str) -> torch.Tensor:
        """One requested tensor, waiting only for the jobs that fill it (not the whole read), so
        a caller can build a text encoder from its tensors while the UNet's are still cast."""
        if self._done or not self._futures:
            return self.result()[name]
        if name not in self.requests:
            raise KeyError(name)
        for index in self._jobs_of.get(name, ()):
            self._futures[index].result()
        return self._tensors[name]

    def result(self) -> dict[str, torch.Tensor]:
        """Wait for every read; `{name: tensor}`. Re-raises a worker's exception."""
        if self._done:
            return self._tensors
        pending, self._pending = self._pending, []
        for fn in pending:
            fn()
        try:
            for future in self._futures:
                future.result()
        finally:
            self.cancel()
        self._done = True
        return self._tensors

    def cancel(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "BulkRead":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def load_tensors(checkpoint: "CheckpointFile", requests: Mapping[str, torch.dtype], *, zero_copy: bool = True,
                 workers: int = DEFAULT_WORKERS, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """`{name: CPU tensor in the requested dtype}` for every requested tensor of `checkpoint`, read
    now (see `BulkRead`). Raises the checkpoint's `CorruptCheckpointError` for a name not in it."""
    with BulkRead(checkpoint, requests, zero_copy=zero_copy, workers=workers, chunk_bytes=chunk_bytes) as reading:
        return reading.result()


def _jobs_serving(work: list[tuple[int, int, object, object]],
                  zero_copied: Mapping[str, tuple[int, int]]) -> dict[str, list[int]]:
    """`{name: [index of each job in work that fills it]}`: copy jobs by the names they hold,
    touches by byte range (a zero-copy tensor is ready once every page of its range is in)."""
    jobs_of: dict[str, list[int]] = {}
    for index, (_, _, names, _) in enumerate(work):
        for name in names:
            jobs_of.setdefault(name, []).append(index)
    touch_ranges = [(a, b, i) for i, (a, b, names, _) in enumerate(work) if not names]
    starts = [a for a, _, _ in touch_ranges]
    for name, (start, stop) in zero_copied.items():
        first = max(0, bisect.bisect_right(starts, start) - 1)
        for a, b, index in touch_ranges[first:]:
            if a >= stop:
                break
            if b > start:
                jobs_of.setdefault(name, []).append(index)
    return jobs_of


def _touch(flat: torch.Tensor) -> None:
    """Read one byte every half page of the bytes `flat`, which faults every page of it in."""
    if flat.numel() == 0:
        return
    stride = max(1, mmap.PAGESIZE // 2)  # < a page, so no page is stepped over
    int(flat[::stride].max()) + int(flat[-1])  # noqa: B018 (the reads are the point)


def _from_pickled(checkpoint: "CheckpointFile", requests: Mapping[str, torch.dtype],
                  zero_copy: bool) -> dict[str, torch.Tensor]:
    """Pickled checkpoints are already tensors (memory-mapped by `torch.load` where possible)."""
    out = {}
    for name, dtype in requests.items():
        value = checkpoint.read_stored(name)
        out[name] = value if zero_copy and value.dtype == dtype else value.to(dtype, copy=True)
    return out
