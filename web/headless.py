"""`python main.py run FILE`: run one workflow without a server.

The file is an API-format prompt, a saved `POST /prompt` body, a workflow saved by the editor or
an official template (converted as the editor does when it queues, subgraphs flattened:
`graph.editor_workflow`), or an image, video or audio file that carries its workflow (PNG / WebP /
MP4 / WebM / FLAC as the save nodes write them, `web.workflow_files`; the embedded API prompt is
run when there is one, else the embedded editor workflow).

Same environment, registry, validation and executor as the server; events drive a terminal
progress bar instead of WebSocket messages. Exit status: 0 success, 1 invalid workflow or a node
failed, 2 the file cannot be read, 130 interrupted (Ctrl+C).
"""
from __future__ import annotations

import asyncio
import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from graph.editor_workflow import EditorWorkflowError, editor_to_prompt, is_editor_workflow
from web.bootstrap import build_environment, build_registry, cache_config
from web.config import ServerConfig
from web.workflow_files import EmbeddedWorkflowError, read_embedded, sniff

EXIT_OK, EXIT_FAILED, EXIT_UNREADABLE, EXIT_INTERRUPTED = 0, 1, 2, 130
BAR_WIDTH = 30


class WorkflowFileError(ValueError):
    """The workflow file is missing, not JSON, or in no format we can run."""


