"""`comfy_api.latest.io`: the V3 node schema (ComfyUI's comfy_api/latest/_io.py, from its
documented behaviour, reference §4.4).

A node subclasses `ComfyNode` and defines classmethods: `define_schema() -> Schema`,
`execute(**inputs) -> NodeOutput` (sync or async), optionally `validate_inputs`,
`fingerprint_inputs` (= IS_CHANGED) and `check_lazy_status`. Inputs and outputs are typed
objects (`Int.Input("steps", default=20, min=1)`, `Image.Output()`); each type class carries its
wire name in `io_type`. The V1 face of a class (`INPUT_TYPES`, `RETURN_TYPES`, one call per
`execute_v3`) is here too; compat/v3/adapter.py turns the schema into a `NodeSpec`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from graph.errors import NodeDefinitionError
from graph.expansion import ExecutionBlocker  # re-exported for packs, too
from graph.spec import OPTIONAL, REQUIRED, InputSpec, OutputSpec


class NumberDisplay(str, Enum):
    number = "number"
    slider = "slider"
    gradient_slider = "gradientslider"


class ControlAfterGenerate(str, Enum):
    """What the editor does to a seed-like widget after each queued run."""

    fixed = "fixed"
    increment = "increment"
    decrement = "decrement"
    randomize = "randomize"


def _wire_value(value: Any) -> Any:
    """An enum option as the plain value `/object_info` carries."""
    return value.value if isinstance(value, Enum) else value


def _rendered(value: Any) -> Any:
    """An option object (io.RemoteOptions, ...) as its `/object_info` dict (a dict stays as given)."""
    return value.as_dict() if hasattr(value, "as_dict") else value


class Hidden(str, Enum):
    """Hidden inputs the executor fills in; the value is ComfyUI's V1 hidden kind."""

    unique_id = "UNIQUE_ID"
    prompt = "PROMPT"
    extra_pnginfo = "EXTRA_PNGINFO"
    dynprompt = "DYNPROMPT"
    auth_token_comfy_org = "AUTH_TOKEN_COMFY_ORG"
    api_key_comfy_org = "API_KEY_COMFY_ORG"
    comfy_usage_source = "COMFY_USAGE_SOURCE"  # the client that submitted the prompt
    execution_list = "EXECUTION_LIST"  # ComfyUI: core-internal; here the run's `get_cache` view


class HiddenHolder:
    """`cls.hidden` during `execute`: `cls.hidden.unique_id`, `.prompt`, ... (None when absent)."""

    def __init__(self, **values: Any) -> None:
        for member in Hidden:
            setattr(self, member.name, values.get(member.name))

    def __getattr__(self, name: str) -> Any:
        # ComfyUI's holder answers None for a hidden value it was not given, so code written for a
        # newer ComfyUI (a member this one lacks) reads None rather than failing.
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class SchemaError(TypeError):
    """A V3 schema that cannot become a node (names the node and the problem)."""


def _drop_none(**values: Any) -> dict:
    return {k: v for k, v in values.items() if v is not None}


class Input:
    """One input socket or widget; `options()` is its V1 option dict."""

    io_type: str = "*"

    def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                 tooltip: str | None = None, lazy: bool | None = None, extra_dict: dict | None = None,
                 raw_link: bool | None = None, advanced: bool | None = None, **options: Any) -> None:
        if not isinstance(id, str) or not id:
            raise SchemaError(f"{type(self).__qualname__}: an input id must be a non-empty string, got {id!r}")
        self.id = id
        self.display_name = display_name
        self.optional = optional
        self.extra = _drop_none(tooltip=tooltip, lazy=lazy, rawLink=raw_link, advanced=advanced,
                                display_name=display_name, **options)
        self.extra.update(extra_dict or {})

    def get_io_type(self) -> Any:
        return self.io_type

    def options(self) -> dict:
        return dict(self.extra)


class WidgetInput(Input):
    def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                 tooltip: str | None = None, lazy: bool | None = None, default: Any = None,
                 socketless: bool | None = None, force_input: bool | None = None, **options: Any) -> None:
        super().__init__(id, display_name, optional, tooltip, lazy, default=default, socketless=socketless,
                         forceInput=force_input, **options)


