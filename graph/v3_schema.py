"""Built-in nodes declared in the shape of ComfyUI's V3 schema (`comfy_api/latest/_io.py`,
read for its `/object_info` rendering, not copied): the dynamic inputs of the 2026 node set and
their `/object_info` entries exactly as today's ComfyUI renders a V3 node.

    @v3_node("ComfySwitchNode", display_name="If/Else Switch", category="utilities/logic",
             inputs=[Boolean("switch"), MatchType("on_false", "switch", lazy=True, optional=True), ...],
             outputs=[MatchTypeOutput("switch", "output")])
    def switch(switch, on_false=MISSING, on_true=MISSING): ...

What the engine sees is an ordinary native `NodeSpec` (graph/native.py); what this module adds:

* V3 option spelling: the input helpers here state the options V3's `as_dict()` states (a STRING
  always says `multiline`, a combo is `["COMBO", {"multiselect": false, "options": [...]}]`,
  hidden inputs are `[kind]`), and the node entry carries every field of V3's `NodeInfoV1`
  (`search_aliases`, `output_matchtypes`, `essentials_category`, `has_intermediate_output`, ...).
* `MatchType`: the socket type is `COMFY_MATCHTYPE_V3`, which links of any type may feed and
  which may feed any input (graph/types.py: ComfyUI leaves that check to the editor); the options
  name the template (`{"template_id", "allowed_types"}`) and the outputs name it in
  `output_matchtypes`.
* Growing (`Autogrow`) and dynamic-combo (`DynamicCombo`) inputs are one entry in `/object_info`
  and many inputs in a prompt: the editor sends `values.a`, `values.b`, `resize_type.width`, ...
  Here each group declares those inputs flat for the validator (the first `min` of a growing
  group required, a combo's sub-inputs optional: which are needed depends on the choice, checked
  when the node runs), and the function receives them nested as ComfyUI's `build_nested_inputs`
  does: `values={"a": 1, "b": 2}`, `resize_type={"resize_type": "scale by multiplier",
  "multiplier": 2.0}`. Of the sub-inputs that two options of a combo share (same name), the first
  declaration is the one validated (ResizeImageMaskNode's options share those names with equal
  ranges); a combo shared with different choices (SaveImageAdvanced's `bit_depth`) is validated
  against the union of its options' choices, and against the chosen option's when the node runs.
  A dynamic combo may hold another in one of its options (SaveImageAdvanced's `format` ->
  `save_mode`): `format.save_mode.fps` in the prompt, `format={..., "save_mode": {...}}` in the call.
* A repeating row group (`DynamicGroup`, V3's `_DynamicGroup`: LoadLoraModel's `loras`) is one
  entry in `/object_info` and `<group>.<row>.<field>` inputs in a prompt (`loras.0.lora_name`);
  the function receives a list of row dicts as ComfyUI's `execute` does.
* `input_is_list` (V3's `is_input_list`): the function receives every input as the list of values
  the links carry (CreateList, GetItemFromList); `hidden` adds V3's hidden inputs by name
  (`("unique_id", "UNIQUE_ID")`); `dev_only` marks the helper nodes the editor does not offer.
* V3's `accept_all_inputs`: the node also receives the constant prompt inputs it does not
  declare (CustomCombo's editor-made widgets), read from the prompt through hidden inputs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from graph.native import node
from graph.spec import HIDDEN, OPTIONAL, REQUIRED, InputSpec, OutputSpec

MATCHTYPE = "COMFY_MATCHTYPE_V3"
AUTOGROW = "COMFY_AUTOGROW_V3"
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
DYNAMIC_SLOT = "COMFY_DYNAMICSLOT_V3"
DYNAMIC_GROUP = "COMFY_DYNAMICGROUP_V3"
DYNAMIC_GROUP_MAX_ROWS = 20  # V3's `_DynamicGroup._MaxRows`


class DynamicInputError(ValueError):
    """A dynamic input's values do not fit its declaration (names the input)."""


def _section(optional: bool) -> str:
    return OPTIONAL if optional else REQUIRED


def _pruned(**values: Any) -> dict:
    return {k: v for k, v in values.items() if v is not None}


# -- plain inputs, in V3's option spelling ---------------------------------------------------------