def load_api_workflow(path: Path) -> dict:
    """The API-format prompt in `path` (`{id: {class_type, inputs}}`), or the editor's workflow
    (`{"nodes", "links", ...}`, see `graph.editor_workflow.is_editor_workflow`), read from a JSON
    file or from the metadata of an image / video / audio file, or `WorkflowFileError`."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise WorkflowFileError(f"cannot read workflow {path}: {exc.strerror or exc}") from None
    if sniff(raw[:16]) is not None:
        try:
            embedded = read_embedded(Path(path))
        except EmbeddedWorkflowError as exc:
            raise WorkflowFileError(str(exc)) from None
        return embedded.get("prompt") or embedded["workflow"]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise WorkflowFileError(f"{path} is not a workflow: neither JSON text nor an image, video or audio file "
                                "that carries one") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise WorkflowFileError(f"workflow {path} is not valid JSON: {exc}") from None
    if isinstance(data, dict) and "prompt" in data and isinstance(data["prompt"], dict) and "nodes" not in data:
        data = data["prompt"]  # a saved POST /prompt body
    if is_editor_workflow(data):
        return data
    if not isinstance(data, dict) or not data:
        raise WorkflowFileError(f"workflow {path} must be a JSON object mapping node ids to "
                                "{\"class_type\", \"inputs\"}")
    return data


def describe_validation_error(error: dict | None, node_errors: dict) -> str:
    """A validation failure in plain words, one line per problem."""
    lines = []
    if error:
        message, details = error.get("message", "invalid workflow"), error.get("details") or ""
        lines.append(f"The workflow is not valid: {message}" + (f" ({details})" if details and details != message
                                                                 else ""))
    for node_id, info in (node_errors or {}).items():
        for err in info.get("errors", []):
            details = err.get("details") or ""
            lines.append(f"  node {node_id} ({info.get('class_type', '?')}): {err.get('message', '')}"
                         + (f": {details}" if details else ""))
    return "\n".join(lines)


@dataclass
class ProgressPrinter:
    """Prints which node runs and a step bar for nodes that report progress."""

    out: TextIO
    prompt: dict
    total_nodes: int
    started: int = 0
    errors: list[dict] = field(default_factory=list)
    _bar_open: bool = False

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "progress_state":
            return  # nothing here needs its map, which is built only when read (graph/progress.py)
        data = event.data or {}
        if kind == "executing" and data.get("node") is not None:
            self.close_bar()
            self.started += 1
            node = str(data["node"])
            class_type = (self.prompt.get(node) or {}).get("class_type", "?")
            self.out.write(f"[{self.started}] {class_type} (node {node})\n")
        elif kind == "progress":
            value, total = float(data.get("value", 0)), float(data.get("max", 1) or 1)
            filled = int(BAR_WIDTH * min(max(value / total, 0.0), 1.0))
            self.out.write(f"\r    [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {value:g}/{total:g}")
            self._bar_open = True
        elif kind == "execution_error":
            self.close_bar()
            self.errors.append(data)
        self.out.flush()

    def close_bar(self) -> None:
        if self._bar_open:
            self.out.write("\n")
            self._bar_open = False


def output_files(env: Any, ui_outputs: dict) -> list[Path]:
    """Files that nodes wrote and reported in their UI output (`{filename, subfolder, type}`
    items in the output or temp folder; an `input` item is a preview of a file the prompt read,
    LoadVideo's, not one it wrote)."""
    folders = {"output": env.output_dir, "temp": env.temp_dir}
    paths = []
    for ui in (ui_outputs or {}).values():
        for items in (ui or {}).values() if isinstance(ui, dict) else ():
            for item in items if isinstance(items, list) else ():
                if isinstance(item, dict) and "filename" in item and item.get("type", "output") in folders:
                    base = Path(folders[item.get("type", "output")])
                    paths.append(base / (item.get("subfolder") or "") / item["filename"])
    return paths


async def run_workflow(config: ServerConfig, workflow: Path, *, out: TextIO, err: TextIO,
                       interrupt: threading.Event | None = None) -> int:
    """Run `workflow`; returns the process exit status."""
    from compat.execution_api import SessionRoutes
    from graph.executor import Executor
    from graph.validation import validate_prompt

    try:
        prompt = load_api_workflow(workflow)
    except WorkflowFileError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_UNREADABLE
    import compat
    from graph.registry import Registry
    from web.comfy_args import comfy_args

    env, custom_dirs = build_environment(config)
    # ComfyUI's import surface for packs, answering comfy.cli_args with this run's flags
    session = compat.install(env, Registry(), comfy_args=comfy_args(config))
    registry, _packs = build_registry(config, custom_dirs, compat_session=session)
    if is_editor_workflow(prompt):
        try:
            prompt = editor_to_prompt(prompt, registry.object_info(env))
        except EditorWorkflowError as exc:
            err.write(f"error: {exc}\n")
            return EXIT_FAILED
    result = await validate_prompt(prompt, registry, env=env)
    if not result.ok:
        err.write(describe_validation_error(result.error, result.node_errors) + "\n")
        return EXIT_FAILED
    if result.node_errors:
        err.write("warning: some outputs are skipped:\n" + describe_validation_error(None, result.node_errors) + "\n")
    executor = Executor(registry, cache=cache_config(config), env=env, before_node_call=[session.before_node_call],
                        recover=env.memory.recover if env.memory else None, routes=SessionRoutes(session))
    printer = ProgressPrinter(err, prompt, len(prompt))
    stop = interrupt or threading.Event()
    outcome = await executor.execute(prompt, str(uuid.uuid4()), outputs=list(result.outputs), extra_data={},
                                     sink=printer, interrupt=stop)
    printer.close_bar()
    if outcome.status == "interrupted":
        err.write("interrupted\n")
        return EXIT_INTERRUPTED
    if outcome.status != "success":
        for data in printer.errors or [{}]:
            node = data.get("node_id", "?")
            err.write(f"error: node {node} ({data.get('node_type', '?')}) failed: "
                      f"{data.get('exception_type', 'error')}: {data.get('exception_message', 'unknown error')}\n")
        return EXIT_FAILED
    files = output_files(env, outcome.ui_outputs)
    for path in files:
        out.write(f"wrote {_shown(path)}\n")
    if not files:
        out.write(f"done; no files were written (output folder: {env.output_dir})\n")
    return EXIT_OK


def _shown(path: Path) -> str:
    """`path` relative to the current folder when it is inside it (`output/demo_00001_.png`, as
    the README shows), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_workflow_sync(config: ServerConfig, workflow: Path, *, out: TextIO, err: TextIO) -> int:
    stop = threading.Event()
    try:
        return asyncio.run(run_workflow(config, workflow, out=out, err=err, interrupt=stop))
    except KeyboardInterrupt:
        stop.set()
        err.write("\ninterrupted\n")
        return EXIT_INTERRUPTED