class Output:
    io_type: str = "*"

    def __init__(self, id: str | None = None, display_name: str | None = None, tooltip: str | None = None,  # noqa: A002
                 is_output_list: bool = False) -> None:
        self.id = id
        self.display_name = display_name
        self.tooltip = tooltip
        self.is_output_list = is_output_list

    def get_io_type(self) -> Any:
        return self.io_type


class ComfyType:
    """A wire type: `Type.Input(...)`, `Type.Output(...)`; `io_type` is its wire name."""

    io_type: str = "*"
    Type: Any = Any  # the Python type of the values (ComfyUI's annotation helper: `io.Model.Type`)
    Input = Input
    Output = Output


ComfyTypeIO = ComfyType  # ComfyUI's bases for a pack's own types (`@comfytype(...) class X(io.ComfyTypeIO)`)
ComfyTypeI = ComfyType


def comfytype(io_type: str) -> Any:
    """Class decorator (ComfyUI's `@comfytype(io_type=...)`): binds `io_type` on the class and
    on subclasses of its Input/Output classes (its own, inherited, or the plain ones)."""
    def decorate(cls: type) -> type:
        cls.io_type = io_type
        base_in = getattr(cls, "Input", Input)  # inherited ones too: a subclass of a widget type keeps its widget
        base_out = getattr(cls, "Output", Output)
        cls.Input = type(f"{cls.__name__}.Input", (base_in,), {"io_type": io_type, "__qualname__": f"{cls.__name__}.Input"})
        cls.Output = type(f"{cls.__name__}.Output", (base_out,), {"io_type": io_type,
                                                                   "__qualname__": f"{cls.__name__}.Output"})
        return cls
    return decorate


def Custom(io_type: str) -> type:  # noqa: N802 -- ComfyUI's name
    """A pack's own wire type: `io.Custom("MY_TYPE").Input("x")`."""
    return comfytype(io_type)(type(f"Custom_{io_type}", (ComfyType,), {}))


@comfytype("INT")
class Int(ComfyType):
    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, lazy: bool | None = None, default: int | None = None,
                     min: int | None = None, max: int | None = None, step: int | None = None,  # noqa: A002
                     control_after_generate: bool | ControlAfterGenerate | None = None,
                     display_mode: NumberDisplay | None = None, **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, lazy, default, min=min, max=max, step=step,
                             control_after_generate=_wire_value(control_after_generate),
                             display=_wire_value(display_mode), **kw)


@comfytype("FLOAT")
class Float(ComfyType):
    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, lazy: bool | None = None, default: float | None = None,
                     min: float | None = None, max: float | None = None, step: float | None = None,  # noqa: A002
                     round: float | None = None, display_mode: NumberDisplay | None = None,  # noqa: A002
                     **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, lazy, default, min=min, max=max, step=step,
                             round=round, display=display_mode.value if isinstance(display_mode, Enum) else display_mode,
                             **kw)


@comfytype("STRING")
class String(ComfyType):
    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, lazy: bool | None = None, default: str | None = None,
                     multiline: bool | None = None, placeholder: str | None = None,
                     dynamic_prompts: bool | None = None, **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, lazy, default, multiline=multiline,
                             placeholder=placeholder, dynamicPrompts=dynamic_prompts, **kw)


@comfytype("BOOLEAN")
class Boolean(ComfyType):
    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str | None = None, optional: bool = False,  # noqa: A002
                     tooltip: str | None = None, lazy: bool | None = None, default: bool | None = None,
                     label_on: str | None = None, label_off: str | None = None, **kw: Any) -> None:
            super().__init__(id, display_name, optional, tooltip, lazy, default, label_on=label_on,
                             label_off=label_off, **kw)