def Int(name: str, *, default: int | None = None, min: int | None = None, max: int | None = None,  # noqa: A002
        step: int | None = None, tooltip: str | None = None, optional: bool = False,
        control_after_generate: bool | None = None, advanced: bool | None = None, **extra: Any) -> InputSpec:
    return InputSpec(name, "INT", _section(optional), _pruned(
        tooltip=tooltip, advanced=advanced, default=default, min=min, max=max, step=step,
        control_after_generate=control_after_generate, **extra))


def Float(name: str, *, default: float | None = None, min: float | None = None, max: float | None = None,  # noqa: A002
          step: float | None = None, round: float | bool | None = None, tooltip: str | None = None,  # noqa: A002
          optional: bool = False, advanced: bool | None = None, **extra: Any) -> InputSpec:
    return InputSpec(name, "FLOAT", _section(optional), _pruned(
        tooltip=tooltip, advanced=advanced, default=default, min=min, max=max, step=step, round=round, **extra))


def String(name: str, *, default: str | None = None, multiline: bool = False, placeholder: str | None = None,
           tooltip: str | None = None, optional: bool = False, **extra: Any) -> InputSpec:
    return InputSpec(name, "STRING", _section(optional), _pruned(
        tooltip=tooltip, default=default, multiline=multiline, placeholder=placeholder, **extra))


def Boolean(name: str, *, default: bool | None = None, tooltip: str | None = None, optional: bool = False,
            **extra: Any) -> InputSpec:
    return InputSpec(name, "BOOLEAN", _section(optional), _pruned(tooltip=tooltip, default=default, **extra))


def Combo(name: str, options: Sequence[Any], *, default: Any = None, tooltip: str | None = None,
          optional: bool = False, **extra: Any) -> InputSpec:
    """A V3 combo: rendered `["COMBO", {..., "multiselect": false, "options": [...]}]`."""
    return InputSpec(name, list(options), _section(optional), _pruned(
        tooltip=tooltip, default=default, multiselect=False, **extra))


def Socket(name: str, type_: str, *, tooltip: str | None = None, optional: bool = False, lazy: bool | None = None,
           **extra: Any) -> InputSpec:
    """A linked input of a wire type (IMAGE, MASK, or a union `IMAGE,MASK` as V3's MultiType)."""
    return InputSpec(name, type_, _section(optional), _pruned(tooltip=tooltip, lazy=lazy, **extra))


@dataclass(frozen=True)
class FrontendWidget(InputSpec):
    """A widget the editor draws and fills itself (IMAGECOMPARE, RESOLUTION_PREVIEW, ...): rendered
    in its declared section, validated as optional (its value, if sent, means nothing here)."""


def Widget(name: str, type_: str, *, tooltip: str | None = None, optional: bool = False, **extra: Any) -> InputSpec:
    """A frontend-only widget (see `FrontendWidget`), V3's `socketless` ones."""
    return FrontendWidget(name, type_, _section(optional), _pruned(tooltip=tooltip, socketless=True, **extra))


def MatchType(name: str, template_id: str, allowed_types: Sequence[str] = ("*",), *, tooltip: str | None = None,
              optional: bool = False, lazy: bool | None = None) -> InputSpec:
    return InputSpec(name, MATCHTYPE, _section(optional), _pruned(
        tooltip=tooltip, lazy=lazy,
        template={"template_id": template_id, "allowed_types": ",".join(allowed_types)}))


# -- outputs ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class V3Output:
    type: str
    name: str | None = None
    tooltip: str | None = None
    is_list: bool = False
    matchtype: str | None = None  # the MatchType template id

    def spec(self) -> OutputSpec:
        return OutputSpec(self.type, self.name or self.type, self.is_list, self.tooltip)


def Output(type_: str, name: str | None = None, *, tooltip: str | None = None, is_list: bool = False) -> V3Output:
    """An output; its name is `name` or, as V3's, the wire type."""
    return V3Output(type_, name, tooltip, is_list)


def MatchTypeOutput(template_id: str, name: str | None = None, *, tooltip: str | None = None,
                    is_list: bool = False) -> V3Output:
    """An output of the type linked to its template's inputs (named "MATCHTYPE" when unnamed)."""
    return V3Output(MATCHTYPE, name or "MATCHTYPE", tooltip, is_list, template_id)


