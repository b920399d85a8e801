"""The canonical, frozen description of a node type.

Every node, however it was declared (native decorator, ComfyUI V1 class, V3 schema), becomes one
`NodeSpec`. The validator, the executor and the `/object_info` renderer only ever see `NodeSpec`s;
none of them asks where a node came from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

REQUIRED = "required"
OPTIONAL = "optional"
HIDDEN = "hidden"
SECTIONS = (REQUIRED, OPTIONAL, HIDDEN)

# Hidden input kinds the executor fills in itself (ComfyUI's names).
HIDDEN_PROMPT = "PROMPT"
HIDDEN_DYNPROMPT = "DYNPROMPT"
HIDDEN_EXTRA_PNGINFO = "EXTRA_PNGINFO"
HIDDEN_UNIQUE_ID = "UNIQUE_ID"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping)) if mapping else _EMPTY


@dataclass(frozen=True)
class InputSpec:
    """One input socket or widget.

    `type` is a wire type string (`"INT"`, `"MODEL"`, `"IMAGE,MASK"`, `"*"`), a pack's type object
    (a `str` subclass that may override `__ne__`), or, for a combo, a list of allowed values or a
    callable `options(env) -> list` evaluated whenever the spec is rendered or validated (file
    lists change while the server runs).
    `options` holds ComfyUI's option dict as-is (`default`, `min`, `max`, `step`, `tooltip`,
    `lazy`, `rawLink`, `forceInput`, `multiline`, `image_upload`, ...).
    """

    name: str
    type: Any
    section: str = REQUIRED
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"input {self.name!r}: section must be one of {SECTIONS}, got {self.section!r}")
        object.__setattr__(self, "options", _frozen(self.options))

    @property
    def is_combo(self) -> bool:
        return isinstance(self.type, (list, tuple)) or callable(self.type) and not isinstance(self.type, str)

    @property
    def lazy(self) -> bool:
        return bool(self.options.get("lazy", False))

    @property
    def raw_link(self) -> bool:
        return bool(self.options.get("rawLink", False))

    def combo_values(self, env: Any = None) -> list:
        """The allowed values of a combo input, evaluated now."""
        if isinstance(self.type, (list, tuple)):
            return list(self.type)
        return list(self.type(env))


@dataclass(frozen=True)
class OutputSpec:
    type: Any
    name: str
    is_list: bool = False
    tooltip: str | None = None


@dataclass(frozen=True)
class NodeBehaviour:
    """How to run a node type; the adapters fill this in, the executor only calls it.

    `make_instance()` builds the per-(node id, class) object that is kept across prompts (for V1
    classes an instance, for native functions usually `None`). The callables below receive that
    instance first; any of them may return an awaitable.
    """

    make_instance: Callable[[], Any]
    call: Callable[..., Any]  # call(instance, **inputs) -> tuple | dict | ExecutionBlocker
    is_changed: Callable[..., Any] | None = None  # is_changed(**constant_inputs)
    validate_inputs: Callable[..., Any] | None = None  # validate_inputs(**named_inputs)
    # Which inputs VALIDATE_INPUTS names; `validate_takes_all` when it has **kwargs;
    # `validate_takes_input_types` when it has an `input_types` parameter.
    validate_params: frozenset[str] = frozenset()
    validate_takes_all: bool = False
    validate_takes_input_types: bool = False
    check_lazy_status: Callable[..., Any] | None = None  # check_lazy_status(instance, **inputs)
    is_coroutine: bool = False  # the main call is `async def` (scheduling prefers these)


@dataclass(frozen=True)
class NodeSpec:
    """One node type, as the engine sees it."""

    node_id: str  # the class_type used in workflows
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    behaviour: NodeBehaviour
    display_name: str = ""
    category: str = "sd"
    description: str = ""
    python_module: str = "nodes"
    output_node: bool = False
    input_is_list: bool = False
    not_idempotent: bool = False
    deprecated: bool = False
    experimental: bool = False
    api_node: bool = False
    # Where the node came from, for logs and /object_info only; never branched on.
    origin: str = "native"
    # The original declaration (V1 class, V3 class or function), for packs that introspect.
    source: Any = None
    # For declarations whose inputs may change while the server runs (V1 `INPUT_TYPES()` lists
    # files): returns the inputs as of now. The validator and executor read it once per prompt
    # and node type; `inputs` keeps the declaration-time snapshot.
    input_source: Callable[[], tuple[InputSpec, ...]] | None = None
    # Optional custom `/object_info` renderer `render_info(env) -> dict` (the V1 adapter returns
    # `INPUT_TYPES()` verbatim through it, the V3 adapter its own V1 shape).
    render_info: Callable[[Any], dict] | None = None
    # What the adapter had to interpret in a declaration that ComfyUI accepts as it is (an input
    # named in two sections, an `INPUT_TYPES()` that raised while loading): one sentence each,
    # logged once by whoever registers the node (graph/packs.py names the pack).
    quirks: tuple[str, ...] = ()
    # False for a node declared without a display name where ComfyUI then reports `null` in
    # /object_info (its V3 schema nodes); `display_name` still holds the node id for our logs.
    display_name_declared: bool = True
    # The editor's search words and its "essentials" panel group (today's ComfyUI V1 class attributes
    # SEARCH_ALIASES / ESSENTIALS_CATEGORY); rendered in /object_info, never read by the engine.
    search_aliases: tuple[str, ...] = ()
    essentials_category: str | None = None
    # How many times its pack re-registered this node type while the server ran (a pack reloaded
    # through ComfyUI's `nodes.load_custom_node`): part of its cache keys from the first time on,
    # so results of the replaced code are never reused (graph/signature.py).
    revision: int = 0

    def __post_init__(self) -> None:
        names = [i.name for i in self.inputs]
        if len(names) != len(set(names)):
            raise ValueError(f"node {self.node_id!r}: duplicate input names in {names}")
        if not self.display_name:
            object.__setattr__(self, "display_name", self.node_id)

    def current_inputs(self) -> tuple[InputSpec, ...]:
        """The inputs as of now (re-read for V1 classes); may raise what `INPUT_TYPES` raises."""
        return self.input_source() if self.input_source is not None else self.inputs

    def input(self, name: str) -> InputSpec | None:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        return None

    def inputs_in(self, section: str) -> tuple[InputSpec, ...]:
        return tuple(i for i in self.inputs if i.section == section)
