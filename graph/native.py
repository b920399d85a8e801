"""Native node declaration: typed inputs and outputs on a plain function.

    @node("EmptyLatentImage", category="latent",
          inputs=[Int("width", default=512, min=16, max=MAX_RESOLUTION, step=8), ...],
          outputs=[Output("LATENT")])
    def empty_latent_image(width: int, height: int, batch_size: int):
        return ({"samples": ...},)

The decorator attaches a `NodeSpec` as `fn.__node_spec__` and returns the function unchanged, so
it stays an ordinary, directly testable function. Registration happens explicitly
(`Registry.add_native(fn)`); nothing is registered at import time.

Parameter names must equal input names (checked here, at declaration). A function that needs the
running node's context (progress, interrupt, environment) calls `graph.context.current()`.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Sequence

from graph.spec import HIDDEN, OPTIONAL, REQUIRED, InputSpec, NodeBehaviour, NodeSpec, OutputSpec

MAX_RESOLUTION = 16384


class NodeDeclarationError(TypeError):
    """A native node declaration is inconsistent with its function."""


def Input(name: str, type: Any, *, optional: bool = False, **options: Any) -> InputSpec:
    """A linked (socket) input of any wire type, e.g. `Input("model", "MODEL")`."""
    return InputSpec(name, type, OPTIONAL if optional else REQUIRED, options)


def Int(name: str, *, default: int = 0, min: int | None = None, max: int | None = None,
        step: int | None = None, optional: bool = False, **options: Any) -> InputSpec:
    opts = {"default": default, **_present(min=min, max=max, step=step), **options}
    return InputSpec(name, "INT", OPTIONAL if optional else REQUIRED, opts)


def Float(name: str, *, default: float = 0.0, min: float | None = None, max: float | None = None,
          step: float | None = None, optional: bool = False, **options: Any) -> InputSpec:
    opts = {"default": default, **_present(min=min, max=max, step=step), **options}
    return InputSpec(name, "FLOAT", OPTIONAL if optional else REQUIRED, opts)


def String(name: str, *, default: str | None = "", multiline: bool = False, optional: bool = False,
           **options: Any) -> InputSpec:
    """A STRING widget; `default=None` declares none (ComfyUI's text prompts have none)."""
    opts = {**_present(default=default), **({"multiline": True} if multiline else {}), **options}
    return InputSpec(name, "STRING", OPTIONAL if optional else REQUIRED, opts)


def Boolean(name: str, *, default: bool = False, optional: bool = False, **options: Any) -> InputSpec:
    return InputSpec(name, "BOOLEAN", OPTIONAL if optional else REQUIRED, {"default": default, **options})


def Combo(name: str, options: Sequence[Any] | Callable[[Any], list], *, default: Any = None,
          optional: bool = False, **extra: Any) -> InputSpec:
    """A choice among values; `options` may be a callable `(env) -> list` for live file lists."""
    values = list(options) if not callable(options) else options
    opts = {**({"default": default} if default is not None else {}), **extra}
    return InputSpec(name, values, OPTIONAL if optional else REQUIRED, opts)


def Hidden(name: str, kind: str) -> InputSpec:
    """A hidden input filled by the executor: PROMPT, DYNPROMPT, EXTRA_PNGINFO, UNIQUE_ID."""
    return InputSpec(name, kind, HIDDEN)


def Output(type: Any, name: str | None = None, *, is_list: bool = False,
           tooltip: str | None = None) -> OutputSpec:
    return OutputSpec(type, name or str(type), is_list, tooltip)


def node(node_id: str, *, inputs: Iterable[InputSpec] = (), outputs: Iterable[OutputSpec] = (),
         category: str = "sd", display_name: str | None = "", description: str = "",
         output_node: bool = False, input_is_list: bool = False, not_idempotent: bool = False,
         deprecated: bool = False, experimental: bool = False, python_module: str = "nodes",
         is_changed: Callable[..., Any] | None = None,
         validate_inputs: Callable[..., Any] | None = None,
         check_lazy_status: Callable[..., Any] | None = None,
         search_aliases: Iterable[str] = (), essentials_category: str | None = None) -> Callable[[Callable], Callable]:
    """Declare `fn` as node type `node_id`. See the module docstring."""
    inputs, outputs = tuple(inputs), tuple(outputs)

    def decorate(fn: Callable) -> Callable:
        _check_signature(node_id, fn, inputs)
        validate_params, takes_all, takes_types = _validate_shape(validate_inputs)
        behaviour = NodeBehaviour(
            make_instance=lambda: None,
            call=lambda _instance, **kw: fn(**kw),
            is_changed=is_changed,
            validate_inputs=validate_inputs,
            validate_params=validate_params,
            validate_takes_all=takes_all,
            validate_takes_input_types=takes_types,
            check_lazy_status=(lambda _instance, **kw: check_lazy_status(**kw)) if check_lazy_status else None,
            is_coroutine=inspect.iscoroutinefunction(fn),
        )
        fn.__node_spec__ = NodeSpec(
            node_id=node_id, inputs=inputs, outputs=outputs, behaviour=behaviour,
            display_name=display_name or "", display_name_declared=display_name is not None,
            category=category, description=description,
            python_module=python_module, output_node=output_node, input_is_list=input_is_list,
            not_idempotent=not_idempotent, deprecated=deprecated, experimental=experimental,
            origin="native", source=fn,
            search_aliases=tuple(search_aliases), essentials_category=essentials_category,
        )
        return fn

    return decorate


def spec_of(fn: Callable) -> NodeSpec:
    try:
        return fn.__node_spec__
    except AttributeError:
        raise NodeDeclarationError(f"{fn!r} is not declared with @node") from None


def _present(**values: Any) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def _check_signature(node_id: str, fn: Callable, inputs: tuple[InputSpec, ...]) -> None:
    params = inspect.signature(fn).parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    declared = {i.name for i in inputs}
    missing = declared - named
    if missing and not takes_kwargs:
        raise NodeDeclarationError(f"node {node_id!r}: inputs {sorted(missing)} have no parameter in {fn.__name__}()")
    extra = {n for n in named - declared if params[n].default is inspect.Parameter.empty}
    if extra:
        raise NodeDeclarationError(f"node {node_id!r}: parameters {sorted(extra)} of {fn.__name__}() are not declared inputs")
    for spec in inputs:
        if spec.section == OPTIONAL and spec.name in params and params[spec.name].default is inspect.Parameter.empty:
            raise NodeDeclarationError(f"node {node_id!r}: optional input {spec.name!r} needs a default in {fn.__name__}()")


def _validate_shape(fn: Callable | None) -> tuple[frozenset[str], bool, bool]:
    if fn is None:
        return frozenset(), False, False
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    names = frozenset(n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    return names - {"input_types"}, takes_all, "input_types" in names