# -- dynamic inputs --------------------------------------------------------------------------------

def _entry(spec: InputSpec, env: Any = None) -> list:
    """One input's V3 rendering: `[type, options]` (options always present), combos as COMBO."""
    options = {k: v for k, v in spec.options.items()}
    if spec.is_combo:
        return ["COMBO", {**options, "options": spec.combo_values(env)}]
    return [spec.type, options]


def _input_dict(specs: Iterable[InputSpec], env: Any = None) -> dict:
    """V3's `create_input_dict_v1`: `{"required": {...}}`, plus `"optional"` when there are any."""
    rendered: dict[str, dict] = {REQUIRED: {}}
    for spec in specs:
        rendered.setdefault(spec.section, {})[spec.name] = _entry(spec, env)
    return rendered


@dataclass(frozen=True)
class Autogrow:
    """A growing input group: the editor adds a socket each time the last one is linked.

    `names` (V3's TemplateNames) or `prefix` + `max` (TemplatePrefix: prefix0, prefix1, ...); the
    first `min` are required when the template input is."""

    name: str
    template: InputSpec
    names: tuple[str, ...] = ()
    prefix: str | None = None
    min: int = 1
    max: int = 10
    tooltip: str | None = None
    optional: bool = False

    def item_names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(self.max)] if self.prefix is not None else list(self.names)

    def flat(self) -> list[InputSpec]:
        template_required = self.template.section == REQUIRED and not self.optional
        options = dict(self.template.options)
        return [InputSpec(f"{self.name}.{item}", self.template.type,
                          REQUIRED if i < self.min and template_required else OPTIONAL, options)
                for i, item in enumerate(self.item_names())]

    def render(self, env: Any = None) -> tuple[str, list]:
        template = {"input": _input_dict([self.template], env)}
        if self.prefix is not None:
            template.update(prefix=self.prefix, min=self.min, max=self.max)
        else:
            template.update(names=list(self.names), min=self.min)
        return _section(self.optional), [AUTOGROW, {**_pruned(tooltip=self.tooltip), "template": template}]

    def nest(self, flat: dict[str, Any], listed: bool = False) -> dict[str, Any]:
        """The group's value: item name -> value, for the items the prompt gives (each value the
        list an `input_is_list` node receives, when `listed`)."""
        return {item: flat.pop(f"{self.name}.{item}") for item in self.item_names() if f"{self.name}.{item}" in flat}


@dataclass(frozen=True)
class DynamicGroup:
    """Rows of the `fields` widgets (V3's `_DynamicGroup`, rendering and `_expand_schema_for_dynamic`
    of today's ComfyUI comfy_api/latest/_io.py @04e2a914334246661a77665aa14068a0670e3321).

    `/object_info` shows `["COMFY_DYNAMICGROUP_V3", {"tooltip", "template": {"required": {...}},
    "min", "max", "group_name"}]`; the editor sends each row's widgets as `<group>.<row>.<field>`.
    The function receives a list of row dicts up to the highest row sent: a row not sent (a gap) a
    dict of None, a field a sent row lacks None (no defaults filled in), `[]` when no row was sent.
    The rows sent must number `min..max` and a sent row must carry the template's required fields
    (errors name the group). Every field is declared optional for the prompt validator (which
    checks each sent value against its field: combo choices, ranges); the row rules are checked
    when the node runs."""

    name: str
    fields: tuple[InputSpec, ...]
    min: int = 1
    max: int = DYNAMIC_GROUP_MAX_ROWS
    tooltip: str | None = None
    optional: bool = False
    group_name: str = "Group"

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError("DynamicGroup template must have at least one field.")
        if not 1 <= self.max <= DYNAMIC_GROUP_MAX_ROWS or not 0 <= self.min <= self.max:
            raise ValueError(f"DynamicGroup {self.name!r}: needs 0 <= min <= max <= {DYNAMIC_GROUP_MAX_ROWS}")

    def flat(self) -> list[InputSpec]:
        return [InputSpec(f"{self.name}.{row}.{spec.name}", spec.type, OPTIONAL, dict(spec.options))
                for row in range(self.max) for spec in self.fields]

    def render(self, env: Any = None) -> tuple[str, list]:
        return _section(self.optional), [DYNAMIC_GROUP, {
            **_pruned(tooltip=self.tooltip), "template": _input_dict(self.fields, env), "min": self.min,
            "max": self.max, "group_name": self.group_name}]

    def nest(self, flat: dict[str, Any], listed: bool = False) -> list[dict[str, Any]]:
        prefix = f"{self.name}."
        names = {spec.name for spec in self.fields}
        sent: dict[int, dict[str, Any]] = {}
        for key in [k for k in flat if k.startswith(prefix)]:
            row, _, field = key[len(prefix):].partition(".")
            if not row.isdecimal() or (len(row) > 1 and row.startswith("0")) or field not in names:
                raise DynamicInputError(f"input {key!r}: not '{self.name}.<row>.<field>' of this group")
            sent.setdefault(int(row), {})[field] = flat.pop(key)
        if not self.min <= len(sent) <= self.max:
            raise DynamicInputError(f"input {self.name!r}: {len(sent)} rows sent, expected {self.min} to {self.max}")
        empty = [None] if listed else None
        rows = []
        for row in range(max(sent, default=-1) + 1):
            given = sent.get(row)
            if given is not None:
                missing = [s.name for s in self.fields if s.section == REQUIRED and s.name not in given]
                if missing:
                    raise DynamicInputError(f"input {self.name!r}: row {row} lacks {missing}")
            rows.append({spec.name: (given or {}).get(spec.name, empty) for spec in self.fields})
        return rows



