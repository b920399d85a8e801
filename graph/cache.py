"""Output caches keyed by node signature, and the strategies to choose from at start-up.

Strategies (ComfyUI's `--cache-*` flags, reference/comfyui-contract.md §5.5):

* `classic` keeps the outputs of the last prompt: when a prompt starts, entries whose signature
  is not in the new prompt are dropped (expanded nodes' entries stay while the node that
  expanded them is still in the prompt and they were used by the last run);
* `lru` keeps at most `size` entries, evicting whole least-recently-used prompts ("generations")
  first, as ComfyUI's `LRUCache` does; `size=0` means classic, as `--cache-lru 0` does;
* `none` keeps nothing across prompts; within a prompt each output is released as soon as every
  consumer has run (the executor calls `release`);
* `ram` is an unbounded LRU that, whenever free RAM falls below `ram_headroom_gb`, evicts the
  entries with the largest `1.3 ** age × estimated bytes` until free RAM is back above
  1.1 × the headroom (ComfyUI's `RAMPressureCache` policy).

Every strategy also indexes entries by value key (graph/value_keys.py): `get_by_value` finds an
entry still held under some structural key. The classic strategy would drop, when a prompt
starts, exactly the entries a value key can still reach (an upstream change gave them new
structural keys), so it carries the last prompt's value-reachable entries over this one prompt
(at most `carry_budget` bytes of them, smallest first), and `end_prompt` drops those that were
not reached. Entries holding a model handle (a MODEL or CLIP) are never carried: that would keep
a replaced checkpoint in memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable

KINDS = ("classic", "lru", "none", "ram")


@dataclass(frozen=True)
class CacheConfig:
    kind: str = "classic"
    size: int = 0
    ram_headroom_gb: float = 4.0
    # Free RAM in bytes; psutil's `available` by default. Tests pass their own probe.
    ram_probe: Callable[[], int] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"CacheConfig.kind must be one of {KINDS}, got {self.kind!r}")
        if self.size < 0:
            raise ValueError(f"CacheConfig.size must be >= 0, got {self.size}")


@dataclass
class CacheEntry:
    """One node's outputs: a list per output slot, plus its UI record (`{"meta", "output"}`).

    `value_key` is the node's value key (None: it has none); `by_value` says the key depends on
    some input's value identity, so the entry can be reached when its structural key changed;
    `holds_handles` says an output is a model handle (see graph/value_keys.py).
    """

    outputs: list[list]
    ui: dict | None = None
    value_key: Hashable | None = None
    by_value: bool = False
    holds_handles: bool = False

    @property
    def carried_by_value(self) -> bool:
        """Worth keeping past a structural change: reachable by value, and no model handle in it."""
        return self.by_value and not self.holds_handles


class OutputCache:
    """Classic strategy; the others derive from it.

    `carry_budget` bounds the bytes (by `estimate_bytes`) of value-reachable entries carried over
    a prompt: smallest first, so a large batch of decoded frames is dropped as ComfyUI would
    drop it, while latents and conditioning stay reachable.
    """

    CARRY_BUDGET = 1 << 30

    def __init__(self, carry_budget: int = CARRY_BUDGET) -> None:
        self.carry_budget = carry_budget
        self._entries: dict[Hashable, CacheEntry] = {}
        self._owner: dict[Hashable, Hashable] = {}
        self._used: set[Hashable] = set()
        self._by_value: dict[Hashable, Hashable] = {}  # value key -> structural key
        self._carried: set[Hashable] = set()

    def begin_prompt(self, keys: set[Hashable]) -> None:
        """A prompt with top-level signatures `keys` starts: drop what it cannot use."""
        entries = self._entries
        keep = {k for k in entries
                if k in keys or (k in self._used and self._owner.get(k) in keys)}
        self._carried = self._within_budget(
            [k for k in self._used if k not in keep and k in entries and entries[k].carried_by_value])
        self._drop([k for k in entries if k not in keep and k not in self._carried])
        self._used = set()

    def _within_budget(self, keys: list[Hashable]) -> set[Hashable]:
        sized = sorted(((estimate_bytes(self._entries[k].outputs), k) for k in keys), key=lambda item: item[0])
        chosen, total = set(), 0
        for size, key in sized:
            total += size
            if total > self.carry_budget:
                break
            chosen.add(key)
        return chosen

    def end_prompt(self) -> None:
        """The prompt ended (however): drop carried entries it did not reach again."""
        self._drop([k for k in self._carried if k not in self._used])
        self._carried = set()

    def get(self, key: Hashable) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._used.add(key)
        return entry

    def get_by_value(self, value_key: Hashable) -> CacheEntry | None:
        """An entry whose value key is `value_key`, if one is still held (the caller stores it
        again under its own structural key with `set`)."""
        key = self._by_value.get(value_key)
        return None if key is None else self._entries.get(key)

    def contains(self, key: Hashable) -> bool:
        return key in self._entries

    def set(self, key: Hashable, entry: CacheEntry, owner: Hashable | None = None) -> None:
        self._entries[key] = entry
        self._owner[key] = owner if owner is not None else key
        self._used.add(key)
        if entry.value_key is not None:
            self._by_value[entry.value_key] = key

    def release(self, key: Hashable) -> None:
        """Every consumer of `key` has run in this prompt (only `none` acts on it)."""

    def poll(self) -> None:
        """Called after each node (only `ram` acts on it)."""

    def clear(self) -> None:
        self._drop(list(self._entries))
        self._used = set()
        self._carried = set()

    def keys(self) -> set[Hashable]:
        return set(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, keys: Iterable[Hashable]) -> None:
        by_value = self._by_value
        for key in keys:
            entry = self._entries.pop(key, None)
            self._owner.pop(key, None)
            if entry is not None and entry.value_key is not None and by_value.get(entry.value_key) == key:
                del by_value[entry.value_key]


class NoCache(OutputCache):
    """Nothing survives a prompt; outputs are released once their consumers ran."""

    def begin_prompt(self, keys: set[Hashable]) -> None:
        self.clear()

    def release(self, key: Hashable) -> None:
        self._drop([key])


class LRUCache(OutputCache):
    """At most `size` entries (None: unbounded); whole old generations are evicted first."""

    def __init__(self, size: int | None) -> None:
        super().__init__()
        self.size = size
        self.generation = 0
        self.min_generation = 0
        self._generation_of: dict[Hashable, int] = {}

    def begin_prompt(self, keys: set[Hashable]) -> None:
        self.generation += 1
        for key in keys:
            if key in self._entries:
                self._generation_of[key] = self.generation
        self._evict_generations()

    def get(self, key: Hashable) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._generation_of[key] = self.generation
        return entry

    def set(self, key: Hashable, entry: CacheEntry, owner: Hashable | None = None) -> None:
        super().set(key, entry, owner)
        self._generation_of[key] = self.generation
        self._evict_generations()

    def _evict_generations(self) -> None:
        if self.size is None:
            return
        while len(self._entries) > self.size and self.min_generation < self.generation:
            self.min_generation += 1
            self._drop([k for k, g in self._generation_of.items() if g < self.min_generation])

    def _drop(self, keys: Iterable[Hashable]) -> None:
        keys = list(keys)
        super()._drop(keys)
        for key in keys:
            self._generation_of.pop(key, None)


class RAMPressureCache(LRUCache):
    """Unbounded LRU that evicts by age and size when free RAM runs low."""

    AGE_FACTOR = 1.3

    def __init__(self, headroom_gb: float, probe: Callable[[], int] | None = None) -> None:
        super().__init__(None)
        self.headroom = int(headroom_gb * (1 << 30))
        self._probe = probe or _available_ram

    def poll(self) -> None:
        if self._probe() >= self.headroom:
            return
        target = int(self.headroom * 1.1)
        scores = sorted(
            ((self.AGE_FACTOR ** (self.generation - self._generation_of.get(k, 0)) * (estimate_bytes(e.outputs) + 1), k)
             for k, e in self._entries.items()), key=lambda item: item[0], reverse=True)
        for _score, key in scores:
            if self._probe() >= target:
                break
            self._drop([key])


def _available_ram() -> int:
    import psutil  # imported here: only the RAM-pressure strategy needs it

    return int(psutil.virtual_memory().available)


def estimate_bytes(value: Any, _depth: int = 0) -> int:
    """Rough CPU bytes held by a cached value: tensors and arrays by size, containers walked.

    Duck-typed (no torch import): a tensor exposes `element_size()`, `nelement()` and `device`;
    only CPU tensors count, since GPU memory is not what the RAM policy protects.
    """
    if _depth > 8:
        return 0
    if isinstance(value, (list, tuple, set)):
        return sum(estimate_bytes(v, _depth + 1) for v in value)
    if isinstance(value, dict):
        return sum(estimate_bytes(v, _depth + 1) for v in value.values())
    if hasattr(value, "element_size") and hasattr(value, "nelement"):
        device = getattr(value, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            return 0
        try:
            return int(value.element_size()) * int(value.nelement())
        except Exception:  # noqa: BLE001
            return 0
    if hasattr(value, "nbytes") and isinstance(getattr(value, "nbytes"), int):
        return value.nbytes
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    return 0


def make_cache(config: CacheConfig) -> OutputCache:
    """The output cache for a `CacheConfig`."""
    if config.kind == "none":
        return NoCache()
    if config.kind == "lru" and config.size > 0:
        return LRUCache(config.size)
    if config.kind == "ram":
        return RAMPressureCache(config.ram_headroom_gb, config.ram_probe)
    return OutputCache()
