"""Per-class spec lookups of one prompt run, memoised (the executor asks for them per node)."""
from __future__ import annotations

from graph.registry import Registry
from graph.spec import InputSpec, NodeSpec


class SpecIndex:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._specs: dict[str, NodeSpec] = {}
        self._inputs: dict[str, dict[str, InputSpec]] = {}
        self._lazy: dict[str, frozenset[str]] = {}

    def spec(self, class_type: str) -> NodeSpec:
        spec = self._specs.get(class_type)
        if spec is None:
            spec = self._specs[class_type] = self._registry.get(class_type)
        return spec

    def inputs_of(self, class_type: str) -> dict[str, InputSpec]:
        """The class's current inputs by name."""
        specs = self._inputs.get(class_type)
        if specs is None:
            specs = self._inputs[class_type] = {s.name: s for s in self.spec(class_type).current_inputs()}
        return specs

    def lazy_inputs(self, class_type: str) -> frozenset[str]:
        """Names of the class's lazy inputs."""
        lazy = self._lazy.get(class_type)
        if lazy is None:
            lazy = self._lazy[class_type] = frozenset(s.name for s in self.inputs_of(class_type).values() if s.lazy)
        return lazy
