"""ComfyUI's `nodes` module, as packs import it: `import nodes; nodes.MAX_RESOLUTION`,
`nodes.NODE_CLASS_MAPPINGS["KSampler"]`, `nodes.KSampler().sample(...)`, `nodes.common_ksampler`.

Our built-in package is also called `nodes`; it forwards the attribute names it does not have
to the installed import hook (nodes/__init__.py, PEP 562 `__getattr__`), which asks its session
(`CompatSession.module_attribute`), which answers here. So these names exist once a host has
installed the compat layer, as ComfyUI's import surface, and `nodes` never imports compat.

Built-in (native) nodes get V1-shaped facade classes made from their public `NodeSpec`
(`INPUT_TYPES`, `RETURN_TYPES`, `FUNCTION` with ComfyUI's method name, ...), whose method calls
the node's function. `SaveImage` and `PreviewImage` (a subclass of it, as in ComfyUI) keep
ComfyUI's instance attributes (`output_dir`, `type`, `prefix_append`, `compress_level`) and
`save_images` writes as they say, so packs' subclasses work unchanged. Pack nodes appear as the
pack's own class, as in ComfyUI. `NODE_CLASS_MAPPINGS` lists the active session's registry
(compat/active.py), and facades' `INPUT_TYPES()` list model files from its environment.
"""
from __future__ import annotations

import copy
import functools
import inspect
import json
from pathlib import Path
from typing import Any, Callable

from comfy_core.image.png import SaveTarget, preview_target, write_image_batch
from compat.active import active
from graph.context import current
from graph.native import MAX_RESOLUTION
from graph.object_info import node_info
from graph.spec import NodeSpec
from nodes import builtin_node_functions
from nodes.environment import Environment, current_env

# ComfyUI 0.3.64's `FUNCTION` of each of its nodes, recorded from its classes (facts, not code):
# the method packs call on a V1 node (`nodes.KSampler().sample(...)`), or "EXECUTE_NORMALIZED"
# for the nodes ComfyUI declares with the V3 schema (packs call `GrowMask.execute(...)` there).
FUNCTION_NAMES_FILE = Path(__file__).resolve().parent / "comfy_node_functions.json"
V3_FUNCTION = "EXECUTE_NORMALIZED"
# ComfyUI 0.3.64's parameter order of each V1 node's method (after `self`), recorded from its
# classes (facts, not code): packs call them positionally (`VAEDecode().decode(vae, samples)`,
# `CLIPTextEncode().encode(clip, text)`), and ComfyUI's order is not always INPUT_TYPES order.
ARGUMENT_ORDER_FILE = Path(__file__).resolve().parent / "comfy_node_arguments.json"


# Today's ComfyUI (Comfy-Org/ComfyUI, Dec 2026) declares many more built-in nodes with the V3 schema
# than 0.3.64 did, keeping their V1 method name as an alias of `execute` (nodes_custom_sampler.py:
# `get_sigmas = execute`, `sample = execute`, ...; nodes_images.py `stitch = execute`). Recorded from
# today's files (facts, not code), read with the code index: 52 comfy_extras modules, each with
# the commit read under the file's "sources" (nodes listed there only): `{node_id: {"schema":
# "V3", "execute": "(a, b, c=)", "aliases": [...]}}` or `{"schema": "V1"}`. It applies on top of the 0.3.64 record
# (`_make_facade`): a node it lists as V3 gets `execute` with today's parameter order and its aliases.
TODAY_FILE = Path(__file__).resolve().parent / "comfy_node_functions_2026.json"


@functools.lru_cache(maxsize=1)
def comfy_nodes_today() -> dict[str, dict[str, Any]]:
    return json.loads(TODAY_FILE.read_text(encoding="utf-8"))["nodes"]


def comfy_function_name(node_id: str) -> str:
    """The `FUNCTION` of ComfyUI's class for the node today: "EXECUTE_NORMALIZED" for a node
    declared with the V3 schema (its `FUNCTION` classproperty), else the V1 method's name."""
    if comfy_nodes_today().get(node_id, {}).get("schema") == "V3":
        return V3_FUNCTION
    return comfy_function_names().get(node_id, DEFAULT_FUNCTION)