@comfytype("COMBO")
class Combo(ComfyType):
    class Input(WidgetInput):
        """`options`: a list of values or an Enum class (its values). `upload` (an UploadType)
        renders as `{"image_upload": true}`; `remote` / `remote_combo` (io.RemoteOptions /
        io.RemoteComboOptions) let the editor fetch the choices, so `options` may be left out
        (a `remote_combo` takes none) and the server does not check the value against a list."""

        def __init__(self, id: str, options: Any = None, display_name: str | None = None,  # noqa: A002
                     optional: bool = False, tooltip: str | None = None, lazy: bool | None = None,
                     default: Any = None, control_after_generate: bool | ControlAfterGenerate | None = None,
                     upload: "UploadType | None" = None, image_folder: "FolderType | None" = None,
                     remote: Any = None, remote_combo: Any = None, **kw: Any) -> None:
            if remote is not None and remote_combo is not None:
                raise SchemaError(f"Combo.Input({id!r}): pass either 'remote' or 'remote_combo', not both")
            if options is not None and remote_combo is not None:
                raise SchemaError(f"Combo.Input({id!r}): pass either 'options' or 'remote_combo', not both")
            if isinstance(options, type) and issubclass(options, Enum):
                options = [m.value for m in options]
            if options is None and (remote is not None or remote_combo is not None):
                self.values: list | None = None  # the editor fetches them: rendered without "options"
            elif options is None or isinstance(options, (str, bytes)) or not hasattr(options, "__iter__"):
                raise SchemaError(f"Combo.Input({id!r}): options must be a list or an Enum, got {options!r}")
            else:
                self.values = list(options)
            flags = {_wire_value(upload): True} if upload is not None else {}
            # Today's ComfyUI renders every V3 combo with `"multiselect"` (False; MultiCombo: True).
            kw.setdefault("multiselect", False)
            super().__init__(id, display_name, optional, tooltip, lazy, _wire_value(default),
                             control_after_generate=_wire_value(control_after_generate),
                             image_folder=_wire_value(image_folder),
                             remote=_rendered(remote), remote_combo=_rendered(remote_combo),
                             **flags, **kw)

    class Output(Output):
        def __init__(self, id: str | None = None, display_name: str | None = None,  # noqa: A002
                     options: list | None = None, tooltip: str | None = None, is_output_list: bool = False) -> None:
            super().__init__(id, display_name, tooltip, is_output_list)
            self.options = list(options) if options is not None else []


def _plain(name: str, io_type: str) -> type:
    return comfytype(io_type)(type(name, (ComfyType,), {}))


Image = _plain("Image", "IMAGE")
Mask = _plain("Mask", "MASK")
Latent = _plain("Latent", "LATENT")
Conditioning = _plain("Conditioning", "CONDITIONING")
Model = _plain("Model", "MODEL")
Clip = _plain("Clip", "CLIP")
Vae = _plain("Vae", "VAE")
Sampler = _plain("Sampler", "SAMPLER")
Sigmas = _plain("Sigmas", "SIGMAS")
Noise = _plain("Noise", "NOISE")
Guider = _plain("Guider", "GUIDER")
ClipVision = _plain("ClipVision", "CLIP_VISION")
ClipVisionOutput = _plain("ClipVisionOutput", "CLIP_VISION_OUTPUT")
ControlNet = _plain("ControlNet", "CONTROL_NET")
UpscaleModel = _plain("UpscaleModel", "UPSCALE_MODEL")
LatentUpscaleModel = _plain("LatentUpscaleModel", "LATENT_UPSCALE_MODEL")
Audio = _plain("Audio", "AUDIO")
Video = _plain("Video", "VIDEO")
AnyType = _plain("AnyType", "*")


class MultiType:
    """An input accepting several wire types: `MultiType.Input("x", types=[io.Image, io.Mask])`."""

    Type: Any = Any

    class Input(Input):
        def __init__(self, id: str | Input, types: list, display_name: str | None = None,  # noqa: A002
                     optional: bool = False, tooltip: str | None = None, **kw: Any) -> None:
            if isinstance(id, Input):  # ComfyUI also takes a template input
                display_name, optional, tooltip, id = id.display_name, id.optional, id.extra.get("tooltip"), id.id
            names = [t if isinstance(t, str) else t.io_type for t in types]
            self.io_type = ",".join(names)
            super().__init__(id, display_name, optional, tooltip, **kw)