@dataclass(frozen=True)
class ComboOption:
    key: str
    inputs: tuple[Any, ...] = ()  # InputSpecs, or a DynamicCombo nested in this option


@dataclass(frozen=True)
class DynamicCombo:
    """A combo whose choice brings its own inputs (`resize_type` -> `resize_type.width`, ...).

    An option may hold another `DynamicCombo` (SaveImageAdvanced's `format` "avif" ->
    `save_mode`): its inputs are named under both (`format.save_mode`, `format.save_mode.fps`) and
    its value nests inside the outer one's, as ComfyUI's `build_nested_inputs` does."""

    name: str
    options: tuple[ComboOption, ...]
    tooltip: str | None = None
    optional: bool = False
    display_name: str | None = None

    def keys(self) -> list[str]:
        return [o.key for o in self.options]

    def flat(self) -> list[InputSpec]:
        found: dict[str, InputSpec] = {}
        for option in self.options:
            for spec in option.inputs:
                if isinstance(spec, DynamicCombo):
                    for inner in spec.flat():
                        found.setdefault(inner.name, InputSpec(f"{self.name}.{inner.name}", inner.type, OPTIONAL,
                                                               inner.options))
                    continue
                known = found.get(spec.name)
                if known is None:
                    found[spec.name] = InputSpec(f"{self.name}.{spec.name}", spec.type, OPTIONAL, spec.options)
                elif isinstance(known.type, list) and isinstance(spec.type, list):  # a combo in several options
                    merged = known.type + [v for v in spec.type if v not in known.type]
                    found[spec.name] = dataclasses.replace(known, type=merged)
        combo = InputSpec(self.name, self.keys(), _section(self.optional), _pruned(tooltip=self.tooltip))
        return [combo, *found.values()]

    def render(self, env: Any = None) -> tuple[str, list]:
        return _section(self.optional), [DYNAMIC_COMBO, {
            **_pruned(display_name=self.display_name, tooltip=self.tooltip),
            "options": [{"key": o.key, "inputs": _option_dict(o.inputs, env)} for o in self.options]}]

    def nest(self, flat: dict[str, Any], listed: bool = False) -> dict[str, Any]:
        """`{name: chosen key, <sub-input>: value, ...}` for the chosen option; a required
        sub-input of that option that the prompt lacks is an error naming it. For an
        `input_is_list` node (`listed`) every value, the key included, stays the list the node
        receives (ComfyUI's StartLoop reads `mode["mode"][0]`); the first element chooses."""
        key = flat.pop(self.name, None)
        chosen = key[0] if listed and isinstance(key, list) and key else key
        prefix = f"{self.name}."
        given = {name[len(prefix):]: flat.pop(name) for name in list(flat) if name.startswith(prefix)}
        option = next((o for o in self.options if o.key == chosen), None)
        if option is None:
            raise DynamicInputError(f"input {self.name!r}: {chosen!r} is not one of {self.keys()}")
        value: dict[str, Any] = {self.name: key}
        for spec in option.inputs:
            if isinstance(spec, DynamicCombo):
                try:
                    value[spec.name] = spec.nest(given, listed)
                except DynamicInputError as exc:
                    raise DynamicInputError(f"{exc} (in {self.name!r} = {chosen!r})") from exc
            elif spec.name in given:
                picked = given[spec.name]
                if isinstance(spec.type, list) and any(v not in spec.type for v in (picked if listed else [picked])):
                    raise DynamicInputError(f"input {prefix + spec.name!r}: {picked!r} is not one of "
                                            f"{spec.type} when {self.name!r} is {chosen!r}")
                value[spec.name] = given[spec.name]
            elif spec.section == REQUIRED:
                raise DynamicInputError(f"input {prefix + spec.name!r} is required when {self.name!r} is {chosen!r}")
        return value


