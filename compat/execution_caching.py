"""ComfyUI's executor caches (`comfy_execution.caching`) for node packs that build, use or patch them.

Behaviour of today's ComfyUI's comfy_execution/caching.py (late 2026), written here afresh:

- cache keys per node: `CacheKeySetID` keys `(node_id, class_type)`; `CacheKeySetInputSignature`
  keys a hashable signature (`to_hashable`) of the node and its ordered ancestors: each one's
  class type, its `IS_CHANGED` value (`await is_changed_cache.get(node_id)`), its id when the class
  is NOT_IDEMPOTENT or has a hidden UNIQUE_ID input (`include_unique_id_in_input`), and its inputs
  by sorted name, a link written as `("ANCESTOR", index of the source in the ancestor list,
  socket)`. Two identical subgraphs therefore key alike whatever their node ids;
- `BasicCache` (one prompt's keys, `set_prompt` async, `get_local` / `set_local` /
  `remove_local`, `clean_unused`, subcaches per expanding node), `HierarchicalCache` (async
  `get` / `set` into the subcache of an expanded node's parent chain), `NullCache`, `LRUCache`
  (entries marked with the generation of the prompt that last used them; `clean_unused` drops
  the oldest generations while over `max_size`), `RAMPressureCache` (an LRU cache that evicts by
  RAM pressure in `ram_release`), and `DependencyAwareCache` (ComfyUI 0.3.64's; today's ComfyUI
  no longer has it: entries go once every node that reads them has run).

The engine's own executor does NOT use these classes: its cache is graph/'s (graph/cache.py,
keyed by value signatures, graph/signature.py). The classes work standalone, on the objects
ComfyUI passes them (a `DynamicPrompt`, a list of node ids, an is-changed cache with an async
`get(node_id)`), for packs that build and use them; a pack replacing a method
(`HierarchicalCache.set_prompt`, as ComfyUI-LG_HotReload does to drop the entries of reloaded
classes) changes those instances only, not what the engine caches.

Node classes are looked up in the active session's registry (its hidden inputs and
NOT_IDEMPOTENT), else in `nodes.NODE_CLASS_MAPPINGS` (a class a pack put there itself, as pack
tests do), where ComfyUI reads `nodes.NODE_CLASS_MAPPINGS` only. `NODE_CLASS_CONTAINS_UNIQUE_ID`
is ComfyUI's memo of `include_unique_id_in_input`; an entry a pack writes there is honoured, but
this module does not fill it (its answers depend on the session's registry, so it memoises per
class object instead).

Approximations, documented: the external cache providers of today's ComfyUI
(`comfy_execution.cache_provider`) are not provided, so `enable_providers` is recorded and no
provider is consulted. `RAMPressureCache.ram_release` measures available RAM with psutil (today's
`comfy.system_memory.virtual_memory_available`) and counts the CPU tensors an entry holds, as
ComfyUI does; a "model patcher output" (evicted first once a newer prompt ran) is an instance of
our ModelPatcher or an object whose `.patcher` is one (CLIP, VAE); among entries of equal score
the least recently touched goes first (the LRU order ComfyUI's comment states).
DependencyAwareCache's `get` / `set` are async, as every cache's are today (0.3.64's were plain).
"""
from __future__ import annotations

import logging
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Iterable

from graph.prompt import is_link
from graph.spec import HIDDEN, HIDDEN_UNIQUE_ID

log = logging.getLogger(__name__)

# ComfyUI's memo {class_type: has a hidden UNIQUE_ID input}: honoured when a pack writes it (see
# the module docstring); our own answers are memoised per class object below.
NODE_CLASS_CONTAINS_UNIQUE_ID: dict[str, bool] = {}
_HIDDEN_UNIQUE_ID_OF_CLASS: "weakref.WeakKeyDictionary[type, bool]" = weakref.WeakKeyDictionary()


