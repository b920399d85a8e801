"""Prompt validation with ComfyUI's semantics and error shapes (reference §1.3 and §5.1).

`validate_prompt` checks that every node has a known class, picks the output nodes (optionally
restricted to `partial_execution_targets`), then validates each output and, through its links,
everything it depends on. Outputs that fail are dropped; the rest still run. Per-node errors
are `{type, message, details, extra_info}` dicts collected under
`node_errors[id] = {errors, dependent_outputs, class_type}`; only nodes with reasons of their
own are listed (a node that is invalid only because an upstream node is has none).

Differences from ComfyUI, on purpose: the walk is iterative (a 10 000-node chain validates), and
a static dependency cycle is reported as an error naming the nodes of the cycle instead of
ending in a RecursionError. Constants are coerced in place (`inputs[x] = int(value)`, ...), as
ComfyUI does, so the executor sees the coerced prompt.
"""
from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable

from graph.context import NodeContext, reset_current, set_current
from graph.errors import DependencyCycleError
from graph.expansion import ExecutionBlocker
from graph.inputs import assemble_inputs, call_slices
from graph.registry import Registry
from graph.spec import HIDDEN, REQUIRED, InputSpec, NodeSpec
from graph.types import COMBO, types_match


@dataclass
class ValidationResult:
    ok: bool
    error: dict | None
    node_errors: dict[str, dict] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)


def _error(type_: str, message: str, details: str = "", extra_info: dict | None = None) -> dict:
    return {"type": type_, "message": message, "details": details, "extra_info": extra_info or {}}


def full_type_name(cls: type) -> str:
    """`module.QualName`, or just the name for builtins (ComfyUI's `full_type_name`)."""
    module = cls.__module__
    if module is None or module == "builtins":
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