_GROUPS = (Autogrow, DynamicCombo, DynamicGroup)  # inputs a prompt sends as several, nested for the call


@dataclass(frozen=True)
class DynamicSlot:
    """A socket whose link brings more inputs (V3's `DynamicSlot`): the editor shows `inputs`
    (named `<name>.<input>` in a prompt) once `slot` is linked. The group is always optional;
    its sub-inputs are declared optional here (they count only when the slot is linked; a
    required one is checked when the node runs). Only pack nodes use it (compat/v3/dynamic.py
    nests the values as ComfyUI does)."""

    name: str
    slot: InputSpec  # the socket: its wire type and options
    inputs: tuple[InputSpec, ...] = ()
    tooltip: str | None = None
    display_name: str | None = None
    force_input: bool | None = None  # a widget type as the slot: a socket only, as in V3

    def flat(self) -> list[InputSpec]:
        return [InputSpec(self.name, self.slot.type, OPTIONAL, self.slot.options),
                *(InputSpec(f"{self.name}.{spec.name}", spec.type, OPTIONAL, spec.options) for spec in self.inputs)]

    def render(self, env: Any = None) -> tuple[str, list]:
        return OPTIONAL, [DYNAMIC_SLOT, {
            **_pruned(display_name=self.display_name, tooltip=self.tooltip), "slotType": str(self.slot.type),
            "inputs": _input_dict(self.inputs, env), **_pruned(forceInput=self.force_input)}]


def _option_dict(inputs: Iterable[Any], env: Any = None) -> dict:
    """One dynamic-combo option's inputs as V3's `create_input_dict_v1` renders them (a nested
    dynamic combo as its own entry)."""
    rendered: dict[str, dict] = {REQUIRED: {}}
    for spec in inputs:
        if isinstance(spec, DynamicCombo):
            section, entry = spec.render(env)
            rendered.setdefault(section, {})[spec.name] = entry
        else:
            rendered.setdefault(spec.section, {})[spec.name] = _entry(spec, env)
    return rendered


_ALL_PROMPT = "__v3_all_inputs_prompt"
_ALL_ID = "__v3_all_inputs_id"


def _undeclared_constants(prompt: Any, unique_id: Any, declared: Sequence[InputSpec]) -> dict[str, Any]:
    """V3's `accept_all_inputs`: the node's constant prompt inputs that it does not declare."""
    inputs = ((prompt or {}).get(unique_id) or {}).get("inputs") or {} if isinstance(prompt, dict) else {}
    names = {spec.name for spec in declared}
    return {k: v for k, v in inputs.items() if k not in names and not isinstance(v, list)}


# -- the decorator ---------------------------------------------------------------------------------