def _node_class_traits(class_type: str) -> tuple[bool, bool]:
    """`(has a hidden UNIQUE_ID input, NOT_IDEMPOTENT)` of a node type: the active session's
    registry spec, else the class in `nodes.NODE_CLASS_MAPPINGS` (KeyError when neither has it,
    as ComfyUI's lookup raises)."""
    from compat.active import active

    spec = active().registry.find(class_type)
    if spec is not None:
        unique_id = any(i.section == HIDDEN and i.type == HIDDEN_UNIQUE_ID for i in spec.inputs)
        return unique_id, bool(spec.not_idempotent)
    from compat.node_facades import node_class_mappings

    cls = node_class_mappings()[class_type]
    try:
        unique_id = _HIDDEN_UNIQUE_ID_OF_CLASS[cls]
    except (KeyError, TypeError):
        hidden = cls.INPUT_TYPES().get("hidden", {}) or {}
        unique_id = HIDDEN_UNIQUE_ID in hidden.values()
        try:
            _HIDDEN_UNIQUE_ID_OF_CLASS[cls] = unique_id
        except TypeError:  # not weakly referenceable: not memoised
            pass
    return unique_id, bool(getattr(cls, "NOT_IDEMPOTENT", False))


def include_unique_id_in_input(class_type: str) -> bool:
    """Whether the node type has a hidden UNIQUE_ID input, so that its cache key includes its node
    id (behaviour of ComfyUI's `comfy_execution.caching.include_unique_id_in_input`)."""
    known = NODE_CLASS_CONTAINS_UNIQUE_ID.get(class_type)
    if known is not None:
        return known
    return _node_class_traits(class_type)[0]


class Unhashable:
    """A value that cannot take part in a cache key: equal only to itself, so a key holding one
    never matches another key (ComfyUI's `Unhashable`, whose `value` is NaN)."""

    def __init__(self) -> None:
        self.value = float("NaN")


_PLAIN = (int, float, str, bool, bytes, type(None))


def to_hashable(obj: Any) -> Any:
    """A hashable form of a signature part (ComfyUI's `to_hashable`): plain values as they are, a
    mapping as the frozenset of its `(key, value)` pairs, a sequence as the frozenset of its
    `(index, item)` pairs (both converted in turn), anything else (a tensor, an object) as a
    fresh `Unhashable`, which makes the key unique."""
    if isinstance(obj, _PLAIN):
        return obj
    if isinstance(obj, Mapping):
        return frozenset((to_hashable(key), to_hashable(value)) for key, value in obj.items())
    if isinstance(obj, Sequence):
        return frozenset((index, to_hashable(item)) for index, item in enumerate(obj))
    return Unhashable()


# -- cache keys ------------------------------------------------------------------------------------