class _Validator:
    """State of one `validate_prompt` call: memoised node results and per-class inputs."""

    def __init__(self, prompt: dict, registry: Registry, env: Any) -> None:
        self.prompt = prompt
        self.registry = registry
        self.env = env
        self.validated: dict[str, tuple[bool, list[dict], str]] = {}
        self._inputs: dict[str, dict[str, InputSpec]] = {}

    def inputs_of(self, class_type: str) -> dict[str, InputSpec]:
        specs = self._inputs.get(class_type)
        if specs is None:
            specs = {s.name: s for s in self.registry.get(class_type).current_inputs()}
            self._inputs[class_type] = specs
        return specs

    def spec_of(self, node_id: str) -> NodeSpec:
        return self.registry.get(self.prompt[node_id]["class_type"])

    # -- the walk -----------------------------------------------------------------------------
    def _edges(self, node_id: str) -> list[tuple[str, str]]:
        """(input name, source id) of the links the validation of `node_id` recurses into."""
        node = self.prompt[node_id]
        spec = self.spec_of(node_id)
        inputs = node.get("inputs") or {}
        edges = []
        for name, ispec in self.inputs_of(spec.node_id).items():
            if ispec.section == HIDDEN or name not in inputs:
                continue
            value = inputs[name]
            if not isinstance(value, list) or len(value) != 2:
                continue
            source = value[0]
            if not isinstance(source, str) or source not in self.prompt:
                continue  # raises inside the node's own validation, as in ComfyUI
            try:
                received = self.spec_of(source).outputs[value[1]].type
            except Exception:  # noqa: BLE001 -- reported by the node's own validation
                continue
            if spec.behaviour.validate_takes_input_types or types_match(received, ispec.type):
                edges.append((name, source))
        return edges

    async def validate_output(self, output_id: str) -> tuple[bool, list[dict]]:
        """Validate `output_id` and everything it needs, dependencies first (iteratively)."""
        if output_id in self.validated:
            ok, reasons, _ = self.validated[output_id]
            return ok, reasons
        # Iterative depth-first post-order; `parent_link` remembers who reached a node first so
        # that an exception can be reported the way ComfyUI's recursive walk reports it.
        parent_link: dict[str, tuple[str, str] | None] = {output_id: None}
        on_stack: dict[str, int] = {}
        stack: list[tuple[str, Iterable]] = []
        cycle_errors: dict[str, dict] = {}

        def push(node_id: str) -> None:
            on_stack[node_id] = len(stack)
            try:
                edges = self._edges(node_id)
            except Exception:  # noqa: BLE001 -- surfaces again in _validate_node
                edges = []
            stack.append((node_id, iter(edges)))

        push(output_id)
        while stack:
            node_id, edges = stack[-1]
            advanced = False
            for name, source in edges:
                if source in self.validated or source in cycle_errors:
                    continue
                if source in on_stack:
                    cycle = [n for n, _ in stack[on_stack[source]:]]
                    cycle_errors[source] = self._cycle_error(source, cycle + [source], parent_link.get(source), output_id)
                    continue
                parent_link.setdefault(source, (node_id, name))
                push(source)
                advanced = True
                break
            if not advanced:
                stack.pop()
                del on_stack[node_id]
                if node_id in cycle_errors:
                    self.validated[node_id] = (False, [cycle_errors[node_id]], node_id)
                elif node_id not in self.validated:
                    await self._validate_safely(node_id, parent_link.get(node_id), output_id)
        ok, reasons, _ = self.validated[output_id]
        return ok, reasons

    def _cycle_error(self, node_id: str, cycle: list[str], parent: tuple[str, str] | None, output_id: str) -> dict:
        ex = DependencyCycleError(f"Dependency cycle detected: {' -> '.join(cycle)}")
        if node_id == output_id or parent is None:
            return _error("exception_during_validation", "Exception when validating node", str(ex),
                          {"exception_type": full_type_name(DependencyCycleError), "traceback": [],
                           "cycle": cycle})
        consumer, name = parent
        return _error("exception_during_inner_validation", "Exception when validating inner node", str(ex),
                      {"input_name": name, "input_config": None, "exception_message": str(ex),
                       "exception_type": full_type_name(DependencyCycleError), "traceback": [],
                       "linked_node": self.prompt[consumer]["inputs"][name], "cycle": cycle})

    async def _validate_safely(self, node_id: str, parent: tuple[str, str] | None, output_id: str) -> None:
        try:
            self.validated[node_id] = await self._validate_node(node_id)
        except Exception as ex:  # noqa: BLE001 -- any failure becomes a validation error
            tb = traceback.format_tb(ex.__traceback__)
            if parent is None:
                reason = _error("exception_during_validation", "Exception when validating node", str(ex),
                                {"exception_type": full_type_name(type(ex)), "traceback": tb})
            else:
                consumer, name = parent
                ispec = self.inputs_of(self.prompt[consumer]["class_type"]).get(name)
                reason = _error("exception_during_inner_validation", "Exception when validating inner node",
                                str(ex), {"input_name": name, "input_config": _config(ispec),
                                          "exception_message": str(ex), "exception_type": full_type_name(type(ex)),
                                          "traceback": tb, "linked_node": self.prompt[consumer]["inputs"][name]})
            self.validated[node_id] = (False, [reason], node_id)

    # -- one node -----------------------------------------------------------------------------
    async def _validate_node(self, node_id: str) -> tuple[bool, list[dict], str]:
        node = self.prompt[node_id]
        inputs = node.setdefault("inputs", {})
        if not isinstance(inputs, dict):
            raise TypeError(f"node {node_id!r}: 'inputs' must be an object, got {type(inputs).__name__}")
        spec = self.spec_of(node_id)
        behaviour = spec.behaviour
        specs = self.inputs_of(spec.node_id)
        validate_names = behaviour.validate_params
        errors: list[dict] = []
        valid = True
        received_types: dict[str, Any] = {}

        for name, ispec in specs.items():
            if ispec.section == HIDDEN:
                continue
            info = _config(ispec)
            if name not in inputs:
                if ispec.section == REQUIRED:
                    errors.append(_error("required_input_missing", "Required input is missing", name,
                                         {"input_name": name}))
                continue
            value = inputs[name]
            if isinstance(value, list):
                if len(value) != 2:
                    errors.append(_error("bad_linked_input",
                                         "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                                         name, {"input_name": name, "input_config": info, "received_value": value}))
                    continue
                source = value[0]
                received = self.registry.get(self.prompt[source]["class_type"]).outputs[value[1]].type
                received_types[name] = received
                if not behaviour.validate_takes_input_types and not types_match(received, ispec.type):
                    errors.append(_error(
                        "return_type_mismatch", "Return type mismatch between linked nodes",
                        f"{name}, received_type({received}) mismatch input_type({_type_str(ispec.type)})",
                        {"input_name": name, "input_config": info, "received_type": received, "linked_node": value}))
                    continue
                state = self.validated.get(source)  # None: the source closes a cycle
                if state is None or not state[0]:
                    valid = False
                continue

            try:
                if isinstance(value, dict) and "__value__" in value:
                    value = value["__value__"]
                    inputs[name] = value
                value = _coerce(ispec.type, value)
                inputs[name] = value
            except Exception as ex:  # noqa: BLE001 -- ComfyUI's invalid_input_type
                errors.append(_error("invalid_input_type",
                                     f"Failed to convert an input value to a {_type_str(ispec.type)} value",
                                     f"{name}, {value}, {ex}",
                                     {"input_name": name, "input_config": info, "received_value": value,
                                      "exception_message": str(ex)}))
                continue

            if name in validate_names or behaviour.validate_takes_all:
                continue  # VALIDATE_INPUTS takes this input: built-in checks are off for it
            options = ispec.options
            if "min" in options and value < options["min"]:
                errors.append(_error("value_smaller_than_min", f"Value {value} smaller than min of {options['min']}",
                                     name, {"input_name": name, "input_config": info, "received_value": value}))
                continue
            if "max" in options and value > options["max"]:
                errors.append(_error("value_bigger_than_max", f"Value {value} bigger than max of {options['max']}",
                                     name, {"input_name": name, "input_config": info, "received_value": value}))
                continue
            allowed = _combo_values(ispec, self.env)
            if allowed is None:
                continue  # not a combo
            if options.get("multiselect") and isinstance(value, list):
                # a multi-select combo (io.MultiCombo): every chosen item must be an option
                rejected: Any = [item for item in value if item not in allowed]
                shown = rejected
            else:
                rejected = value not in allowed
                shown = f"'{value}'"
            if rejected:
                config: Any = info
                if len(allowed) > 20:
                    listing = f"(list of length {len(allowed)})"
                    config = None
                else:
                    listing = str(allowed)
                errors.append(_error("value_not_in_list", "Value not in list", f"{name}: {shown} not in {listing}",
                                     {"input_name": name, "input_config": config, "received_value": value}))

        if behaviour.validate_inputs is not None:
            errors.extend(await self._custom_validation(node_id, spec, specs, inputs, received_types))

        ok = valid and not errors
        return ok, errors, node_id

    async def _custom_validation(self, node_id: str, spec: NodeSpec, specs: dict[str, InputSpec],
                                 inputs: dict, received_types: dict) -> list[dict]:
        behaviour = spec.behaviour
        assembled = assemble_inputs(inputs, specs, node_id, get_output=None)
        filtered = {k: v for k, v in assembled.values.items()
                    if k in behaviour.validate_params or behaviour.validate_takes_all}
        if behaviour.validate_takes_input_types:
            filtered["input_types"] = [received_types]
        results = []
        # A context carrying the host's environment, so node code can find its folders
        # (e.g. LoadImage checks that its file exists) exactly as it does when it runs.
        token = set_current(NodeContext(prompt_id="", node_id=node_id, display_node_id=node_id,
                                        list_index=None, env=self.env))
        try:
            for kwargs in call_slices(filtered, spec.input_is_list):
                result = behaviour.validate_inputs(**kwargs)
                if inspect.isawaitable(result):
                    result = await result
                results.append(result)
        finally:
            reset_current(token)
        errors = []
        # One error per named input and failed call: ComfyUI's shape, kept as is.
        for name in filtered:
            for result in results:
                if result is not True and not isinstance(result, ExecutionBlocker):
                    details = name if result is False else f"{name} - {result}"
                    errors.append(_error("custom_validation_failed", "Custom validation failed for node", details,
                                         {"input_name": name}))
        return errors


def _config(ispec: InputSpec | None) -> Any:
    if ispec is None:
        return None
    type_ = ispec.type if not callable(ispec.type) or isinstance(ispec.type, str) else "COMBO"
    return [type_, dict(ispec.options)]


def _type_str(type_: Any) -> str:
    return str(type_) if isinstance(type_, (str, list, tuple)) else "COMBO"


def _coerce(type_: Any, value: Any) -> Any:
    if type_ == "INT":
        return int(value)
    if type_ == "FLOAT":
        return float(value)
    if type_ == "STRING":
        return str(value)
    if type_ == "BOOLEAN":
        return bool(value)
    return value


def _combo_values(ispec: InputSpec, env: Any) -> list | None:
    if ispec.is_combo:
        return ispec.combo_values(env)
    if ispec.type == COMBO and "options" in ispec.options:
        return list(ispec.options["options"])
    return None


async def validate_prompt(prompt: Any, registry: Registry, *, env: Any = None,
                          partial_execution_targets: list[str] | None = None) -> ValidationResult:
    """Validate an API-format prompt; see the module docstring."""
    if not isinstance(prompt, dict):
        return ValidationResult(False, _error("invalid_prompt", "Cannot execute because the prompt is not an object.",
                                              f"got {type(prompt).__name__}"), {}, [])
    outputs: list[str] = []
    for node_id, node in prompt.items():
        if not isinstance(node, dict) or "class_type" not in node:
            return ValidationResult(False, _error(
                "invalid_prompt", "Cannot execute because a node is missing the class_type property.",
                f"Node ID '#{node_id}'"), {}, [])
        class_type = node["class_type"]
        spec = registry.find(class_type)
        if spec is None:
            title = (node.get("_meta") or {}).get("title") if isinstance(node.get("_meta"), dict) else None
            return ValidationResult(False, _error(
                "missing_node_type", f"Node '{class_type}' not found. The custom node may not be installed.",
                f"Node ID '#{node_id}'", {"node_id": node_id, "class_type": class_type, "node_title": title}), {}, [])
        if spec.output_node and (partial_execution_targets is None or node_id in partial_execution_targets):
            outputs.append(node_id)
    if not outputs:
        return ValidationResult(False, _error("prompt_no_outputs", "Prompt has no outputs"), {}, [])

    validator = _Validator(prompt, registry, env)
    good: list[str] = []
    failed: list[tuple[str, list[dict]]] = []
    node_errors: dict[str, dict] = {}
    for output_id in outputs:
        ok, reasons = await validator.validate_output(output_id)
        if ok:
            good.append(output_id)
            continue
        failed.append((output_id, reasons))
        # ComfyUI lists every invalid node with reasons seen so far as depending on this output.
        for node_id, (node_ok, node_reasons, _) in validator.validated.items():
            if node_ok or not node_reasons:
                continue
            entry = node_errors.setdefault(node_id, {"errors": node_reasons, "dependent_outputs": [],
                                                     "class_type": prompt[node_id]["class_type"]})
            entry["dependent_outputs"].append(output_id)
    if not good:
        details = "\n".join(f"{r['message']}: {r['details']}" for _, reasons in failed for r in reasons)
        return ValidationResult(False, _error("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                                              details), node_errors, [])
    return ValidationResult(True, None, node_errors, good)
