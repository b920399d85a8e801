"""Cache signatures: what a node's output depends on, independent of node ids.

ComfyUI's key (`caching.py: CacheKeySetInputSignature`, reference §5.4) lists the node's class,
IS_CHANGED result and constants plus those of *all* its ancestors, ancestors named by position;
building it is quadratic in a chain. We compute the same information as a Merkle hash instead:

    sig(N) = H(class_type, is_changed(N), [N's id if NOT_IDEMPOTENT or hidden UNIQUE_ID],
               for each input key in sorted order: (key, constant) or (key, sig(source), slot))

so each node costs O(its inputs) once per prompt (memoised), node ids never enter the key (a
renumbered or duplicated subgraph hits the cache), and equal sub-chains share entries. The same
builder gives value keys (graph/value_keys.py), which key links on the values they carry. A value
that cannot be encoded (a tensor constant, a NaN IS_CHANGED, an IS_CHANGED that raised, a link
to a missing node or around a cycle) gives a fresh `Unique` key that never matches anything,
and so does everything downstream of it, as ComfyUI's NaN does.
"""
from __future__ import annotations

import hashlib
import inspect
import logging
import math
from typing import Any, Awaitable, Callable, Hashable, Iterable, Mapping

from graph.expansion import ExecutionBlocker
from graph.inputs import (HIDDEN_API_KEY, HIDDEN_AUTH_TOKEN, HIDDEN_EXECUTION_LIST, HIDDEN_USAGE_SOURCE,
                          assemble_inputs, call_slices)
from graph.prompt import DynamicPrompt
from graph.spec import (HIDDEN, HIDDEN_DYNPROMPT, HIDDEN_EXTRA_PNGINFO, HIDDEN_PROMPT, HIDDEN_UNIQUE_ID,
                        InputSpec, NodeSpec)

log = logging.getLogger(__name__)


class Unique:
    """A key equal only to itself: the node never hits the cache."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<Unique {id(self):#x}>"


class _Unencodable(Exception):
    pass


# Constants that `canonical` returns unchanged (float is not here: NaN must be refused).
_PLAIN = frozenset({int, str, bool, bytes, type(None)})
_NO_LINKS: dict[str, tuple[str, int]] = {}
# Hidden inputs through which a node sees more than its inputs: such a node is never keyed by value.
_READS_BEYOND_INPUTS = frozenset({HIDDEN_PROMPT, HIDDEN_DYNPROMPT, HIDDEN_EXTRA_PNGINFO,
                                  HIDDEN_AUTH_TOKEN, HIDDEN_API_KEY, HIDDEN_USAGE_SOURCE, HIDDEN_EXECUTION_LIST})


def canonical(value: Any) -> Any:
    """A deterministic, repr-stable encoding of a JSON-like value (raises `_Unencodable`)."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise _Unencodable("NaN")
        return value
    if isinstance(value, (list, tuple)):
        return ("L", tuple(canonical(v) for v in value))
    if isinstance(value, dict):
        try:
            items = sorted(value.items())
        except TypeError:
            raise _Unencodable("dict with unsortable keys") from None
        return ("D", tuple((canonical(k), canonical(v)) for k, v in items))
    raise _Unencodable(type(value).__name__)