@dataclass
class Schema:
    """A V3 node's declaration (ComfyUI's `io.Schema` fields)."""

    node_id: str
    display_name: str | None = None
    category: str = "sd"
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    hidden: list = field(default_factory=list)
    description: str = ""
    is_input_list: bool = False
    is_output_node: bool = False
    is_deprecated: bool = False
    is_experimental: bool = False
    is_api_node: bool = False
    not_idempotent: bool = False
    enable_expand: bool = False
    search_aliases: list = field(default_factory=list)
    is_dev_only: bool = False  # hidden from the editor's search unless dev mode is on
    essentials_category: str | None = None  # the editor's Essentials tab
    has_intermediate_output: bool = False  # its UI results are kept like an output node's
    accept_all_inputs: bool = False  # also pass the prompt's constant inputs the schema does not declare
    price_badge: Any = None  # a partner node's io.PriceBadge (compat/v3/pricing.py)

    def all_hidden(self) -> list["Hidden"]:
        """`hidden` plus what ComfyUI's `Schema.finalize` adds: an API node gets the comfy.org
        credentials, an output node `prompt` and `extra_pnginfo` (for the metadata it saves)."""
        found = [Hidden(h) for h in self.hidden]
        implied = ([Hidden.auth_token_comfy_org, Hidden.api_key_comfy_org] if self.is_api_node else []) \
            + ([Hidden.prompt, Hidden.extra_pnginfo] if self.is_output_node else [])
        return found + [h for h in dict.fromkeys(implied) if h not in found]


class NodeOutput:
    """What `execute` returns: the output values, plus `ui`, `expand` (a subgraph) or
    `block_execution` (a message: every consumer is blocked, as with ExecutionBlocker)."""

    def __init__(self, *args: Any, ui: Any = None, expand: dict | None = None,
                 block_execution: str | None = None) -> None:
        self.args = args
        self.ui = ui
        self.expand = expand
        self.block_execution = block_execution

    @property
    def result(self) -> tuple | None:
        return self.args if self.args else None

    def __getitem__(self, index: Any) -> Any:
        """The output values by position, as ComfyUI's `NodeOutput`, so packs calling a V3 node's
        `execute` directly unpack it like a V1 tuple (UltimateSDUpscale's
        `(upscaled,) = ImageUpscaleWithModel.execute(...)`)."""
        return self.args[index]


# -- the V1 face of a V3 class (ComfyUI's PREPARE_CLASS_CLONE / EXECUTE_NORMALIZED) -----------------
def input_spec_of(node_id: str, item: Any) -> InputSpec:
    """The engine's `InputSpec` of one schema input."""
    if not isinstance(item, Input):
        raise NodeDefinitionError(f"V3 node {node_id!r}: inputs must be io.*.Input objects, got {item!r}")
    section = OPTIONAL if item.optional else REQUIRED
    listed = isinstance(item, Combo.Input) and item.values is not None
    type_: Any = item.values if listed else item.get_io_type()  # a remote combo: "COMBO", no list
    return InputSpec(item.id, type_, section, item.options())


def output_spec_of(item: Any) -> OutputSpec:
    """The engine's `OutputSpec` of one schema output."""
    if not isinstance(item, Output):
        raise NodeDefinitionError(f"V3 outputs must be io.*.Output objects, got {item!r}")
    io_type = item.get_io_type()
    return OutputSpec(io_type, item.display_name or item.id or str(io_type), item.is_output_list, item.tooltip)


def _to_v1(result: Any) -> Any:
    """A V3 return value in the V1 shape the engine understands."""
    if not isinstance(result, NodeOutput):
        return result  # tuples and V1 dicts pass through
    if result.block_execution is not None:
        return ExecutionBlocker(result.block_execution)
    out: dict[str, Any] = {"result": tuple(result.args)}
    ui = result.ui
    if ui is not None:
        out["ui"] = ui.as_dict() if hasattr(ui, "as_dict") else ui
    if result.expand is not None:
        out["expand"] = result.expand
    return out


def hidden_names_of(schema: Schema) -> dict[str, str]:
    """The keyword names the node's hidden inputs arrive under, each mapped to its `Hidden`
    member's name (`prompt`, `unique_id`, ...). ComfyUI keeps hidden values apart from the inputs
    (`cls.hidden`), so a hidden input may share a real input's name (`String.Input("prompt")`
    with `Hidden.prompt`): that hidden value then travels under a private keyword."""
    taken = {getattr(i, "id", None) for i in schema.inputs}
    return {(f"__hidden_{h.name}" if h.name in taken else h.name): h.name for h in schema.all_hidden()}


