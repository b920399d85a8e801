"""ComfyUI's dynamic V3 inputs for packs' `io.ComfyNode`s (comfy_api/latest/_io.py @58a8a96c,
Comfy-Org/ComfyUI, read for behaviour): `io.MatchType`, `io.Autogrow`, `io.DynamicCombo`,
`io.DynamicSlot`.

Declaration: these classes keep ComfyUI's constructors and checks. Each dynamic input becomes the
group object of graph/v3_schema.py (`Autogrow`, `DynamicCombo`, `DynamicSlot`), the one renderer
and flattener the built-in V3-style nodes use: `/object_info` shows ComfyUI's single entry
(`["COMFY_AUTOGROW_V3", {"template": {...}}]`, `["COMFY_DYNAMICCOMBO_V3", {"options": [...]}]`,
`["COMFY_DYNAMICSLOT_V3", {"slotType": ..., "inputs": {...}}]`) and the prompt validator sees
the flat inputs the editor sends (`values.a`, `mode.width`, `image.strength`).

Execution (`nest`): the node's `execute` receives what ComfyUI's `build_nested_inputs` makes of
the flat inputs:

* Autogrow `values`: `{item: value}` for the items the prompt gives; `{}` when it gives none.
* DynamicCombo `mode`: `{"mode": chosen key, <sub-input>: value, ...}` over every input of the
  chosen option (one the prompt lacks is None; a lacking required one is an error naming it); a
  combo nested in an option is a dict inside it (`format={"format": "webp", "save_mode":
  {"save_mode": ..., ...}}`), present when the prompt gives its key. Inputs of other options
  are dropped.
* DynamicSlot `image`: absent when the slot is not linked; else `{"image": value, <sub-input>:
  value or None, ...}` (a lacking required sub-input is an error naming it).
* In `check_lazy_status` only, each value is ComfyUI's `(value, flat name)` pair (an empty
  Autogrow is `({}, "values")`), so the node can name the flat input it wants evaluated.

MatchType: the socket type is `COMFY_MATCHTYPE_V3` on both sides (links of any type, checked by
the editor, graph/types.py), the input's options carry `template`, and the node entry lists each
output's template id in `output_matchtypes`. ComfyUI 0.3.64 declared `MatchType.Output(id,
template)`; later ComfyUI `Output(template, id=None, ...)`; both orders are accepted.

Not here yet: a dynamic input inside a DynamicCombo option (other than a DynamicCombo) or inside
a DynamicSlot (the group renderer does not nest those): `SchemaError` when declared.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Sequence

from compat.v3.io import AnyType, ComfyType, Input, Output, SchemaError, WidgetInput, input_spec_of
from graph import v3_schema
from graph.spec import REQUIRED
from graph.v3_schema import DynamicInputError

__all__ = ["Autogrow", "DynamicCombo", "DynamicInput", "DynamicInputError", "DynamicSlot", "MatchType", "group_of",
           "nest"]


class DynamicInput(Input):
    """A V3 input that stands for several inputs in a prompt (ComfyUI's abstract `DynamicInput`)."""

    def group(self, node_id: str) -> Any:
        raise NotImplementedError


def _wire_name(item: Any) -> str:
    if isinstance(item, str):
        return item
    name = getattr(item, "io_type", None)
    if not isinstance(name, str):
        raise SchemaError(f"MatchType.Template: allowed types must be io types (io.Image, ...), got {item!r}")
    return name


# -- MatchType ----------------------------------------------------------------------------------
class MatchType(ComfyType):
    """See the module docstring."""

    io_type = v3_schema.MATCHTYPE

    class Template:
        def __init__(self, template_id: str, allowed_types: Any = AnyType) -> None:
            if not isinstance(template_id, str) or not template_id:
                raise SchemaError(f"MatchType.Template: template_id must be a non-empty string, got {template_id!r}")
            listed = allowed_types if isinstance(allowed_types, (list, tuple)) else [allowed_types]
            self.template_id = template_id
            self.allowed_types = list(listed)
            self._wire = [_wire_name(t) for t in self.allowed_types]

        def as_dict(self) -> dict:
            return {"template_id": self.template_id, "allowed_types": ",".join(self._wire)}

    class Input(Input):
        io_type = v3_schema.MATCHTYPE

        def __init__(self, id: str, template: "MatchType.Template", display_name: str | None = None,  # noqa: A002
                     optional: bool = False, tooltip: str | None = None, lazy: bool | None = None,
                     extra_dict: dict | None = None, raw_link: bool | None = None,
                     advanced: bool | None = None) -> None:
            if not isinstance(template, MatchType.Template):
                raise SchemaError(f"MatchType.Input {id!r}: template must be a MatchType.Template, got {template!r}")
            super().__init__(id, display_name, optional, tooltip, lazy, extra_dict, raw_link, advanced)
            self.template = template
            self.extra["template"] = template.as_dict()

    class Output(Output):
        io_type = v3_schema.MATCHTYPE

        def __init__(self, template: Any = None, id: Any = None, display_name: str | None = None,  # noqa: A002
                     tooltip: str | None = None, is_output_list: bool = False) -> None:
            if isinstance(template, str) and isinstance(id, MatchType.Template):  # ComfyUI 0.3.64's order
                template, id = id, template
            if not isinstance(template, MatchType.Template):
                raise SchemaError(f"MatchType.Output: template must be a MatchType.Template, got {template!r}")
            if not id and not display_name:
                display_name = "MATCHTYPE"
            super().__init__(id, display_name, tooltip, is_output_list)
            self.template = template


# -- Autogrow -------------------------------------------------------------------------------------
class Autogrow(ComfyType):
    """A socket that grows: the editor adds the next one when the last is linked."""

    io_type = v3_schema.AUTOGROW
    MAX_NAMES = 100  # ComfyUI's sanity limit

    class _Template:
        def __init__(self, input: Input) -> None:  # noqa: A002 -- ComfyUI's name
            if not isinstance(input, Input) or isinstance(input, DynamicInput):
                raise SchemaError(f"Autogrow template: expected a plain io input, got {input!r}")
            self.input = copy.copy(input)
            self.input.extra = dict(input.extra)
            if isinstance(self.input, WidgetInput):
                self.input.extra["forceInput"] = True  # grown inputs are sockets, as in ComfyUI
            self.names: list[str] = []
            self.min = 1
            self.prefix: str | None = None
            self.max = 0

    class TemplatePrefix(_Template):
        def __init__(self, input: Input, prefix: str, min: int = 1, max: int = 10) -> None:  # noqa: A002
            super().__init__(input)
            if not isinstance(prefix, str):
                raise SchemaError(f"Autogrow.TemplatePrefix: prefix must be a string, got {prefix!r}")
            if not (isinstance(min, int) and min >= 0 and isinstance(max, int) and 1 <= max <= Autogrow.MAX_NAMES):
                raise SchemaError(f"Autogrow.TemplatePrefix: need 0 <= min and 1 <= max <= {Autogrow.MAX_NAMES}, "
                                  f"got min={min!r} max={max!r}")
            self.prefix, self.min, self.max = prefix, min, max
            self.names = [f"{prefix}{i}" for i in range(max)]

    class TemplateNames(_Template):
        def __init__(self, input: Input, names: Sequence[str], min: int = 1) -> None:  # noqa: A002
            super().__init__(input)
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                raise SchemaError(f"Autogrow.TemplateNames: names must be a list of non-empty strings, got {names!r}")
            if not (isinstance(min, int) and min >= 0):
                raise SchemaError(f"Autogrow.TemplateNames: min must be an int >= 0, got {min!r}")
            self.names = list(names)[:Autogrow.MAX_NAMES]
            self.min = min

    class Input(DynamicInput):
        io_type = v3_schema.AUTOGROW

        def __init__(self, id: str, template: "Autogrow._Template", display_name: str | None = None,  # noqa: A002
                     optional: bool = False, tooltip: str | None = None, lazy: bool | None = None,
                     extra_dict: dict | None = None) -> None:
            if not isinstance(template, Autogrow._Template):
                raise SchemaError(f"Autogrow.Input {id!r}: template must be Autogrow.TemplatePrefix or "
                                  f"Autogrow.TemplateNames, got {template!r}")
            super().__init__(id, display_name, optional, tooltip, lazy, extra_dict)
            self.template = template

        def group(self, node_id: str) -> v3_schema.Autogrow:
            t = self.template
            spec = input_spec_of(node_id, t.input)
            if t.prefix is not None:
                return v3_schema.Autogrow(self.id, spec, prefix=t.prefix, min=t.min, max=t.max,
                                          tooltip=self.extra.get("tooltip"), optional=self.optional)
            return v3_schema.Autogrow(self.id, spec, names=tuple(t.names), min=t.min,
                                      tooltip=self.extra.get("tooltip"), optional=self.optional)


# -- DynamicCombo ---------------------------------------------------------------------------------
class DynamicCombo(ComfyType):
    """A combo whose chosen option brings its own inputs."""

    io_type = v3_schema.DYNAMIC_COMBO

    class Option:
        def __init__(self, key: str, inputs: Iterable[Input]) -> None:
            if not isinstance(key, str):
                raise SchemaError(f"DynamicCombo.Option: key must be a string, got {key!r}")
            inputs = list(inputs)
            for item in inputs:
                if not isinstance(item, Input):
                    raise SchemaError(f"DynamicCombo.Option {key!r}: inputs must be io inputs, got {item!r}")
                if isinstance(item, DynamicInput) and not isinstance(item, DynamicCombo.Input):
                    raise SchemaError(f"DynamicCombo.Option {key!r}: a {type(item).__qualname__} inside an option is "
                                      "not supported here (only plain inputs and nested DynamicCombo)")
            self.key = key
            self.inputs = inputs

    class Input(DynamicInput):
        io_type = v3_schema.DYNAMIC_COMBO

        def __init__(self, id: str, options: Sequence["DynamicCombo.Option"],  # noqa: A002
                     display_name: str | None = None, optional: bool = False, tooltip: str | None = None,
                     lazy: bool | None = None, extra_dict: dict | None = None) -> None:
            options = list(options or ())
            if not options or not all(isinstance(o, DynamicCombo.Option) for o in options):
                raise SchemaError(f"DynamicCombo.Input {id!r}: options must be a non-empty list of "
                                  f"DynamicCombo.Option, got {options!r}")
            keys = [o.key for o in options]
            if len(set(keys)) != len(keys):
                raise SchemaError(f"DynamicCombo.Input {id!r}: option keys must be unique, got {keys}")
            super().__init__(id, display_name, optional, tooltip, lazy, extra_dict)
            self.options = options

        def group(self, node_id: str) -> v3_schema.DynamicCombo:
            def member(item: Input) -> Any:
                return item.group(node_id) if isinstance(item, DynamicCombo.Input) else input_spec_of(node_id, item)

            return v3_schema.DynamicCombo(
                self.id, tuple(v3_schema.ComboOption(o.key, tuple(member(i) for i in o.inputs)) for o in self.options),
                tooltip=self.extra.get("tooltip"), optional=self.optional, display_name=self.display_name)


# -- DynamicSlot ----------------------------------------------------------------------------------
class DynamicSlot(ComfyType):
    """A socket whose link brings more inputs (shown once the slot is linked)."""

    io_type = v3_schema.DYNAMIC_SLOT

    class Input(DynamicInput):
        io_type = v3_schema.DYNAMIC_SLOT

        def __init__(self, slot: Input, inputs: Iterable[Input], display_name: str | None = None,
                     tooltip: str | None = None, lazy: bool | None = None, extra_dict: dict | None = None) -> None:
            if not isinstance(slot, Input) or isinstance(slot, DynamicInput):
                raise SchemaError(f"DynamicSlot.Input: the slot must be a plain io input, got {slot!r}")
            inputs = list(inputs or ())
            for item in inputs:
                if not isinstance(item, Input) or isinstance(item, DynamicInput):
                    raise SchemaError(f"DynamicSlot.Input {slot.id!r}: inputs must be plain io inputs (a dynamic "
                                      f"input inside a slot is not supported here), got {item!r}")
            self.slot = copy.copy(slot)
            self.slot.extra = dict(slot.extra)
            # the slot's own display name, tooltip and laziness win over the group's, as in ComfyUI
            display_name = slot.display_name if slot.display_name is not None else display_name
            tooltip = slot.extra.get("tooltip", tooltip)
            lazy = slot.extra.get("lazy", lazy)
            super().__init__(slot.id, display_name, True, tooltip, lazy, extra_dict)
            self.force_input = True if isinstance(slot, WidgetInput) else None
            if self.force_input:
                self.slot.extra["forceInput"] = True
            self.inputs = inputs

        def group(self, node_id: str) -> v3_schema.DynamicSlot:
            return v3_schema.DynamicSlot(self.id, input_spec_of(node_id, self.slot),
                                         tuple(input_spec_of(node_id, i) for i in self.inputs),
                                         tooltip=self.extra.get("tooltip"), display_name=self.display_name,
                                         force_input=self.force_input)


def group_of(node_id: str, item: DynamicInput) -> tuple[Any, dict]:
    """`(graph.v3_schema group, the input's own options)` of a dynamic input; the options (lazy,
    display_name, extra_dict...) join the group's rendered entry, as ComfyUI's `as_dict` has them."""
    return item.group(node_id), dict(item.extra)


def render_group(group: Any, own: dict, env: Any = None) -> tuple[str, list]:
    section, (kind, options) = group.render(env)
    return section, [kind, {**own, **options}]


# -- execution: ComfyUI's nesting -----------------------------------------------------------------
def _pair(value: Any, key: str, tuples: bool) -> Any:
    return (value, key) if tuples else value


def _nest_autogrow(group: v3_schema.Autogrow, flat: dict, tuples: bool) -> Any:
    out = {}
    for item in group.item_names():
        key = f"{group.name}.{item}"
        if key in flat:
            out[item] = _pair(flat.pop(key), key, tuples)
    return out if out else _pair({}, group.name, tuples)


def _nest_combo(group: v3_schema.DynamicCombo, flat: dict, key: str, tuples: bool, listed: bool,
                strict: bool) -> dict:
    raw = flat.pop(key)
    chosen = raw[0] if listed and isinstance(raw, list) and raw else raw
    option = next((o for o in group.options if o.key == chosen), None)
    if option is None:
        raise DynamicInputError(f"input {key!r}: {chosen!r} is not one of {group.keys()}")
    value: dict[str, Any] = {group.name: _pair(raw, key, tuples)}
    for spec in option.inputs:
        sub = f"{key}.{spec.name}"
        if isinstance(spec, v3_schema.DynamicCombo):
            if sub in flat:
                value[spec.name] = _nest_combo(spec, flat, sub, tuples, listed, strict)
            continue
        if sub not in flat:
            if spec.section == REQUIRED and strict:
                raise DynamicInputError(f"input {sub!r} is required when {key!r} is {chosen!r}")
            value[spec.name] = _pair(None, sub, tuples)
            continue
        given = flat.pop(sub)
        if spec.is_combo and given is not None:
            for v in (given if listed and isinstance(given, list) else [given]):
                if v not in spec.type:
                    raise DynamicInputError(f"input {sub!r}: {v!r} is not one of {spec.type} when {key!r} is "
                                            f"{chosen!r}")
        value[spec.name] = _pair(given, sub, tuples)
    return value


def _nest_slot(group: v3_schema.DynamicSlot, flat: dict, tuples: bool, strict: bool) -> dict:
    value: dict[str, Any] = {group.name: _pair(flat.pop(group.name), group.name, tuples)}
    for spec in group.inputs:
        key = f"{group.name}.{spec.name}"
        if key in flat:
            value[spec.name] = _pair(flat.pop(key), key, tuples)
        elif spec.section == REQUIRED and strict:
            raise DynamicInputError(f"input {key!r} is required when {group.name!r} is linked")
        else:
            value[spec.name] = _pair(None, key, tuples)
    return value


def nest(groups: Sequence[Any], kwargs: dict, *, tuples: bool = False, listed: bool = False,
         strict: bool = True) -> dict:
    """The node's keyword arguments with each group's flat inputs nested (module docstring);
    `tuples` for check_lazy_status, `listed` for an `is_input_list` node (values are lists).
    `strict` (the call itself): a required sub-input the prompt lacks is an error; before the
    call (lazy checks, fingerprints, validation: links not evaluated yet) it reads as None."""
    if not groups:
        return kwargs
    flat = dict(kwargs)
    nested: dict[str, Any] = {}
    for group in groups:
        if isinstance(group, v3_schema.Autogrow):
            nested[group.name] = _nest_autogrow(group, flat, tuples)
        elif isinstance(group, v3_schema.DynamicSlot):
            if group.name in flat:
                nested[group.name] = _nest_slot(group, flat, tuples, strict)
        elif group.name in flat:
            nested[group.name] = _nest_combo(group, flat, group.name, tuples, listed, strict)
        prefix = f"{group.name}."
        for name in [n for n in flat if n.startswith(prefix)]:
            del flat[name]  # inputs of options not chosen: not the node's now, as in ComfyUI
    flat.update(nested)
    return flat
