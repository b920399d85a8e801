"""`io.PriceBadge` / `io.PriceBadgeDepends` (comfy_api/latest/_io.py @58a8a96c, Comfy-Org/ComfyUI,
read for behaviour): a partner node's cost, which the editor evaluates itself and shows on the
node. `Schema(price_badge=...)` is rendered as the node entry's `price_badge`:
`{"engine": "jsonata", "depends_on": {"widgets": [{"name", "type"}], "inputs": [...],
"input_groups": [...]}, "expr": "..."}`, each widget named with its io type (a dynamic input's
inputs as `parent.child`, the editor's spelling). Nothing here runs the expression.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from compat.v3.io import SchemaError

ENGINES = ("jsonata",)


def _names(what: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(f"PriceBadgeDepends.{what} must be a list of strings, got {value!r}")
    return value


def _nested(item: Any) -> list[tuple[str, Any]]:
    """`(id, io type)` of the inputs a dynamic input holds (ComfyUI's `get_all()[1:]`)."""
    if hasattr(item, "options") and isinstance(getattr(item, "options"), list):  # DynamicCombo.Input
        return [(i.id, i.get_io_type()) for option in item.options for i in option.inputs]
    template = getattr(item, "template", None)
    if template is not None and hasattr(template, "names"):  # Autogrow.Input
        return [(name, template.input.get_io_type()) for name in template.names]
    if hasattr(item, "slot"):  # DynamicSlot.Input
        return [(i.id, i.get_io_type()) for i in item.inputs]
    return []


@dataclass
class PriceBadgeDepends:
    widgets: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    input_groups: list = field(default_factory=list)

    def validate(self) -> None:
        for what in ("widgets", "inputs", "input_groups"):
            _names(what, getattr(self, what))

    def as_dict(self, schema_inputs: Iterable[Any]) -> dict:
        types: dict[str, Any] = {}
        for item in schema_inputs:
            types[item.id] = item.get_io_type()
            for child, io_type in _nested(item):
                types[f"{item.id}.{child}"] = io_type
        unknown = [w for w in self.widgets if w not in types]
        if unknown:
            raise SchemaError(f"PriceBadge depends_on.widgets names unknown widgets {unknown}; known: {list(types)}")
        return {"widgets": [{"name": w, "type": types[w]} for w in self.widgets], "inputs": list(self.inputs),
                "input_groups": list(self.input_groups)}


@dataclass
class PriceBadge:
    expr: str
    depends_on: PriceBadgeDepends = field(default_factory=PriceBadgeDepends)
    engine: str = "jsonata"

    def validate(self) -> None:
        if self.engine not in ENGINES:
            raise SchemaError(f"PriceBadge.engine must be one of {ENGINES}, got {self.engine!r}")
        if not isinstance(self.expr, str) or not self.expr.strip():
            raise SchemaError("PriceBadge.expr must be a non-empty string")
        if not isinstance(self.depends_on, PriceBadgeDepends):
            raise SchemaError(f"PriceBadge.depends_on must be a PriceBadgeDepends, got {self.depends_on!r}")
        self.depends_on.validate()

    def as_dict(self, schema_inputs: Iterable[Any]) -> dict:
        self.validate()
        return {"engine": self.engine, "depends_on": self.depends_on.as_dict(schema_inputs), "expr": self.expr}