def execute_v3(cls: type, kwargs: dict, hidden_names: "dict[str, str] | list[str] | None" = None) -> Any:
    """One call: hidden values go to a per-call subclass's `hidden`, the rest to `execute`;
    the result in the V1 shape (a coroutine of it for async nodes)."""
    if hidden_names is None:
        hidden_names = hidden_names_of(cls.define_schema())
    kwargs = dict(kwargs)
    if not isinstance(hidden_names, dict):
        hidden_names = {name: name for name in hidden_names}
    hidden_values = {member: kwargs.pop(key) for key, member in hidden_names.items() if key in kwargs}
    clone = type(cls.__name__, (cls,), {"hidden": HiddenHolder(**hidden_values), "__module__": cls.__module__})
    result = clone.execute(**kwargs)
    if inspect.isawaitable(result):
        async def finish() -> Any:
            return _to_v1(await result)
        return finish()
    return _to_v1(result)


def v1_input_types(cls: type) -> dict:
    """`INPUT_TYPES()` of a V3 class in ComfyUI's V1 form (combos as lists of values)."""
    schema = cls.define_schema()
    out: dict[str, dict] = {"required": {}}
    for item in schema.inputs:
        if callable(getattr(item, "group", None)):  # a dynamic input (compat/v3/dynamic.py): its V3 entry
            section, (kind, options) = item.group(schema.node_id).render()
            out.setdefault(section, {})[item.id] = (kind, {**item.extra, **options})
            continue
        spec = input_spec_of(schema.node_id, item)
        out.setdefault(spec.section, {})[spec.name] = (spec.type, dict(spec.options))
    hidden = schema.all_hidden()
    if hidden:
        out["hidden"] = {h.name: (h.value,) for h in hidden}
    return out


def _v1_face(cls: type, name: str) -> Any:
    """ComfyUI V1 attributes of a V3 class, from its schema (see `_ComfyNodeMeta`)."""
    schema = cls.define_schema()
    outputs = schema.outputs
    if name == "RETURN_TYPES":
        return tuple(o.get_io_type() for o in outputs)
    if name == "RETURN_NAMES":
        return tuple(o.display_name or o.id or str(o.get_io_type()) for o in outputs)
    if name == "OUTPUT_IS_LIST":
        return tuple(o.is_output_list for o in outputs)
    if name == "OUTPUT_TOOLTIPS":
        return tuple(o.tooltip or "" for o in outputs) if any(o.tooltip for o in outputs) else None
    simple = {"CATEGORY": schema.category, "DESCRIPTION": schema.description, "OUTPUT_NODE": schema.is_output_node,
              "INPUT_IS_LIST": schema.is_input_list, "NOT_IDEMPOTENT": schema.not_idempotent,
              "DEPRECATED": schema.is_deprecated, "EXPERIMENTAL": schema.is_experimental,
              "API_NODE": schema.is_api_node}
    return simple[name]


_V1_NAMES = frozenset({"RETURN_TYPES", "RETURN_NAMES", "OUTPUT_IS_LIST", "OUTPUT_TOOLTIPS", "CATEGORY", "DESCRIPTION",
                       "OUTPUT_NODE", "INPUT_IS_LIST", "NOT_IDEMPOTENT", "DEPRECATED", "EXPERIMENTAL", "API_NODE"})
_V1_HOOKS = {"VALIDATE_INPUTS": "validate_inputs", "IS_CHANGED": "fingerprint_inputs"}


class _ComfyNodeMeta(type):
    """Gives V3 classes ComfyUI's V1 face (`RETURN_TYPES`, `FUNCTION`, `VALIDATE_INPUTS` when
    overridden, ...), so a pack may also list a V3 class in `NODE_CLASS_MAPPINGS`, as ComfyUI allows;
    the V1 adapter (graph/v1.py) then runs it through `EXECUTE_NORMALIZED`."""

    def __getattr__(cls, name: str) -> Any:
        if name in _V1_NAMES:
            return _v1_face(cls, name)
        if name in _V1_HOOKS and cls.overrides(_V1_HOOKS[name]):
            return getattr(cls, _V1_HOOKS[name])
        raise AttributeError(f"type object {cls.__name__!r} has no attribute {name!r}")


