"""Turning what node functions return into per-slot output lists, UI records and expansions.

A call may return a tuple of outputs, `{"result": tuple, "ui": {...}}`, `{"ui": {...}}`,
`{"result": ..., "expand": subgraph}` or an `ExecutionBlocker` (standing for every output).
Semantics of ComfyUI's `execution.py: get_output_from_returns` / `merge_result_data`
(reference §4.3, §5.3); the shape checks, with a clear error, are ours.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from graph.errors import NodeOutputError
from graph.expansion import ExecutionBlocker
from graph.inputs import merge_outputs, merge_ui
from graph.prompt import is_link
from graph.spec import NodeSpec


@dataclass
class Returns:
    outputs: list[list] = field(default_factory=list)  # per-slot lists (when not expanding)
    ui: dict = field(default_factory=dict)
    # When any call expanded: one (subgraph or None, result tuple) per call, resolved later.
    expansions: list[tuple[dict | None, Any]] | None = None


def _check_tuple(spec: NodeSpec, node_id: str, value: Any) -> tuple:
    count = len(spec.outputs)
    if value is None and count == 0:
        return ()
    if isinstance(value, ExecutionBlocker):
        return (value,) * count
    if not isinstance(value, (tuple, list)):
        raise NodeOutputError(
            f"node {node_id} ({spec.node_id}) returned {type(value).__name__}; expected a tuple of {count} "
            f"output(s) or a dict with 'result' / 'ui' / 'expand'")
    if len(value) < count:
        raise NodeOutputError(
            f"node {node_id} ({spec.node_id}) returned {len(value)} value(s); it declares {count} output(s)")
    return tuple(value)


def split_returns(spec: NodeSpec, node_id: str, returns: list[Any]) -> Returns:
    """Combine the return values of all calls of one node."""
    results: list[tuple] = []
    uis: list[dict] = []
    expansions: list[tuple[dict | None, Any]] = []
    expanded = False
    for value in returns:
        if isinstance(value, dict):
            if "ui" in value and value["ui"] is not None:
                if not isinstance(value["ui"], dict):
                    raise NodeOutputError(
                        f"node {node_id} ({spec.node_id}): 'ui' must be a dict of lists, got {type(value['ui']).__name__}")
                uis.append(value["ui"])
            if "expand" in value:
                expanded = True
                result = value.get("result")
                if isinstance(result, ExecutionBlocker):
                    result = (result,) * len(spec.outputs)
                expansions.append((value["expand"], result if result is not None else ()))
            elif "result" in value:
                result = _check_tuple(spec, node_id, value["result"])
                results.append(result)
                expansions.append((None, result))
        else:
            result = _check_tuple(spec, node_id, value)
            results.append(result)
            expansions.append((None, result))
    try:
        ui = merge_ui(uis)
    except (KeyError, TypeError) as ex:
        raise NodeOutputError(f"node {node_id} ({spec.node_id}): {ex.args[0] if ex.args else ex}") from ex
    if expanded:
        return Returns([], ui, expansions)
    output_is_list = tuple(o.is_list for o in spec.outputs)
    return Returns(merge_outputs(results, output_is_list) if results else [], ui, None)


def resolve_expansions(spec: NodeSpec, expansions: list[tuple[dict | None, Any]],
                       get_slot: Callable[[str, int], list]) -> list[list]:
    """The expanding node's outputs once its subgraph ran: links in results become values.

    As in ComfyUI, a link contributes every element of the producer's output list.
    """
    resolved: list[tuple] = []
    for subgraph, result in expansions:
        if subgraph is None:
            resolved.append(tuple(result))
            continue
        values: list[Any] = []
        for item in result:
            if is_link(item):
                values.extend(get_slot(item[0], int(item[1])))
            else:
                values.append(item)
        resolved.append(tuple(values))
    return merge_outputs(resolved, tuple(o.is_list for o in spec.outputs))