def _digest(parts: Any) -> bytes:
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Signatures:
    """Signatures of the nodes of one prompt run, memoised; `prepare` computes IS_CHANGED first."""

    def __init__(self, dynprompt: DynamicPrompt, spec_of: Callable[[str], NodeSpec],
                 inputs_of: Callable[[str], Mapping[str, InputSpec]], *,
                 extra_data: Mapping[str, Any] | None = None,
                 call: Callable[[Callable, dict], Awaitable[Any]] | None = None) -> None:
        self.dynprompt = dynprompt
        self.spec_of = spec_of  # class_type -> spec
        self.inputs_of = inputs_of  # class_type -> {name: InputSpec}
        self.extra_data = extra_data or {}
        self._call = call
        self._is_changed: dict[str, Any] = {}
        self._sigs: dict[str, Hashable] = {}
        self._keyed_by_id: dict[str, bool] = {}  # class_type -> its key includes the node id
        self._revision: dict[str, int] = {}  # class_type -> its spec's revision (0: never reloaded)
        self._keyable: dict[str, bool] = {}  # class_type -> it may be keyed by value

    # -- IS_CHANGED ---------------------------------------------------------------------------
    async def prepare(self, node_ids: Iterable[str]) -> None:
        """Compute IS_CHANGED for the given nodes (constants only; links arrive as None)."""
        for node_id in node_ids:
            if node_id in self._is_changed or not self.dynprompt.has_node(node_id):
                continue
            node = self.dynprompt.get_node(node_id)
            spec = self.spec_of(node["class_type"])
            fn = spec.behaviour.is_changed
            if fn is None:
                self._is_changed[node_id] = False
                continue
            self._is_changed[node_id] = await self._run_is_changed(node_id, node, spec, fn)

    async def _run_is_changed(self, node_id: str, node: dict, spec: NodeSpec, fn: Callable) -> Any:
        results = []
        try:
            assembled = assemble_inputs(node.get("inputs") or {}, self.inputs_of(spec.node_id), node_id,
                                        get_output=None, original_prompt=self.dynprompt.get_original_prompt(),
                                        dynprompt=self.dynprompt, extra_data=self.extra_data)
            for kwargs in call_slices(assembled.values, spec.input_is_list):
                result = await self._call(fn, kwargs) if self._call else fn(**kwargs)
                if inspect.isawaitable(result):
                    result = await result
                results.append(None if isinstance(result, ExecutionBlocker) else result)
        except Exception as ex:  # noqa: BLE001 -- ComfyUI: an exception means "always changed"
            log.warning("IS_CHANGED of node %s (%s) raised %s: %s; the node will always run",
                        node_id, spec.node_id, type(ex).__name__, ex)
            return float("nan")
        return results

    # -- signatures ---------------------------------------------------------------------------
    @property
    def computed(self) -> Mapping[str, Hashable]:
        """The signatures computed so far (read-only by convention; a fast path for callers)."""
        return self._sigs

    def get(self, node_id: str) -> Hashable:
        """The signature of `node_id` (IS_CHANGED must have been prepared for it and its ancestors)."""
        sig = self._sigs.get(node_id)
        if sig is not None:
            return sig
        # Iterative post-order over links, so a 10 000-node chain needs no deep recursion.
        sigs = self._sigs
        dynprompt = self.dynprompt
        visiting: set[str] = set()
        stack = [node_id]
        while stack:
            current = stack[-1]
            if current in sigs:
                stack.pop()
                continue
            node = dynprompt.find_node(current)
            if node is None or not isinstance(node.get("inputs"), dict):
                # A link to a missing node, or a node that failed validation: never cached.
                sigs[current] = Unique()
                stack.pop()
                continue
            links = dynprompt.links(current)
            pending = [source for _name, source, _slot in links if source not in sigs]
            if current not in visiting:
                visiting.add(current)
                unresolved = [p for p in pending if p not in visiting]
                if unresolved:
                    stack.extend(unresolved)
                    continue
            # Either all sources are known, or the rest are on the stack: a cycle.
            sigs[current] = Unique() if pending else self._immediate(current, node, links)
            visiting.discard(current)
            stack.pop()
        return sigs[node_id]

    def _immediate(self, node_id: str, node: dict, links: tuple[tuple[str, str, int], ...]) -> Hashable:
        sigs = self._sigs

        def by_source(_name: str, source: str, slot: int) -> Any:
            sig = sigs[source]
            return None if isinstance(sig, Unique) else ("@", sig, slot)

        return self._key(node_id, node, links, by_source, "structure")

    # -- value keys (graph/value_keys.py) -----------------------------------------------------
    def value_key(self, node_id: str, link_part: Callable[[str, str, int], Any]) -> Hashable:
        """The node's value key; `link_part(name, source, slot)` keys one linked input (None: no
        key). `Unique` when the node may not be keyed by value."""
        node = self.dynprompt.get_node(node_id)
        if not isinstance(node.get("inputs"), dict) or not self._value_keyable(node["class_type"]):
            return Unique()
        return self._key(node_id, node, self.dynprompt.links(node_id), link_part, "value")

    def _value_keyable(self, class_type: str) -> bool:
        keyable = self._keyable.get(class_type)
        if keyable is None:
            spec = self.spec_of(class_type)
            keyable = self._keyable[class_type] = spec.behaviour.check_lazy_status is None and not any(
                i.section == HIDDEN and i.type in _READS_BEYOND_INPUTS for i in self.inputs_of(class_type).values())
        return keyable

    def _key(self, node_id: str, node: dict, links: tuple[tuple[str, str, int], ...],
             link_part: Callable[[str, str, int], Any], kind: str) -> Hashable:
        """A digest of the node's class, IS_CHANGED, id where it counts, constants, and one part per
        link from `link_part` (None makes the key `Unique`)."""
        class_type = node["class_type"]
        is_changed = self._is_changed.get(node_id, False)
        parts: list[Any] = [kind, class_type]
        if is_changed is not False:
            try:
                is_changed = canonical(is_changed)
            except _Unencodable:
                return Unique()
        parts.append(is_changed)
        by_id = self._keyed_by_id.get(class_type)
        if by_id is None:
            spec = self.spec_of(class_type)
            by_id = self._keyed_by_id[class_type] = spec.not_idempotent or any(
                i.section == HIDDEN and i.type == HIDDEN_UNIQUE_ID for i in self.inputs_of(class_type).values())
            self._revision[class_type] = spec.revision
        if by_id:
            parts.append(("id", node_id))
        revision = self._revision.get(class_type, 0)
        if revision:  # a reloaded pack's node: the replaced code's results never match
            parts.append(("revision", revision))
        inputs = node["inputs"]
        linked = {name: (source, slot) for name, source, slot in links} if links else _NO_LINKS
        for key in sorted(inputs):
            link = linked.get(key)
            if link is not None:
                part = link_part(key, link[0], link[1])
                if part is None:
                    return Unique()
                parts.append((key, part))
                continue
            value = inputs[key]
            if type(value) not in _PLAIN:
                try:
                    value = canonical(value)
                except _Unencodable:
                    return Unique()
            parts.append((key, value))
        return _digest(parts)