def v3_node(node_id: str, *, inputs: Sequence[Any] = (), outputs: Sequence[V3Output] = (),
            category: str = "sd", display_name: str | None = None, description: str = "",
            python_module: str = "nodes", search_aliases: Sequence[str] = (),
            essentials_category: str | None = None, has_intermediate_output: bool = False,
            output_node: bool = False, experimental: bool = False, deprecated: bool = False,
            not_idempotent: bool = False, accept_all_inputs: bool = False,
            input_is_list: bool = False, hidden: Sequence[tuple[str, str]] = (), dev_only: bool = False,
            check_lazy_status: Callable[..., Any] | None = None,
            validate_inputs: Callable[..., Any] | None = None,
            is_changed: Callable[..., Any] | None = None) -> Callable[[Callable], Callable]:
    """Declare `fn` as a native node rendered as today's ComfyUI renders the V3 node `node_id`.

    `inputs` holds plain `InputSpec`s (the helpers above) and `Autogrow` / `DynamicCombo` / `DynamicGroup` groups;
    `fn` receives each group nested under the group's name. An output node gets V3's hidden
    `prompt` and `extra_pnginfo` (its function takes them, or `**kwargs`)."""
    inputs = tuple(inputs)
    groups = [i for i in inputs if isinstance(i, _GROUPS)]
    flat: list[InputSpec] = []
    for declared in inputs:
        if isinstance(declared, _GROUPS):
            flat.extend(declared.flat())
        elif isinstance(declared, FrontendWidget):
            flat.append(InputSpec(declared.name, declared.type, OPTIONAL, declared.options))
        else:
            flat.append(declared)
    hidden = tuple(hidden)
    flat += [InputSpec(name, kind, HIDDEN) for name, kind in hidden]
    if output_node:
        flat += [InputSpec("prompt", "PROMPT", HIDDEN), InputSpec("extra_pnginfo", "EXTRA_PNGINFO", HIDDEN)]
    if accept_all_inputs:  # the node's other prompt inputs are read from the prompt (not rendered)
        flat += [InputSpec(_ALL_PROMPT, "PROMPT", HIDDEN), InputSpec(_ALL_ID, "UNIQUE_ID", HIDDEN)]
    outputs = tuple(outputs)

    def decorate(fn: Callable) -> Callable:
        def nested(kwargs: dict) -> dict:
            kwargs = dict(kwargs)
            if accept_all_inputs:
                kwargs = {**_undeclared_constants(kwargs.pop(_ALL_PROMPT, None), kwargs.pop(_ALL_ID, None), flat),
                          **kwargs}
            for group in groups:
                kwargs[group.name] = group.nest(kwargs, input_is_list)
            return kwargs

        def call(**kwargs: Any) -> Any:
            return fn(**nested(kwargs))

        lazy = (lambda **kw: check_lazy_status(**nested(kw))) if check_lazy_status is not None else None
        node(node_id, inputs=flat, outputs=[o.spec() for o in outputs], category=category,
             display_name=display_name, description=description, output_node=output_node,
             not_idempotent=not_idempotent, deprecated=deprecated, experimental=experimental,
             input_is_list=input_is_list, python_module=python_module, is_changed=is_changed,
             validate_inputs=validate_inputs, check_lazy_status=lazy)(call)
        spec = dataclasses.replace(call.__node_spec__, source=fn, render_info=render)
        fn.__node_spec__ = spec
        return fn

    def render(env: Any) -> dict:
        rendered: dict[str, dict] = {REQUIRED: {}}
        for declared in inputs:
            if isinstance(declared, _GROUPS):
                section, entry = declared.render(env)
                rendered.setdefault(section, {})[declared.name] = entry
            else:
                rendered.setdefault(declared.section, {})[declared.name] = _entry(declared, env)
        for name, kind in hidden:
            rendered.setdefault(HIDDEN, {})[name] = [kind]
        if output_node:
            rendered.setdefault(HIDDEN, {}).update(prompt=["PROMPT"], extra_pnginfo=["EXTRA_PNGINFO"])
        matchtypes = [o.matchtype for o in outputs]
        return {
            "input": rendered,
            "input_order": {section: list(entries) for section, entries in rendered.items()},
            "is_input_list": input_is_list,
            "output_tooltips": [o.tooltip for o in outputs],
            "output_matchtypes": matchtypes if any(m is not None for m in matchtypes) else None,
            "deprecated": deprecated,
            "experimental": experimental,
            "dev_only": dev_only,
            "api_node": False,
            "price_badge": None,
            "search_aliases": list(search_aliases) or None,
            "essentials_category": essentials_category,
            "has_intermediate_output": has_intermediate_output,
        }

    return decorate