class CacheKeySet(ABC):
    """The keys of one prompt's nodes: `keys` (node id -> data key) and `subcache_keys` (node id ->
    the key of the subcache that holds what the node expanded into)."""

    def __init__(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        self.keys: dict[str, Any] = {}
        self.subcache_keys: dict[str, Any] = {}

    @abstractmethod
    async def add_keys(self, node_ids: Iterable[str]) -> None:
        raise NotImplementedError

    def all_node_ids(self) -> set[str]:
        return set(self.keys)

    def get_used_keys(self) -> Any:
        return self.keys.values()

    def get_used_subcache_keys(self) -> Any:
        return self.subcache_keys.values()

    def get_data_key(self, node_id: str) -> Any:
        return self.keys.get(node_id)

    def get_subcache_key(self, node_id: str) -> Any:
        return self.subcache_keys.get(node_id)


def _class_type_of(dynprompt: Any, node_id: str) -> str:
    return dynprompt.get_node(node_id)["class_type"]


class CacheKeySetID(CacheKeySet):
    """Keys by identity: `(node_id, class_type)` for data and subcaches alike (ComfyUI's cache of
    node instances, `objects`, uses it)."""

    def __init__(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        super().__init__(dynprompt, node_ids, is_changed_cache)
        self.dynprompt = dynprompt

    async def add_keys(self, node_ids: Iterable[str]) -> None:
        for node_id in node_ids:
            if node_id in self.keys or not self.dynprompt.has_node(node_id):
                continue
            key = (node_id, _class_type_of(self.dynprompt, node_id))
            self.keys[node_id] = key
            self.subcache_keys[node_id] = key


class CacheKeySetInputSignature(CacheKeySet):
    """Keys by what a node computes: the signature of the node and its ordered ancestors (see the
    module docstring); subcaches by `(node_id, class_type)`."""

    def __init__(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        super().__init__(dynprompt, node_ids, is_changed_cache)
        self.dynprompt = dynprompt
        self.is_changed_cache = is_changed_cache

    def include_node_id_in_input(self) -> bool:
        """True makes every node's id part of its key (a subclass's choice)."""
        return False

    async def add_keys(self, node_ids: Iterable[str]) -> None:
        for node_id in node_ids:
            if node_id in self.keys or not self.dynprompt.has_node(node_id):
                continue
            self.keys[node_id] = await self.get_node_signature(self.dynprompt, node_id)
            self.subcache_keys[node_id] = (node_id, _class_type_of(self.dynprompt, node_id))

    async def get_node_signature(self, dynprompt: Any, node_id: str) -> Any:
        ancestors, order_mapping = self.get_ordered_ancestry(dynprompt, node_id)
        parts = [await self.get_immediate_node_signature(dynprompt, node_id, order_mapping)]
        for ancestor_id in ancestors:
            parts.append(await self.get_immediate_node_signature(dynprompt, ancestor_id, order_mapping))
        return to_hashable(parts)

    async def get_immediate_node_signature(self, dynprompt: Any, node_id: str,
                                           ancestor_order_mapping: Mapping[str, int]) -> list:
        """`[class_type, is_changed, (node_id,) (input, value or ("ANCESTOR", index, socket))...]`;
        a node not in the prompt gives `[NaN]`, which matches nothing."""
        if not dynprompt.has_node(node_id):
            return [float("NaN")]
        node = dynprompt.get_node(node_id)
        class_type = node["class_type"]
        _, not_idempotent = _node_class_traits(class_type)
        parts: list = [class_type, await self.is_changed_cache.get(node_id)]
        # the module global, so that a pack's replacement of it counts, as in ComfyUI
        if self.include_node_id_in_input() or not_idempotent or include_unique_id_in_input(class_type):
            parts.append(node_id)
        inputs = node.get("inputs") or {}
        for name in sorted(inputs):
            value = inputs[name]
            if is_link(value):
                parts.append((name, ("ANCESTOR", ancestor_order_mapping[value[0]], value[1])))
            else:
                parts.append((name, value))
        return parts

    def get_ordered_ancestry(self, dynprompt: Any, node_id: str) -> tuple[list[str], dict[str, int]]:
        """Every node the node depends on, in a deterministic order (depth first, inputs by sorted
        name, each source once), and `{ancestor id: its index}`."""
        ancestors: list[str] = []
        order_mapping: dict[str, int] = {}
        self.get_ordered_ancestry_internal(dynprompt, node_id, ancestors, order_mapping)
        return ancestors, order_mapping

    def get_ordered_ancestry_internal(self, dynprompt: Any, node_id: str, ancestors: list[str],
                                      order_mapping: dict[str, int]) -> None:
        """Appends `node_id`'s unseen ancestors to `ancestors` depth first (without recursion, so a
        long chain of nodes does not reach Python's recursion limit). A source missing from the
        prompt is listed but not walked."""

        def sources(of: str) -> Iterable[str]:
            if not dynprompt.has_node(of):
                return iter(())
            inputs = dynprompt.get_node(of).get("inputs") or {}
            return iter([inputs[name][0] for name in sorted(inputs) if is_link(inputs[name])])

        stack = [sources(node_id)]
        while stack:
            source = next(stack[-1], None)
            if source is None:
                stack.pop()
                continue
            if source in order_mapping:
                continue
            ancestors.append(source)
            order_mapping[source] = len(ancestors) - 1
            stack.append(sources(source))


# -- caches ----------------------------------------------------------------------------------------

class BasicCache:
    """One prompt's cache: values under the keys of `key_class` (a `CacheKeySet` class) and one
    subcache per node that expanded. `cache_key_set` and `dynprompt` exist once `set_prompt` ran
    (packs test `hasattr(cache, "cache_key_set")` for a first run)."""

    def __init__(self, key_class: type, enable_providers: bool = False) -> None:
        self.key_class = key_class
        self.initialized = False
        self.enable_providers = enable_providers  # recorded; no cache providers here
        self.cache: dict[Any, Any] = {}
        self.subcaches: dict[Any, BasicCache] = {}
        self._pending_store_tasks: set = set()

    async def set_prompt(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        """Key the prompt's nodes (`node_ids`) for the coming run; values stay, and those whose key
        a node still has are found again."""
        node_ids = list(node_ids)
        self.dynprompt = dynprompt
        self.cache_key_set = self.key_class(dynprompt, node_ids, is_changed_cache)
        await self.cache_key_set.add_keys(node_ids)
        self.is_changed_cache = is_changed_cache
        self.initialized = True

    def all_node_ids(self) -> set[str]:
        assert self.initialized, "set_prompt has not run"
        ids = set(self.cache_key_set.all_node_ids())
        for subcache in self.subcaches.values():
            ids |= subcache.all_node_ids()
        return ids

    def _clean_cache(self) -> None:
        keep = set(self.cache_key_set.get_used_keys())
        for key in [k for k in self.cache if k not in keep]:
            del self.cache[key]

    def _clean_subcaches(self) -> None:
        keep = set(self.cache_key_set.get_used_subcache_keys())
        for key in [k for k in self.subcaches if k not in keep]:
            del self.subcaches[key]

    def clean_unused(self) -> None:
        """Drop the values and subcaches no node of the current prompt keys."""
        assert self.initialized, "set_prompt has not run"
        self._clean_cache()
        self._clean_subcaches()

    def poll(self, **kwargs: Any) -> None:
        """A periodic chance to free memory (RAM-pressure caches act in `ram_release`)."""

    def get_local(self, node_id: str) -> Any:
        if not self.initialized:
            return None
        return self.cache.get(self.cache_key_set.get_data_key(node_id))

    def set_local(self, node_id: str, value: Any) -> None:
        assert self.initialized, "set_prompt has not run"
        self.cache[self.cache_key_set.get_data_key(node_id)] = value

    def remove_local(self, node_id: str) -> None:
        if self.initialized:
            self.cache.pop(self.cache_key_set.get_data_key(node_id), None)

    async def _set_immediate(self, node_id: str, value: Any) -> None:
        self.set_local(node_id, value)

    async def _get_immediate(self, node_id: str) -> Any:
        return self.get_local(node_id)

    def _get_class_type(self, node_id: str) -> str:
        if not self.initialized:
            return ""
        try:
            return self.dynprompt.get_node(node_id).get("class_type", "")
        except Exception:  # noqa: BLE001 -- an unknown node has no class type
            return ""

    async def _ensure_subcache(self, node_id: str, children_ids: Iterable[str]) -> "BasicCache":
        """The subcache for what `node_id` expanded into, keyed for `children_ids`."""
        key = self.cache_key_set.get_subcache_key(node_id)
        subcache = self.subcaches.get(key)
        if subcache is None:
            subcache = self.subcaches[key] = BasicCache(self.key_class)
        await subcache.set_prompt(self.dynprompt, children_ids, self.is_changed_cache)
        return subcache

    def _get_subcache(self, node_id: str) -> "BasicCache | None":
        assert self.initialized, "set_prompt has not run"
        return self.subcaches.get(self.cache_key_set.get_subcache_key(node_id))

    def recursive_debug_dump(self) -> list:
        dump: list = [{"key": key, "value": value} for key, value in self.cache.items()]
        dump += [{"subcache_key": key, "subcache": sub.recursive_debug_dump()} for key, sub in self.subcaches.items()]
        return dump


class HierarchicalCache(BasicCache):
    """ComfyUI's default cache: a node an expansion created lives in the subcache of its parent
    (and of the parent's parent ...), found through `dynprompt.get_parent_node_id`."""

    def __init__(self, key_class: type, enable_providers: bool = False) -> None:
        super().__init__(key_class, enable_providers=enable_providers)

    def _get_cache_for(self, node_id: str) -> BasicCache | None:
        dynprompt = getattr(self, "dynprompt", None)
        if dynprompt is None:
            return None  # no prompt yet: nothing cached
        chain = []
        parent = dynprompt.get_parent_node_id(node_id)
        while parent is not None:
            chain.append(parent)
            parent = dynprompt.get_parent_node_id(parent)
        cache: BasicCache | None = self
        for parent in reversed(chain):
            cache = cache._get_subcache(parent)
            if cache is None:
                return None
        return cache

    async def get(self, node_id: str) -> Any:
        cache = self._get_cache_for(node_id)
        return None if cache is None else await cache._get_immediate(node_id)

    def get_local(self, node_id: str) -> Any:
        cache = self._get_cache_for(node_id)
        return None if cache is None else BasicCache.get_local(cache, node_id)

    async def set(self, node_id: str, value: Any) -> None:
        cache = self._get_cache_for(node_id)
        assert cache is not None, f"no subcache for node {node_id!r}: call ensure_subcache_for on its parent"
        await cache._set_immediate(node_id, value)

    def set_local(self, node_id: str, value: Any) -> None:
        cache = self._get_cache_for(node_id)
        assert cache is not None, f"no subcache for node {node_id!r}: call ensure_subcache_for on its parent"
        BasicCache.set_local(cache, node_id, value)

    def remove_local(self, node_id: str) -> None:
        cache = self._get_cache_for(node_id)
        if cache is not None:
            BasicCache.remove_local(cache, node_id)

    async def ensure_subcache_for(self, node_id: str, children_ids: Iterable[str]) -> BasicCache:
        cache = self._get_cache_for(node_id)
        assert cache is not None, f"no cache for node {node_id!r}"
        return await cache._ensure_subcache(node_id, children_ids)


class NullCache:
    """A cache that keeps nothing (ComfyUI's `--cache-none`)."""

    async def set_prompt(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        pass

    def all_node_ids(self) -> list:
        return []

    def clean_unused(self) -> None:
        pass

    def poll(self, **kwargs: Any) -> None:
        pass

    async def get(self, node_id: str) -> None:
        return None

    def get_local(self, node_id: str) -> None:
        return None

    async def set(self, node_id: str, value: Any) -> None:
        pass

    def set_local(self, node_id: str, value: Any) -> None:
        pass

    def remove_local(self, node_id: str) -> None:
        pass

    async def ensure_subcache_for(self, node_id: str, children_ids: Iterable[str]) -> "NullCache":
        return self


class LRUCache(BasicCache):
    """Keeps values across prompts: each key remembers the generation (the count of `set_prompt`
    calls) that last used it, and `clean_unused` drops the oldest generations while more than
    `max_size` values are held (never the current one). Expanded nodes are keyed in this cache
    itself; subcaches only track which expansions are alive."""

    def __init__(self, key_class: type, max_size: int = 100, enable_providers: bool = False) -> None:
        super().__init__(key_class, enable_providers=enable_providers)
        self.max_size = max_size
        self.min_generation = 0
        self.generation = 0
        self.used_generation: dict[Any, int] = {}
        self.children: dict[Any, list] = {}

    async def set_prompt(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        node_ids = list(node_ids)
        await super().set_prompt(dynprompt, node_ids, is_changed_cache)
        self.generation += 1
        for node_id in node_ids:
            self._mark_used(node_id)

    def _forget(self, key: Any) -> None:
        self.cache.pop(key, None)
        self.used_generation.pop(key, None)
        self.children.pop(key, None)

    def clean_unused(self) -> None:
        while len(self.cache) > self.max_size and self.min_generation < self.generation:
            self.min_generation += 1
            for key in [k for k in self.cache if self.used_generation.get(k, 0) < self.min_generation]:
                self._forget(key)
        self._clean_subcaches()

    def _mark_used(self, node_id: str) -> None:
        key = self.cache_key_set.get_data_key(node_id)
        if key is not None:
            self.used_generation[key] = self.generation

    async def get(self, node_id: str) -> Any:
        self._mark_used(node_id)
        return await self._get_immediate(node_id)

    async def set(self, node_id: str, value: Any) -> None:
        self._mark_used(node_id)
        await self._set_immediate(node_id, value)

    def set_local(self, node_id: str, value: Any) -> None:
        self._mark_used(node_id)
        BasicCache.set_local(self, node_id, value)

    def remove_local(self, node_id: str) -> None:
        if self.initialized:
            self._forget(self.cache_key_set.get_data_key(node_id))

    async def ensure_subcache_for(self, node_id: str, children_ids: Iterable[str]) -> "LRUCache":
        children_ids = list(children_ids)
        await super()._ensure_subcache(node_id, children_ids)  # marks the expansion alive
        await self.cache_key_set.add_keys(children_ids)
        self._mark_used(node_id)
        key = self.cache_key_set.get_data_key(node_id)
        self.children[key] = []
        for child_id in children_ids:
            self._mark_used(child_id)
            self.children[key].append(self.cache_key_set.get_data_key(child_id))
        return self


# -- RAM pressure ------------------------------------------------------------------------------------

# The weight of an entry that holds no measurable CPU tensor (so it still takes part in scoring).
RAM_CACHE_DEFAULT_RAM_USAGE = 0.05
# Each generation an entry went unused multiplies its eviction score by this.
RAM_CACHE_OLD_WORKFLOW_OOM_MULTIPLIER = 1.3
# What ComfyUI's executor counts as a large intermediate value (bytes).
RAM_CACHE_LARGE_INTERMEDIATE = 512 * 1024 ** 2
_EVICT_FIRST = 1e30


def virtual_memory_available() -> int:
    """Available system RAM in bytes (today's `comfy.system_memory.virtual_memory_available`)."""
    import psutil

    return int(psutil.virtual_memory().available)


def all_outputs_dynamic(outputs: Any) -> bool:
    """True when every output (lists walked) answers `is_dynamic()` with True; None is not."""
    if outputs is None:
        return False
    for output in outputs:
        if isinstance(output, (list, tuple)):
            if not all_outputs_dynamic(output):
                return False
        elif not (callable(getattr(output, "is_dynamic", None)) and output.is_dynamic()):
            return False
    return True


def is_model_patcher_output(output: Any) -> bool:
    """An output that is (or wraps, as CLIP and VAE do through `.patcher`) a model patcher."""
    from comfy_core.patching.model import ModelPatcher

    return isinstance(output, ModelPatcher) or isinstance(getattr(output, "patcher", None), ModelPatcher)


def _outputs_of(entry: Any) -> Any:
    """A cache entry's outputs: ComfyUI's `CacheEntry.outputs`, or the value itself."""
    return getattr(entry, "outputs", entry)


class RAMPressureCache(LRUCache):
    """An LRU cache without a size limit that frees values when system RAM runs short:
    `ram_release(target)` evicts, best candidates first, until `virtual_memory_available()`
    reaches `target` bytes. A candidate's score is its RAM (CPU tensor bytes, each storage once,
    plus a small base) times 1.3 per generation it went unused; model patchers of an older prompt
    and entries that cannot be sized go first. Values of the current prompt are kept unless
    `free_active`."""

    def __init__(self, key_class: type, enable_providers: bool = False) -> None:
        super().__init__(key_class, 0, enable_providers=enable_providers)
        self.timestamps: dict[Any, float] = {}
        self.active_evictions = False
        self.full_evictions = False

    async def set_prompt(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        self.active_evictions = False
        self.full_evictions = False
        await super().set_prompt(dynprompt, node_ids, is_changed_cache)

    def clean_unused(self) -> None:
        self._clean_subcaches()  # values go by RAM pressure only

    def _touch(self, node_id: str) -> None:
        self.timestamps[self.cache_key_set.get_data_key(node_id)] = time.time()

    async def set(self, node_id: str, value: Any) -> None:
        self._touch(node_id)
        await super().set(node_id, value)

    async def get(self, node_id: str) -> Any:
        self._touch(node_id)
        return await super().get(node_id)

    def set_local(self, node_id: str, value: Any) -> None:
        self._touch(node_id)
        super().set_local(node_id, value)

    def remove_local(self, node_id: str) -> None:
        if self.initialized:
            self.timestamps.pop(self.cache_key_set.get_data_key(node_id), None)
        super().remove_local(node_id)

    def _entry_ram(self, key: Any, entry: Any) -> tuple[float, float, bool]:
        """`(RAM bytes counted, RAM for scoring, sized)` of one entry (see the class docstring)."""
        import torch

        ram = score_ram = RAM_CACHE_DEFAULT_RAM_USAGE
        old = self.used_generation.get(key, 0) != self.generation
        seen: set = set()
        pending = [_outputs_of(entry)]
        try:
            while pending:
                item = pending.pop()
                if item is None:
                    continue
                if isinstance(item, Mapping):
                    pending.extend(item.values())
                elif isinstance(item, (list, tuple)):
                    pending.extend(item)
                elif isinstance(item, torch.Tensor):
                    if item.device.type == "cpu":
                        storage = item.untyped_storage()
                        ident = (storage.data_ptr(), storage.nbytes())
                        if ident not in seen:
                            seen.add(ident)
                            ram += storage.nbytes()
                            score_ram += storage.nbytes()
                elif old and is_model_patcher_output(item):
                    score_ram = _EVICT_FIRST
                elif callable(getattr(item, "_comfy_cache_tensors", None)):
                    pending.append(item._comfy_cache_tensors())
        except Exception:  # noqa: BLE001 -- an entry we cannot size is evicted first
            log.warning("could not size cache entry %r; evicting it first", key, exc_info=True)
            return ram, _EVICT_FIRST, False
        return ram, score_ram, True

    def ram_release(self, target: float, free_active: bool = False, min_entry_size: float = 0) -> float:
        """Evict until `virtual_memory_available()` is at least `target` bytes; returns the RAM
        the evicted entries held (as counted). Entries below `min_entry_size` stay."""
        if virtual_memory_available() >= target:
            return 0
        candidates = []
        for key, entry in self.cache.items():
            used = self.used_generation.get(key, 0)
            current = used == self.generation
            if current and (not free_active or all_outputs_dynamic(_outputs_of(entry))):
                continue
            ram, score_ram, sized = self._entry_ram(key, entry)
            if sized and ram < min_entry_size:
                continue
            score = RAM_CACHE_OLD_WORKFLOW_OOM_MULTIPLIER ** (self.generation - used) * score_ram
            # highest score first; on a tie the least recently touched
            candidates.append((-score, self.timestamps.get(key, 0.0), len(candidates), key, ram))
        candidates.sort(key=lambda c: c[:3])
        freed = 0.0
        for _, _, _, key, ram in candidates:
            if virtual_memory_available() >= target:
                break
            self._forget(key)
            self.timestamps.pop(key, None)
            freed += ram
        if freed and free_active:
            self.active_evictions = True
            if min_entry_size == 0:
                self.full_evictions = True
        return freed


# -- ComfyUI 0.3.64's DependencyAwareCache ---------------------------------------------------------------

class DependencyAwareCache(BasicCache):
    """Holds a node's value only while a node that reads it has yet to run (ComfyUI 0.3.64's
    `--cache-none`-like low-memory cache): `set_prompt` clears everything and records who reads
    whom; `set` marks the node run and drops each input source all of whose readers have run."""

    def __init__(self, key_class: type, enable_providers: bool = False) -> None:
        super().__init__(key_class, enable_providers=enable_providers)
        self.descendants: dict[str, set[str]] = {}
        self.ancestors: dict[str, set[str]] = {}
        self.executed_nodes: set[str] = set()

    async def set_prompt(self, dynprompt: Any, node_ids: Iterable[str], is_changed_cache: Any) -> None:
        node_ids = list(node_ids)
        self.cache.clear()
        self.subcaches.clear()
        self.executed_nodes.clear()
        await super().set_prompt(dynprompt, node_ids, is_changed_cache)
        self._build_dependency_graph(dynprompt, node_ids)

    def _build_dependency_graph(self, dynprompt: Any, node_ids: Iterable[str]) -> None:
        node_ids = list(node_ids)
        self.descendants = {node_id: set() for node_id in node_ids}
        self.ancestors = {node_id: set() for node_id in node_ids}
        for node_id in node_ids:
            for value in (dynprompt.get_node(node_id).get("inputs") or {}).values():
                if is_link(value):
                    self.descendants.setdefault(value[0], set()).add(node_id)
                    self.ancestors[node_id].add(value[0])

    async def set(self, node_id: str, value: Any) -> None:
        await self._set_immediate(node_id, value)
        self.executed_nodes.add(node_id)
        self._cleanup_ancestors(node_id)

    async def get(self, node_id: str) -> Any:
        return await self._get_immediate(node_id)

    async def ensure_subcache_for(self, node_id: str, children_ids: Iterable[str]) -> BasicCache:
        children_ids = list(children_ids)
        subcache = await super()._ensure_subcache(node_id, children_ids)
        for child_id in children_ids:
            self.descendants.setdefault(node_id, set()).add(child_id)
            self.ancestors.setdefault(child_id, set()).add(node_id)
        return subcache

    def _cleanup_ancestors(self, node_id: str) -> None:
        for ancestor_id in self.ancestors.get(node_id, ()):
            if ancestor_id in self.executed_nodes and self.descendants.get(ancestor_id, set()) <= self.executed_nodes:
                self._remove_node(ancestor_id)

    def _remove_node(self, node_id: str) -> None:
        self.cache.pop(self.cache_key_set.get_data_key(node_id), None)
        self.subcaches.pop(self.cache_key_set.get_subcache_key(node_id), None)

    def clean_unused(self) -> None:
        """Nothing to do: values go as their readers run."""

    def recursive_debug_dump(self) -> list:
        return super().recursive_debug_dump() + [{
            "descendants": self.descendants, "ancestors": self.ancestors,
            "executed_nodes": list(self.executed_nodes)}]