class ComfyNode(metaclass=_ComfyNodeMeta):
    """Base class of V3 nodes; every method is a classmethod (the class is the node)."""

    hidden: HiddenHolder = HiddenHolder()
    FUNCTION = "EXECUTE_NORMALIZED"

    @classmethod
    def INPUT_TYPES(cls) -> dict:  # noqa: N802 -- ComfyUI's V1 name
        return v1_input_types(cls)

    @classmethod
    def VALIDATE_CLASS(cls) -> None:  # noqa: N802 -- ComfyUI's name
        """Behaviour of ComfyUI's `_io.py` `VALIDATE_CLASS`: a node class must define
        `define_schema` and `execute` itself (or inherit them from a node that does)."""
        for name in ("define_schema", "execute"):
            if not cls.overrides(name):
                raise Exception(f"No {name} function was defined for node class {cls.__name__}.")

    @classmethod
    def FINALIZE_SCHEMA(cls) -> "Schema":  # noqa: N802 -- ComfyUI's name
        """Behaviour of ComfyUI's `_io.py` `FINALIZE_SCHEMA`: the class's `define_schema()`, made
        final (this engine's schema needs no finalizing step)."""
        schema = cls.define_schema()
        if not isinstance(schema, Schema):
            raise SchemaError(f"{cls.__name__}.define_schema() must return io.Schema, got {schema!r}")
        return schema

    @classmethod
    def GET_SCHEMA(cls) -> "Schema":  # noqa: N802 -- ComfyUI's name
        """Behaviour of ComfyUI's `_io.py` `GET_SCHEMA`, which its loader and packs' own loaders
        call on each listed class: checks the class (`VALIDATE_CLASS`), builds the schema
        (`FINALIZE_SCHEMA`), validates it (raises on a malformed declaration) and returns it."""
        cls.VALIDATE_CLASS()
        schema = cls.FINALIZE_SCHEMA()
        v1_input_types(cls)  # raises on a malformed input, as ComfyUI's schema.validate() does
        ids = [i.id for i in schema.inputs]
        outs = [o.id for o in schema.outputs if getattr(o, "id", None)]
        for label, names in (("input", ids), ("output", outs)):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"Ids must be unique between {label}s, but there are duplicates: {dupes}")
        return schema

    @classmethod
    def EXECUTE_NORMALIZED(cls, **kwargs: Any) -> Any:  # noqa: N802 -- ComfyUI's V1 entry point
        return execute_v3(cls, kwargs)

    @classmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError(f"{cls.__name__} must define the classmethod define_schema()")

    @classmethod
    def execute(cls, **kwargs: Any) -> NodeOutput:
        raise NotImplementedError(f"{cls.__name__} must define the classmethod execute()")

    @classmethod
    def validate_inputs(cls, **kwargs: Any) -> bool | str:
        return True

    @classmethod
    def fingerprint_inputs(cls, **kwargs: Any) -> Any:
        return None

    @classmethod
    def check_lazy_status(cls, **kwargs: Any) -> list[str]:
        return []

    @classmethod
    def overrides(cls, name: str) -> bool:
        """True when the node class defines `name` itself (not inherited from ComfyNode)."""
        return getattr(cls, name).__func__ is not getattr(ComfyNode, name).__func__


ComfyNodeV3 = ComfyNode  # an older spelling some packs use


# -- more of ComfyUI's io names -------------------------------------------------------------------
# More of ComfyUI's `comfy_api.latest.io` (comfy_api/latest/_io.py): the folder and upload
# enums and the remaining plain wire types. The dynamic inputs (`MatchType`, `Autogrow`,
# `DynamicCombo`, `DynamicSlot`) live in compat/v3/dynamic.py and the types ComfyUI added since
# (BoundingBox, Tracks, Color, Curve, ...) in compat/v3/io_types.py, both building on this
# module; packs see them as one `io` (compat/v3/public_io.py).


class FolderType(str, Enum):
    input = "input"
    output = "output"
    temp = "temp"


class UploadType(str, Enum):
    image = "image_upload"
    audio = "audio_upload"
    video = "video_upload"
    model = "file_upload"


