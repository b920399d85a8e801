"""Write docs/nodes.md (from the built-in node registry) and docs/flags.md (from main.py's parsers).

    .venv/bin/python scripts/gen_docs.py            # rewrite both files
    .venv/bin/python scripts/gen_docs.py --check    # exit 1, naming the stale files, when they differ

Both pages are made only from code, in a fixed order and without timestamps, so a change to a
node declaration or a flag shows up as a stale page in `tests/scripts/test_docs.py`. The registry
is the built-in one (`nodes.register_builtin_nodes`), without custom packs and without the compat
layer; nothing here imports torch or loads a model. Combo inputs whose options are computed at
run time (file lists) are shown as such, never evaluated.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parent.parent
NODES_MD = REPO / "docs" / "nodes.md"
FLAGS_MD = REPO / "docs" / "flags.md"
COMMAND = ".venv/bin/python scripts/gen_docs.py"
MAX_LISTED_OPTIONS = 6  # a combo with more options is shown by its count

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


# How a node that ComfyUI declares with an empty category (FluxKVCache) is listed.
NO_CATEGORY = "(no category)"


def _header(title: str, source: str) -> list[str]:
    return [f"# {title}", "",
            f"Generated from {source} by `{COMMAND}`; do not edit by hand: `--check` says when the page "
            "is stale, and so does `tests/scripts/test_docs.py`.", ""]


def _cell(text: str) -> str:
    """Text safe inside one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{_cell(str(text))}`"


# -- nodes --------------------------------------------------------------------------------------
def builtin_registry() -> Any:
    """The registry a server starts from, before any pack is loaded."""
    from graph.registry import Registry
    from nodes import register_builtin_nodes

    registry = Registry()
    register_builtin_nodes(registry)
    return registry


def _input_type(spec: Any) -> str:
    if not spec.is_combo:
        return _code(spec.type)
    if not isinstance(spec.type, (list, tuple)):
        return "COMBO (options computed at run time)"
    values = list(spec.type)
    if len(values) <= MAX_LISTED_OPTIONS:
        return "COMBO: " + ", ".join(_code(v) for v in values) if values else "COMBO (empty)"
    return f"COMBO ({len(values)} options)"


def _inputs(node: Any) -> str:
    from graph.spec import HIDDEN, OPTIONAL

    parts = []
    for spec in node.inputs:
        if spec.section == HIDDEN:
            continue  # PROMPT, UNIQUE_ID, ...: filled by the server, never wired
        mark = " (optional)" if spec.section == OPTIONAL else ""
        parts.append(f"{_cell(spec.name)}: {_input_type(spec)}{mark}")
    return "<br>".join(parts) or "—"


def _outputs(node: Any) -> str:
    parts = []
    for out in node.outputs:
        text = _code(out.type)
        if out.name != str(out.type):
            text = f"{_cell(out.name)}: {text}"
        if out.is_list:
            text += " (list)"
        parts.append(text)
    return "<br>".join(parts) or "—"


def _display(node: Any) -> str:
    name = _cell(node.display_name) if node.display_name_declared else "—"
    flags = [word for word, on in (("output node", node.output_node), ("deprecated", node.deprecated),
                                   ("experimental", node.experimental)) if on]
    return name + (f" ({', '.join(flags)})" if flags else "")


def render_nodes(registry: Any = None) -> str:
    """docs/nodes.md: every built-in node type by category, in name order."""
    registry = registry if registry is not None else builtin_registry()
    by_category: dict[str, list[Any]] = defaultdict(list)
    for node in registry.specs():
        by_category[node.category].append(node)
    lines = _header("Built-in nodes", "the built-in node registry (`nodes/`, `graph/registry.py`)")
    lines += [f"{len(registry)} node types in {len(by_category)} categories, each with ComfyUI's class name "
              "(what a workflow's `class_type` says), the display name the editor shows, and its sockets: "
              "inputs as `name: TYPE` (hidden inputs such as `PROMPT` or `UNIQUE_ID` left out; a combo "
              "lists its options, or their count, or says that they are computed at run time: files, samplers, ...), "
              "outputs as `name: TYPE` where the name is not the type. `GET /object_info` gives the full "
              "declarations (defaults, ranges, tooltips). Packs add their own nodes to these.", "",
              "| category | nodes |", "|---|---|"]
    lines += [f"| {_cell(category or NO_CATEGORY)} | {len(by_category[category])} |" for category in sorted(by_category)]
    for category in sorted(by_category):
        lines += ["", f"## {_cell(category or NO_CATEGORY)}", "", "| node | display name | inputs | outputs |", "|---|---|---|---|"]
        for node in sorted(by_category[category], key=lambda n: n.node_id):
            lines.append(f"| {_code(node.node_id)} | {_display(node)} | {_inputs(node)} | {_outputs(node)} |")
    return "\n".join(lines) + "\n"


# -- flags --------------------------------------------------------------------------------------
def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's own expansion (%(default)s, ...)
        text = text % {**vars(action), "prog": prog}
    return text


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        shown = "|".join(str(c) for c in action.choices)
    else:
        shown = action.metavar or action.dest.upper()
        shown = shown if isinstance(shown, str) else " ".join(shown)
    if action.nargs == "?":
        return f"[{shown}]"
    if action.nargs in ("*", "+"):
        return f"{shown} …"
    return shown


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default is None or action.default == []:
        return ""
    default = action.default
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return _code(default)


def _groups(parser: argparse.ArgumentParser) -> Iterable[tuple[str, list[argparse.Action]]]:
    for group in parser._action_groups:  # argparse keeps no public list of its groups
        actions = [a for a in group._group_actions if a.option_strings and a.help != argparse.SUPPRESS]
        if actions:
            yield group.title or "options", actions


def render_flags() -> str:
    """docs/flags.md: every flag of `main.py` (serve) and which of them `main.py run` takes."""
    import main
    from web.flags import NO_EFFECT

    serve = main.build_serve_parser()
    run = main.build_run_parser()
    run_flags = {o for a in run._actions for o in a.option_strings}
    count = sum(1 for _, actions in _groups(serve) for a in actions if "--help" not in a.option_strings)
    lines = _header("Command-line flags", "`main.py`'s argument parsers (`web/flags.py`)")
    lines += [f"`python main.py [FLAGS]` serves; `python main.py run WORKFLOW.json [FLAGS]` runs one workflow "
              f"without a server. {count} flags, ComfyUI 0.3.64's spellings and value shapes plus ours "
              "(`--cache-ram`, `--ray*`); abbreviations are refused. *run*: whether `main.py run` "
              "takes the flag too. *no effect*: accepted so ComfyUI launch scripts start, named in one "
              "warning line when given. What the flags that act do, in more words: "
              "[server.md](server.md#flags).", ""]
    for title, actions in _groups(serve):
        lines += [f"## {_cell(title)}", "", "| flag | value | default | run | help |", "|---|---|---|---|---|"]
        for action in actions:
            flags = ", ".join(_code(o) for o in action.option_strings)
            help_text = _cell(_help(action, serve.prog))
            if action.dest in NO_EFFECT:  # the help of some already says so: say it once
                rest = help_text.removeprefix("accepted").lstrip("; ").removeprefix("no effect here").strip()
                help_text = f"*no effect*{'; ' + rest if rest else ''}"
            taken = "yes" if set(action.option_strings) & run_flags else ""
            lines.append(f"| {flags} | {_cell(_value(action))} | {_default(action)} | {taken} | {help_text} |")
        lines.append("")
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------
def generated() -> dict[Path, str]:
    """Each generated page and the text it should hold now."""
    return {NODES_MD: render_nodes(), FLAGS_MD: render_flags()}


def stale(pages: dict[Path, str] | None = None) -> list[Path]:
    pages = pages if pages is not None else generated()
    return [path for path, text in pages.items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    pages = generated()
    outdated = stale(pages)
    if args.check:
        for path in outdated:
            print(f"{path.relative_to(REPO)} is stale: run {COMMAND}", file=sys.stderr)
        return 1 if outdated else 0
    for path in outdated:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pages[path], encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