# ComfyUI 0.3.64's built-in node classes, recorded from its files by scripts/comfy_surface.py
# (names and signatures only): `{node_id: {"class", "module", "methods", "attributes"}}`. The
# facades take ComfyUI's class name in its module and the members they can answer from the
# node's spec (`_comfy_members`).
NODE_CLASSES_FILE = Path(__file__).resolve().parent / "comfy_node_classes.json"


@functools.lru_cache(maxsize=1)
def comfy_node_classes() -> dict[str, dict[str, Any]]:
    return json.loads(NODE_CLASSES_FILE.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def comfy_function_names() -> dict[str, str]:
    return json.loads(FUNCTION_NAMES_FILE.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def comfy_argument_orders() -> dict[str, list[str]]:
    return json.loads(ARGUMENT_ORDER_FILE.read_text(encoding="utf-8"))


class UnsupportedNodeArgumentError(TypeError):
    """A pack passed an argument of ComfyUI's node method that our node does not have."""


def positional_binder(node_id: str, method_name: str, signature: inspect.Signature,
                      order: list[str] | None = None) -> Callable[..., tuple[tuple, dict]]:
    """`bind(*args, **kwargs) -> (args, kwargs)` for a facade method: positional arguments are named by
    ComfyUI's parameter order for the node (`order`, else 0.3.64's V1 method order, else the
    function's own order), so a pack's positional call means what it means on ComfyUI; a ComfyUI
    parameter our function lacks is refused by name, never dropped."""
    comfy_order = order if order is not None else comfy_argument_orders().get(node_id)
    accepted = set(signature.parameters)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())

    def bind(*args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        if comfy_order is None or not args:
            bound = signature.bind(*args, **kwargs)
            return bound.args, bound.kwargs
        if len(args) > len(comfy_order):
            raise TypeError(f"{node_id}.{method_name}() takes {len(comfy_order)} positional arguments "
                            f"({', '.join(comfy_order)}), got {len(args)}")
        named = dict(zip(comfy_order, args))
        for name in named:
            if name in kwargs:
                raise TypeError(f"{node_id}.{method_name}() got multiple values for argument {name!r}")
        named.update(kwargs)
        unsupported = [] if takes_any else sorted(set(named) - accepted)
        if unsupported:
            raise UnsupportedNodeArgumentError(
                f"{node_id}.{method_name}(): argument(s) {unsupported} of ComfyUI's node are not supported "
                f"by this engine's {node_id} (it takes {list(signature.parameters)})")
        signature.bind(**named)  # missing required arguments: Python's own message
        return (), named

    return bind


DEFAULT_FUNCTION = "execute"


@functools.lru_cache(maxsize=None)
def _builtin_index() -> tuple[dict[str, Callable], dict[str, dict[str, Callable]]]:
    """The built-in node functions by node id (the first of an id) and by python_module (then
    by node id, the last of an id), listed once: each `nodes.KSampler`-style read and each
    `comfy_extras.nodes_*` module packs import used to list every node module again (some 200
    listings with 36 popular packs, issue 33)."""
    by_id: dict[str, Callable] = {}
    by_module: dict[str, dict[str, Callable]] = {}
    for fn in builtin_node_functions():
        spec = fn.__node_spec__
        by_id.setdefault(spec.node_id, fn)
        by_module.setdefault(spec.python_module, {})[spec.node_id] = fn
    return by_id, by_module


def _builtin_function(node_id: str) -> Callable | None:
    return _builtin_index()[0].get(node_id)


@functools.lru_cache(maxsize=None)
def _facade_for_function(fn: Callable) -> type:
    # Keyed by the node function (stable for a process), so `nodes.KSampler is nodes.KSampler`.
    return _make_facade(fn.__node_spec__, fn)


def _make_facade(spec: NodeSpec, fn: Callable) -> type:
    """A V1 class over a native node function."""
    method_name = comfy_function_names().get(spec.node_id, DEFAULT_FUNCTION)
    signature = inspect.signature(fn)
    bind = positional_binder(spec.node_id, method_name, signature)
    today = comfy_nodes_today().get(spec.node_id)
    v3_today = today is not None and today.get("schema") == "V3"

    def input_types(cls: type) -> dict:
        return node_info(spec, active().env)["input"]

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Positional arguments follow ComfyUI's method order (positional_binder).
        call_args, call_kwargs = bind(*args, **kwargs)
        return fn(*call_args, **call_kwargs)

    if v3_today:
        # Today's `execute(cls, ...)`: its parameters in today's order (not always the schema's,
        # e.g. VAEDecodeAudio.execute(vae, samples), DualModelGuider's optional ones last).
        bind_today = positional_binder(spec.node_id, "execute", signature, _positional_names(today["execute"]))

        def execute_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            call_args, call_kwargs = bind_today(*args, **kwargs)
            return fn(*call_args, **call_kwargs)
    else:
        execute_call = call

    attrs: dict[str, Any] = {
        "__doc__": spec.description or f"ComfyUI-style facade of the built-in node {spec.node_id}.",
        "__module__": spec.python_module,
        "INPUT_TYPES": classmethod(input_types),
        "RETURN_TYPES": tuple(o.type for o in spec.outputs),
        "RETURN_NAMES": tuple(o.name for o in spec.outputs),
        "OUTPUT_IS_LIST": tuple(o.is_list for o in spec.outputs),
        "FUNCTION": V3_FUNCTION if v3_today else method_name,
        "CATEGORY": spec.category,
        "DESCRIPTION": spec.description,
        "OUTPUT_NODE": spec.output_node,
        "INPUT_IS_LIST": spec.input_is_list,
        "DISPLAY_NAME": spec.display_name,  # for the NODE_DISPLAY_NAME_MAPPINGS of its module
    }
    if v3_today:
        # A V3 class today: `execute` and the V1 names ComfyUI binds to it (`get_sigmas = execute`).
        attrs.update(_v3_methods(execute_call, today.get("aliases", ())))
        attrs["define_schema"] = classmethod(lambda cls: schema_of(spec))
        attrs.update(_v3_checks(spec))
        if method_name not in attrs and method_name != V3_FUNCTION:
            # 0.3.64's V1 method that today's class dropped (SaveAudio.save_flac): kept, as it was.
            call.__name__ = method_name
            attrs[method_name] = call
    elif method_name == V3_FUNCTION:  # already a V3 class in 0.3.64 (Flux2Scheduler): one today too
        attrs.update(_v3_methods(call))
        attrs["define_schema"] = classmethod(lambda cls: schema_of(spec))
        attrs.update(_v3_checks(spec))
    else:
        call.__name__ = method_name
        attrs[method_name] = call
    for name, value in _comfy_members(spec, fn, signature).items():
        attrs.setdefault(name, value)
    bases: tuple[type, ...] = ()
    if v3_today or method_name == V3_FUNCTION:
        # Today's class is an `io.ComfyNode` subclass (comfy_extras/nodes_flux.py `class
        # Flux2Scheduler(io.ComfyNode)`), so a pack's subclass of it (cg-sigmas' `Flux2Sigmas`,
        # its own `define_schema`, the inherited `execute`) is a V3 node that registers and runs.
        from compat.v3.io import ComfyNode

        bases = (ComfyNode,)
    if spec.node_id == "SaveImage":
        attrs.update(__init__=_save_image_init, save_images=_save_images)
    elif spec.node_id == "PreviewImage":
        # ComfyUI's `class PreviewImage(SaveImage)`: only `__init__` differs.
        save_image = _builtin_function("SaveImage")
        if save_image is not None:
            bases = (_facade_for_function(save_image),)
            attrs["__init__"] = _preview_image_init
            del attrs["save_images"]
    return type(spec.node_id, bases, attrs)


def _v3_methods(call: Callable, aliases: Any = ()) -> dict[str, Any]:
    """The V3 face of a node ComfyUI declares with `comfy_api`'s schema: `execute` (a
    classmethod, as `io.ComfyNode.execute`) answers an `io.NodeOutput`, and
    `EXECUTE_NORMALIZED` the V1-shaped result (the tuple, or `{"ui", "result"}`). Each name in
    `aliases` is the same classmethod object as `execute`, as ComfyUI's `get_sigmas = execute`
    (so it also answers the NodeOutput, and `__name__` is "execute" there too)."""

    def execute(cls: type, *args: Any, **kwargs: Any) -> Any:
        from compat.v3.io import NodeOutput

        result = call(None, *args, **kwargs)
        if isinstance(result, dict):
            return NodeOutput(*tuple(result.get("result", ())), ui=result.get("ui"), expand=result.get("expand"))
        return NodeOutput(*(result if isinstance(result, tuple) else (result,)))

    def execute_normalized(cls: type, *args: Any, **kwargs: Any) -> Any:
        return call(None, *args, **kwargs)

    execute_method = classmethod(execute)
    methods = {"execute": execute_method, V3_FUNCTION: classmethod(execute_normalized)}
    methods.update({alias: execute_method for alias in aliases})
    return methods


def _v3_checks(spec: NodeSpec) -> dict[str, Any]:
    """A V3 class's input checks under their V3 names (`fingerprint_inputs`, `validate_inputs`,
    classmethods over the inputs by name), where the node has them."""
    out: dict[str, Any] = {}
    for name, field_name in (("fingerprint_inputs", "is_changed"), ("validate_inputs", "validate_inputs")):
        check = getattr(spec.behaviour, field_name)
        if check is None:
            continue
        signature = inspect.signature(check)
        params = [p.name for p in signature.parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        out[name] = _alias(spec.node_id, name, "classmethod", "(" + ", ".join(params) + ")", check, signature)
    return out


# Class attributes of ComfyUI's node classes that hold the options of one of their combo inputs
# (`ImageScale.upscale_methods`, which packs read to offer the same choices): attribute -> input.
COMBO_ATTRIBUTES = {"upscale_methods": "upscale_method", "UPSCALE_METHODS": "upscale_method",
                    "crop_methods": "crop"}
# ComfyUI's names of a node's IS_CHANGED / VALIDATE_INPUTS (V1) and fingerprint_inputs /
# validate_inputs (V3): behaviour field they stand for.
CHECK_METHODS = {"IS_CHANGED": "is_changed", "fingerprint_inputs": "is_changed",
                 "VALIDATE_INPUTS": "validate_inputs", "validate_inputs": "validate_inputs"}
_SCHEMA_METHODS = frozenset({"INPUT_TYPES", "define_schema", "execute", "__init__", "__call__"})


def _positional_names(text: str) -> list[str]:
    """The positional parameter names of a recorded signature `"(a, b=, *, c)"`."""
    names = []
    for token in (t.strip() for t in text.strip()[1:-1].split(",")):
        if not token or token == "/":
            continue
        if token.startswith("*"):
            break
        names.append(token.rstrip("="))
    return names


def _alias(node_id: str, name: str, kind: str, text: str, target: Callable, signature: inspect.Signature) -> Any:
    """ComfyUI's method `name` of the node (recorded signature `text`) calling `target` (the node's
    function, or one of its checks) with the arguments named by ComfyUI's parameter order."""
    order = _positional_names(text)

    def method(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(order):
            raise TypeError(f"{node_id}.{name}() takes {len(order)} positional arguments ({', '.join(order)}), "
                            f"got {len(args)}")
        named = dict(zip(order, args))
        for key in named:
            if key in kwargs:
                raise TypeError(f"{node_id}.{name}() got multiple values for argument {key!r}")
        named.update(kwargs)
        signature.bind(**named)  # a missing or unknown argument: Python's own message
        return target(**named)

    method.__name__ = method.__qualname__ = name
    if kind == "static":
        return staticmethod(method)

    def bound(owner: Any, *args: Any, **kwargs: Any) -> Any:  # `cls` or `self`: not the node's input
        return method(*args, **kwargs)

    bound.__name__ = bound.__qualname__ = name
    return classmethod(bound) if kind == "classmethod" else bound


def _combo_options(spec: NodeSpec, input_name: str) -> list | None:
    for item in spec.inputs:
        if item.name == input_name and isinstance(item.type, (list, tuple)):
            return list(item.type)
    return None


def _comfy_members(spec: NodeSpec, fn: Callable, signature: inspect.Signature) -> dict[str, Any]:
    """The members of ComfyUI's class for this node that a facade answers from the node's spec:
    its flags and output tooltips, the combo option lists it keeps as class attributes, its
    input checks under ComfyUI's names, the V1 method names 0.3.64's V3 nodes kept (`detect_edge`,
    `append`, ...) and any other recorded method whose parameters are the node's inputs, and
    `define_schema` for a node ComfyUI declares with the V3 schema."""
    record = comfy_node_classes().get(spec.node_id)
    if record is None:
        return {}
    members: dict[str, Any] = {"DEPRECATED": spec.deprecated, "EXPERIMENTAL": spec.experimental}
    if "OUTPUT_TOOLTIPS" in record["attributes"]:
        members["OUTPUT_TOOLTIPS"] = tuple(o.tooltip or "" for o in spec.outputs)
    for attribute, input_name in COMBO_ATTRIBUTES.items():
        if attribute in record["attributes"] and (options := _combo_options(spec, input_name)) is not None:
            members[attribute] = options
    inputs = set(signature.parameters)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    for name, (kind, text) in record["methods"].items():
        if name in _SCHEMA_METHODS or kind == "property":
            continue
        if name in CHECK_METHODS:
            check = getattr(spec.behaviour, CHECK_METHODS[name])
            if check is not None:
                members[name] = _alias(spec.node_id, name, "classmethod", text, check, inspect.signature(check))
            continue
        params = _positional_names(text)
        if params and (takes_any or set(params) <= inputs):
            members[name] = _alias(spec.node_id, name, kind, text, fn, signature)
    if "define_schema" in record["methods"]:
        members["define_schema"] = classmethod(lambda cls: schema_of(spec))
    return members


def schema_of(spec: NodeSpec) -> Any:
    """The node's declaration as ComfyUI's V3 `io.Schema` (compat/v3/io.py): what
    `define_schema()` of a node ComfyUI declares with the V3 schema returns."""
    from compat.v3 import io
    from graph.spec import HIDDEN, OPTIONAL

    inputs, hidden = [], []
    for item in spec.inputs:
        if item.section == HIDDEN:
            # ComfyUI's schema lists hidden inputs by kind (`io.Hidden.unique_id`, ...)
            kind = item.type if isinstance(item.type, str) else ""
            hidden.extend(member for member in io.Hidden if member.value == kind or member.name == item.name)
            continue
        optional = item.section == OPTIONAL
        options = dict(item.options)
        if isinstance(item.type, (list, tuple)):
            inputs.append(io.Combo.Input(item.name, options=list(item.type), optional=optional, **options))
        else:
            entry = io.Input(item.name, optional=optional, **options)
            entry.io_type = item.type
            inputs.append(entry)
    outputs = []
    for out in spec.outputs:
        entry = io.Output(out.name, tooltip=out.tooltip, is_output_list=out.is_list)
        entry.io_type = out.type
        outputs.append(entry)
    return io.Schema(node_id=spec.node_id, display_name=spec.display_name or None, category=spec.category,
                     inputs=inputs, outputs=outputs, hidden=hidden, description=spec.description,
                     is_input_list=spec.input_is_list, is_output_node=spec.output_node,
                     is_deprecated=spec.deprecated, is_experimental=spec.experimental,
                     is_api_node=spec.api_node, not_idempotent=spec.not_idempotent)


def module_node_classes(module: str) -> dict[str, type]:
    """The facades of the built-in nodes ComfyUI keeps in `module` (their spec's python_module,
    e.g. "comfy_extras.nodes_mask"), by node id: what `comfy_extras.nodes_mask.GrowMask` is here."""
    return {node_id: _facade_for_function(fn) for node_id, fn in _builtin_index()[1].get(module, {}).items()}


def comfy_class_names(classes: dict[str, type]) -> dict[str, type]:
    """ComfyUI's class names of these facades (by node id) where they differ from the node id:
    `PrimitiveInt` is class `Int` of comfy_extras.nodes_primitive, `ImageBlend` is `Blend`.
    Nodes newer than ComfyUI 0.3.64 take theirs from today's record (`comfy_nodes_today`'s
    "class"): `PrimitiveBoundingBox` is `BoundingBox` of comfy_extras.nodes_images, `ComfyNotNode`
    is `NotNode` of nodes_logic, `TextToUppercase` is `TextToUppercaseNode` of nodes_dataset."""
    out = {}
    for node_id, facade_class in classes.items():
        class_name = (comfy_node_classes().get(node_id, {}).get("class")
                      or comfy_nodes_today().get(node_id, {}).get("class"))
        if class_name and class_name != node_id:
            out[class_name] = facade_class
    return out


# -- SaveImage / PreviewImage: the instance attributes packs' subclasses set -----------------------
# ComfyUI's SaveImage keeps `output_dir`, `type`, `prefix_append` and `compress_level` on the
# instance and `save_images` reads them there, so a pack's subclass that sets them in `__init__`
# (as ComfyUI's PreviewImage does) writes its previews where and how it says.

def _host_env() -> Environment:
    """The environment facade instances work in: the running node's, else the active
    session's, else a default rooted at the working directory (nodes.environment.current_env)."""
    ctx = current()
    if ctx is not None and isinstance(ctx.env, Environment):
        return ctx.env
    env = active().env
    return env if isinstance(env, Environment) else current_env()


def _set_target(instance: Any, target: SaveTarget) -> None:
    instance.output_dir = str(target.output_dir)  # a str, as folder_paths.get_output_directory() returns
    instance.type = target.type
    instance.prefix_append = target.prefix_append
    instance.compress_level = target.compress_level


def _save_image_init(self: Any) -> None:
    """ComfyUI's `SaveImage.__init__`: the output folder, type "output", level 4."""
    _set_target(self, SaveTarget(_host_env().output_dir))


def _preview_image_init(self: Any) -> None:
    """ComfyUI's `PreviewImage.__init__`: the temp folder, type "temp", `_temp_xxxxx`, level 1."""
    _set_target(self, preview_target(_host_env().temp_dir))


def _save_images(self: Any, images: Any, filename_prefix: str = "ComfyUI", prompt: Any = None,
                 extra_pnginfo: Any = None) -> dict:
    """ComfyUI's `SaveImage.save_images` (same parameters): writes into `self.output_dir`, with
    `self.prefix_append` after the prefix, `self.type` in the UI records and
    `self.compress_level`; an attribute a subclass's `__init__` left unset takes SaveImage's value.
    `--disable-metadata` (the environment's `disable_metadata`) writes no text chunks."""
    # Imported here: compat is imported before the prestartup scripts, and the node modules after.
    from nodes.errors import image_input_errors

    env = _host_env()
    default = SaveTarget(env.output_dir)
    target = SaveTarget(Path(getattr(self, "output_dir", default.output_dir)),
                        getattr(self, "type", default.type),
                        getattr(self, "prefix_append", default.prefix_append),
                        getattr(self, "compress_level", default.compress_level))
    with image_input_errors():  # names the running node: the pack's subclass, or SaveImage itself
        return write_image_batch(images, filename_prefix, target, prompt=prompt, extra_pnginfo=extra_pnginfo,
                                 metadata=not env.disable_metadata)


def class_for(spec: NodeSpec) -> type | None:
    """The class packs see for `spec`: the pack's own class, or a facade over a function."""
    source = spec.source
    if isinstance(source, type):
        return source
    if callable(source) and getattr(source, "__node_spec__", None) is spec:
        return _facade_for_function(source)
    return None


class NodeClassMappings(dict):
    """`nodes.NODE_CLASS_MAPPINGS` of one session: a dict that follows the session's registry.

    ComfyUI's is one dict that grows as packs load; packs bind it at import (`from nodes import
    NODE_CLASS_MAPPINGS`) and read it later, while a prompt runs, expecting the nodes of packs
    loaded after them (the metadata savers look up every node of the prompt there). So every
    read first adds the node types the registry gained since the last one (the class packs see,
    `class_for`). An entry is never replaced: what a pack wrote reads back, as in ComfyUI, though
    the executor keeps running the registered node."""

    def __init__(self, registry: Any) -> None:
        super().__init__()
        self._registry = registry
        self._synced = 0  # the registry's size at the last sync (it only grows)

    def _sync(self) -> None:
        registry = self._registry
        if len(registry) == self._synced:
            return
        for spec in registry.specs():
            if not dict.__contains__(self, spec.node_id):
                cls = class_for(spec)
                if cls is not None:
                    dict.__setitem__(self, spec.node_id, cls)
        self._synced = len(registry)

    __hash__ = None  # type: ignore[assignment] -- a dict

    def copy(self) -> dict[str, type]:
        self._sync()
        return dict(dict.items(self))

    # Copied, it is ComfyUI's plain dict of classes (classes copy as themselves):
    # ComfyUI-to-Python-Extension keeps `copy.deepcopy(NODE_CLASS_MAPPINGS)` as its base set.
    def __deepcopy__(self, memo: dict) -> dict[str, type]:
        return copy.deepcopy(self.copy(), memo)

    def __reduce__(self) -> tuple:
        return (dict, (self.copy(),))


def _synced(name: str) -> Callable[..., Any]:
    """`dict.<name>` after the mapping caught up with its registry."""
    method = getattr(dict, name)

    def read(self: NodeClassMappings, *args: Any, **kwargs: Any) -> Any:
        self._sync()
        return method(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    return read


# Every way of reading a dict (a C-level reader goes through these too: dict(m), {**m}, json
# iterate a subclass through __iter__ / keys when those are overridden).
for _name in ("__getitem__", "__contains__", "__iter__", "__len__", "__repr__", "__eq__", "get", "keys", "values",
              "items"):
    setattr(NodeClassMappings, _name, _synced(_name))


def node_class_mappings() -> NodeClassMappings:
    """`nodes.NODE_CLASS_MAPPINGS`: every node type of the active session's registry (the same
    dict object on every read in a session)."""
    session = active()
    mappings = session.node_class_mappings
    if mappings is None or mappings._registry is not session.registry:
        mappings = session.node_class_mappings = NodeClassMappings(session.registry)
    return mappings


def node_display_name_mappings() -> dict[str, str]:
    return {spec.node_id: spec.display_name for spec in active().registry.specs()}


def common_ksampler(model: Any, seed: int, steps: int, cfg: float, sampler_name: str, scheduler: str,
                    positive: Any, negative: Any, latent: dict, denoise: float = 1.0, disable_noise: bool = False,
                    start_step: int | None = None, last_step: int | None = None,
                    force_full_denoise: bool = False) -> tuple[dict]:
    """ComfyUI's `nodes.common_ksampler` (same parameters), over the built-in sampler."""
    from nodes.sampling import common_ksampler as ours

    return ours(model, seed, steps, cfg, sampler_name, scheduler, positive, negative, latent,
                denoise=denoise, disable_noise=disable_noise, start_step=start_step, last_step=last_step,
                force_full_denoise=force_full_denoise)


def get_module_name(module_path: str) -> str:
    """ComfyUI's `nodes.get_module_name`: a pack's module name from its path (the last path
    part, without its extension when it is a file)."""
    import os

    base = os.path.basename(module_path)
    return os.path.splitext(base)[0] if os.path.isfile(module_path) else base


def interrupt_processing(value: bool = True) -> None:
    """ComfyUI's `nodes.interrupt_processing`: interrupt the running prompt."""
    from compat.devices import interrupt_current_processing

    interrupt_current_processing(value)


def before_node_execution() -> None:
    """ComfyUI's `nodes.before_node_execution`: raise when the running prompt was interrupted."""
    from compat.devices import throw_exception_if_processing_interrupted

    throw_exception_if_processing_interrupted()


def pack_loading_functions() -> dict[str, Callable[..., Any]]:
    """ComfyUI's `load_custom_node`, `init_extra_nodes`, ... (compat/pack_loading_api.py)."""
    from compat import pack_loading_api as api

    return {name: getattr(api, name) for name in ("load_custom_node", "init_external_custom_nodes",
                                                   "init_builtin_extra_nodes", "init_builtin_api_nodes",
                                                   "init_extra_nodes")}


# ComfyUI's module-level functions of nodes.py that packs call.
_MODULE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "common_ksampler": common_ksampler, "interrupt_processing": interrupt_processing,
    "before_node_execution": before_node_execution, "get_module_name": get_module_name,
    **pack_loading_functions(),
}


def attribute(name: str) -> Any:
    """The value of `nodes.<name>` for ComfyUI's names; AttributeError otherwise."""
    if name.startswith("__"):
        raise AttributeError(f"module 'nodes' has no attribute {name!r}")
    if name == "MAX_RESOLUTION":
        return MAX_RESOLUTION
    if name == "NODE_CLASS_MAPPINGS":
        return node_class_mappings()
    if name == "NODE_DISPLAY_NAME_MAPPINGS":
        return node_display_name_mappings()
    if name in _MODULE_FUNCTIONS:
        return _MODULE_FUNCTIONS[name]
    if name == "LOADED_MODULE_DIRS":
        # ComfyUI's {pack module name: its folder} of the packs that loaded (the active session's)
        return {pack.name: str(Path(pack.path).resolve()) for pack in active().packs if pack.ok}
    fn = _builtin_function(name)
    if fn is not None:
        return _facade_for_function(fn)
    from compat.reexports import resolve, source_of

    if source_of("nodes", name) is not None:  # a name nodes.py imported (`nodes.args`, `nodes.io`)
        return resolve("nodes", name)
    raise AttributeError(f"module 'nodes' has no attribute {name!r} (not a built-in node or a ComfyUI name "
                         f"this engine provides)")