StyleModel = _plain("StyleModel", "STYLE_MODEL")
Gligen = _plain("Gligen", "GLIGEN")
SVG = _plain("SVG", "SVG")
LoraModel = _plain("LoraModel", "LORA_MODEL")
LossMap = _plain("LossMap", "LOSS_MAP")
Voxel = _plain("Voxel", "VOXEL")
Mesh = _plain("Mesh", "MESH")
Hooks = _plain("Hooks", "HOOKS")
HookKeyframes = _plain("HookKeyframes", "HOOK_KEYFRAMES")
TimestepsRange = _plain("TimestepsRange", "TIMESTEPS_RANGE")
LatentOperation = _plain("LatentOperation", "LATENT_OPERATION")
FlowControl = _plain("FlowControl", "FLOW_CONTROL")
Accumulation = _plain("Accumulation", "ACCUMULATION")
Photomaker = _plain("Photomaker", "PHOTOMAKER")
Point = _plain("Point", "POINT")
FaceAnalysis = _plain("FaceAnalysis", "FACE_ANALYSIS")
BBOX = _plain("BBOX", "BBOX")
SEGS = _plain("SEGS", "SEGS")
MODEL_PATCH = _plain("MODEL_PATCH", "MODEL_PATCH")
ModelPatch = MODEL_PATCH  # today's name; MODEL_PATCH is an older one
AudioEncoder = _plain("AudioEncoder", "AUDIO_ENCODER")
AudioEncoderOutput = _plain("AudioEncoderOutput", "AUDIO_ENCODER_OUTPUT")
WanCameraEmbedding = _plain("WanCameraEmbedding", "WAN_CAMERA_EMBEDDING")


# -- node replacements (ComfyUI's `io.NodeReplace`, registered with ComfyAPI().node_replacement) ----
class NodeReplaceError(ValueError):
    """A node replacement whose fields do not have ComfyUI's shapes (names the field)."""


def _check_mapping(field_name: str, items: Any, check: Any) -> None:
    if items is None:
        return
    if not isinstance(items, (list, tuple)):
        raise NodeReplaceError(f"NodeReplace.{field_name}: expected a list, got {type(items).__name__}")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise NodeReplaceError(f"NodeReplace.{field_name}[{index}]: expected a dict, got {item!r}")
        problem = check(item)
        if problem:
            raise NodeReplaceError(f"NodeReplace.{field_name}[{index}] {item!r}: {problem}")


def _input_map_problem(item: dict) -> str | None:
    if not isinstance(item.get("new_id"), str) or not item["new_id"]:
        return "'new_id' must name an input of the new node"
    if ("old_id" in item) == ("set_value" in item):
        return "give exactly one of 'old_id' (copy that input) and 'set_value' (set this value)"
    if "old_id" in item and (not isinstance(item["old_id"], str) or not item["old_id"]):
        return "'old_id' must name an input of the old node"
    return None


def _output_map_problem(item: dict) -> str | None:
    for key in ("old_idx", "new_idx"):
        value = item.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{key!r} must be an output index (an int >= 0)"
    return None


@dataclass(frozen=True)
class NodeReplace:
    """A node type that no longer exists (`old_node_id`) and the one that stands in for it
    (`new_node_id`): `input_mapping` items are `{"new_id", "old_id"}` (copy an input) or
    `{"new_id", "set_value"}` (set one); `output_mapping` items `{"old_idx", "new_idx"}`;
    `old_widget_ids` name the old node's widget values by position, for the editor. ComfyUI's
    fields and order; the shapes are checked here (NodeReplaceError), ComfyUI takes them as given."""

    new_node_id: str
    old_node_id: str
    old_widget_ids: list | None = None
    input_mapping: list | None = None
    output_mapping: list | None = None

    def __post_init__(self) -> None:
        for name in ("new_node_id", "old_node_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise NodeReplaceError(f"NodeReplace.{name}: expected a node type name, got {value!r}")
        widgets = self.old_widget_ids
        if widgets is not None and (not isinstance(widgets, (list, tuple))
                                    or not all(isinstance(w, str) for w in widgets)):
            raise NodeReplaceError(f"NodeReplace.old_widget_ids: expected a list of input names, got {widgets!r}")
        _check_mapping("input_mapping", self.input_mapping, _input_map_problem)
        _check_mapping("output_mapping", self.output_mapping, _output_map_problem)

    def as_dict(self) -> dict:
        """The `/node_replacements` entry (ComfyUI's: empty mappings read as null)."""
        return {"new_node_id": self.new_node_id, "old_node_id": self.old_node_id,
                "old_widget_ids": list(self.old_widget_ids) if self.old_widget_ids is not None else None,
                "input_mapping": list(self.input_mapping) if self.input_mapping else None,
                "output_mapping": list(self.output_mapping) if self.output_mapping else None}
