"""Packs that fail, hang or exit at import, in INPUT_TYPES() or in a web route affect no other pack
and not the server; the log, /object_info and GET /custom_nodes/status say which pack and why
(graph/pack_isolation.py, graph/packs.py, compat/prompt_server.py).

Hangs are made with events the test holds (module `pack_isolation_gates`), never with sleeps:
a pack waits on `release`, the test sees it waiting through `entered`, and releases it at the end.
The limits used here only decide when the loader gives up; no test asserts a duration."""
from __future__ import annotations

import logging
import os
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

from graph.pack_isolation import PackLimits, PackTimeoutError, abandoned_calls
from graph.packs import load_custom_nodes
from graph.registry import Registry

SHORT = PackLimits(import_timeout=1.0, call_timeout=1.0)  # what the loader waits for a hanging pack here

NODE = '''
class {cls}:
    CATEGORY = "isolation"
    @classmethod
    def INPUT_TYPES(cls):
        return {{"required": {{"x": ("INT", {{"default": 1}})}}}}
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    def run(self, x):
        return (x,)
'''


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def gates():
    """Events fixture packs wait on (`import pack_isolation_gates`); all released at the end."""
    gate = types.ModuleType("pack_isolation_gates")
    gate.entered = threading.Event()  # a pack reached its hanging point
    gate.release = threading.Event()  # the test lets it go on
    gate.hang_types = threading.Event()  # HangLater's INPUT_TYPES() hangs from now on
    gate.types_calls = []  # one entry per INPUT_TYPES() call of HangLater
    sys.modules[gate.__name__] = gate
    try:
        yield gate
    finally:
        gate.release.set()
        sys.modules.pop(gate.__name__, None)


def join_threads(part: str) -> None:
    """Wait for the abandoned calls whose label holds `part` (after their gate opened) to end."""
    for call in abandoned_calls():
        if part in call.label:
            call.settled.wait()


HANGS_AT_IMPORT = '''
import pack_isolation_gates as gate
gate.entered.set()
gate.release.wait()
''' + NODE.format(cls="TooLate") + 'NODE_CLASS_MAPPINGS = {"TooLate": TooLate}\n'


def test_an_import_that_hangs_is_abandoned_said_so_and_the_next_packs_load(tmp_path, gates, caplog):
    root = tmp_path / "custom_nodes"
    write(root / "a_hangs.py", HANGS_AT_IMPORT)
    write(root / "b_fine" / "__init__.py", NODE.format(cls="Fine") + 'NODE_CLASS_MAPPINGS = {"Fine": Fine}\n')
    registry = Registry()
    with caplog.at_level(logging.INFO, logger="graph.packs"):
        results = {r.name: r for r in load_custom_nodes(registry, [root], limits=SHORT)}
    assert gates.entered.is_set()  # it really was inside its import when the loader went on
    hung = results["a_hangs"]
    assert not hung.ok and hung.abandoned and "did not return within 1 s; abandoned" in hung.error
    assert "background thread" in hung.error and "a_hangs" in hung.error
    assert results["b_fine"].ok and "Fine" in registry
    assert "TooLate" not in registry
    assert "(IMPORT FAILED)" in caplog.text and "abandoned" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="graph.packs"):
        gates.release.set()
        join_threads("a_hangs")
    assert "the abandoned import of custom node pack a_hangs finished" in caplog.text
    assert "TooLate" not in registry  # what it did after the limit is not used


@pytest.mark.parametrize("limits", [SHORT, PackLimits.unbounded()], ids=["helper-thread", "caller-thread"])
def test_sys_exit_os_exit_and_abort_at_import_are_refused(tmp_path, limits):
    root = tmp_path / "custom_nodes"
    write(root / "exits_abort.py", "import os\nos.abort()\n")
    write(root / "exits_os.py", "import os\nos._exit(3)\n")
    write(root / "exits_sys.py", "import sys\nsys.exit(2)\n")
    write(root / "exits_captured.py", "from os import _exit\n_exit(4)\n")
    write(root / "z_fine.py", NODE.format(cls="Fine") + 'NODE_CLASS_MAPPINGS = {"Fine": Fine}\n')
    real_exit, real_abort = os._exit, os.abort
    registry = Registry()
    results = {r.name: r for r in load_custom_nodes(registry, [root], limits=limits)}
    assert not results["exits_sys"].ok and "SystemExit: 2" in results["exits_sys"].error
    for name, call in (("exits_os", "os._exit(3,)"), ("exits_abort", "os.abort()"), ("exits_captured", "os._exit(4,)")):
        assert not results[name].ok and "PackExitError" in results[name].error
        assert f"custom node pack {name} called {call} during its import; refused" in results[name].error
    assert results["z_fine"].ok and "Fine" in registry
    assert os._exit is real_exit and os.abort is real_abort  # put back once loading is over


def test_exits_in_prestartup_scripts_fail_that_script_only(tmp_path):
    from compat.startup import run_prestartup_scripts

    root = tmp_path / "custom_nodes"
    write(root / "a_os_exit" / "prestartup_script.py", "import os\nos._exit(5)\n")
    write(root / "a_os_exit" / "__init__.py", "")
    write(root / "b_sys_exit" / "prestartup_script.py", "raise SystemExit('bye')\n")
    write(root / "b_sys_exit" / "__init__.py", "")
    marker = tmp_path / "ran.txt"
    write(root / "c_fine" / "prestartup_script.py", f"open({str(marker)!r}, 'w').write('yes')\n")
    write(root / "c_fine" / "__init__.py", "")
    results = {r.name: r for r in run_prestartup_scripts([root])}
    assert not results["a_os_exit"].ok
    assert "custom node pack a_os_exit called os._exit(5,) during its prestartup script; refused" in \
        results["a_os_exit"].error
    assert not results["b_sys_exit"].ok and "SystemExit: bye" in results["b_sys_exit"].error
    assert results["c_fine"].ok and marker.read_text() == "yes"


HANGS_OR_RAISES = NODE.format(cls="Good") + '''
import pack_isolation_gates as gate

class Raises(Good):
    @classmethod
    def INPUT_TYPES(cls):
        raise RuntimeError("no model folder today")

class HangsAtLoad(Good):
    @classmethod
    def INPUT_TYPES(cls):
        gate.entered.set()
        gate.release.wait()
        return {"required": {}}

class HangLater(Good):
    @classmethod
    def INPUT_TYPES(cls):
        gate.types_calls.append(1)
        if gate.hang_types.is_set():
            gate.release.wait()
        return {"required": {"y": ("INT",)}}

NODE_CLASS_MAPPINGS = {"Good": Good, "Raises": Raises, "HangsAtLoad": HangsAtLoad, "HangLater": HangLater}
'''


def test_input_types_that_raises_or_hangs_leaves_only_that_node_out(tmp_path, gates, caplog):
    root = tmp_path / "custom_nodes"
    write(root / "mixed_pack" / "__init__.py", HANGS_OR_RAISES)
    write(root / "other.py", NODE.format(cls="Other") + 'NODE_CLASS_MAPPINGS = {"Other": Other}\n')
    registry = Registry()
    with caplog.at_level(logging.INFO, logger="graph.packs"):
        results = {r.name: r for r in load_custom_nodes(registry, [root], limits=SHORT)}
    pack = results["mixed_pack"]
    assert pack.ok and results["other"].ok
    # hanging while loading: that node alone is skipped, named in the log with its pack
    assert gates.entered.is_set() and pack.skipped == ["HangsAtLoad"] and "HangsAtLoad" not in registry
    assert "did not return within 1 s" in pack.node_errors["HangsAtLoad"]
    assert "custom node pack mixed_pack: node 'HangsAtLoad' is skipped" in caplog.text
    # raising: registered as ComfyUI does, then left out of /object_info alone
    assert "RuntimeError: no model folder today" in pack.node_errors["Raises"]

    caplog.clear()
    with caplog.at_level(logging.INFO):
        info = registry.object_info()
    assert {"Good", "HangLater", "Other"} <= set(info) and "Raises" not in info
    assert "custom node pack mixed_pack: node 'Raises' left out: INPUT_TYPES() raised RuntimeError" in caplog.text
    assert "no model folder today" in pack.node_errors["Raises"]
    assert "HangLater" not in pack.node_errors

    # hanging at /object_info time: bounded, that node left out, the others rendered
    gates.hang_types.set()
    calls_before = len(gates.types_calls)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        info = registry.object_info()
    assert {"Good", "Other"} <= set(info) and "HangLater" not in info
    assert "custom node pack mixed_pack: node 'HangLater' left out" in caplog.text and "abandoned" in caplog.text
    assert "abandoned" in pack.node_errors["HangLater"]
    # while that call is stuck the node is not called again (no second stuck thread) ...
    info = registry.object_info()
    assert "HangLater" not in info and len(gates.types_calls) == calls_before + 1
    assert "still running" in pack.node_errors["HangLater"]
    with pytest.raises(PackTimeoutError, match="still running"):
        registry.get("HangLater").current_inputs()  # a prompt's validation sees the same typed error
    # ... and once it returns, the node is back and its error cleared
    gates.hang_types.clear()
    gates.release.set()
    join_threads("HangLater")
    info = registry.object_info()
    assert info["HangLater"]["input"]["required"] == {"y": ("INT",)} and "HangLater" not in pack.node_errors


def test_a_pack_that_changes_another_packs_module_at_import_is_tolerated(tmp_path):
    """ComfyUI lets a pack patch another pack's classes and module (it is all one process); so do we."""
    root = tmp_path / "custom_nodes"
    write(root / "a_target" / "__init__.py", NODE.format(cls="Target") +
          'MODEL_LIST = ["a"]\nNODE_CLASS_MAPPINGS = {"Target": Target}\n')
    write(root / "b_patcher.py", '''
        import sys
        target = next(m for name, m in list(sys.modules.items()) if name.endswith("a_target"))
        target.MODEL_LIST.append("b")
        target.Target.CATEGORY = "patched by b"
        original = target.Target.INPUT_TYPES.__func__

        @classmethod
        def INPUT_TYPES(cls):
            types = original(cls)
            types["required"]["extra"] = ("FLOAT",)
            return types
        target.Target.INPUT_TYPES = INPUT_TYPES
        del target.NODE_CLASS_MAPPINGS
        NODE_CLASS_MAPPINGS = {}
    ''')
    registry = Registry()
    results = {r.name: r for r in load_custom_nodes(registry, [root], limits=SHORT)}
    assert results["a_target"].ok and results["b_patcher"].ok
    info = registry.object_info()["Target"]
    assert info["category"] == "isolation"  # read when registered, as ComfyUI's class attribute at load
    assert info["input"]["required"] == {"x": ("INT", {"default": 1}), "extra": ("FLOAT",)}  # re-read each time
    assert results["a_target"].module.MODEL_LIST == ["a", "b"]


def test_an_import_in_the_helper_thread_sees_an_event_loop_as_in_the_callers_thread(tmp_path):
    """Packs call `asyncio.get_event_loop()` at import (ComfyUI imports them inside its loop)."""
    root = tmp_path / "custom_nodes"
    write(root / "loop_user.py", "import asyncio\nLOOP = asyncio.get_event_loop()\n" +
          NODE.format(cls="LoopUser") + 'NODE_CLASS_MAPPINGS = {"LoopUser": LoopUser}\n')
    registry = Registry()
    [result] = load_custom_nodes(registry, [root], limits=SHORT)
    assert result.ok, result.error
    assert result.module.LOOP is not None and "LoopUser" in registry


SETS_A_SIGNAL_HANDLER = '''
import signal
from signal import signal as captured_signal
def on_usr1(signum, frame):
    pass
PREVIOUS = signal.signal(signal.SIGUSR1, on_usr1)
PREVIOUS_CAPTURED = captured_signal(signal.SIGUSR2, on_usr1)
''' + NODE.format(cls="SignalUser") + 'NODE_CLASS_MAPPINGS = {"SignalUser": SignalUser}\n'


@pytest.mark.parametrize("limits", [SHORT, PackLimits.unbounded()], ids=["helper-thread", "caller-thread"])
def test_a_pack_setting_a_signal_handler_at_import_loads_with_a_limit_and_a_hang_is_still_reported(
        tmp_path, gates, limits):
    """ComfyUI imports packs in the main thread, where `signal.signal()` works; with a limit the
    import runs in a helper thread, and the call is done by the main thread waiting for it."""
    import signal
    root = tmp_path / "custom_nodes"
    write(root / "a_signals.py", SETS_A_SIGNAL_HANDLER)
    if limits.import_timeout is not None:
        write(root / "b_hangs.py", HANGS_AT_IMPORT)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGUSR2)}
    real_signal = signal.signal
    try:
        registry = Registry()
        results = {r.name: r for r in load_custom_nodes(registry, [root], limits=limits)}
        assert results["a_signals"].ok, results["a_signals"].error
        module = results["a_signals"].module
        assert signal.getsignal(signal.SIGUSR1) is module.on_usr1
        assert signal.getsignal(signal.SIGUSR2) is module.on_usr1
        assert module.PREVIOUS is saved[signal.SIGUSR1] and module.PREVIOUS_CAPTURED is saved[signal.SIGUSR2]
        assert "SignalUser" in registry
        assert signal.signal is real_signal  # put back once loading is over
        if limits.import_timeout is not None:
            hung = results["b_hangs"]
            assert not hung.ok and hung.abandoned and "did not return within 1 s; abandoned" in hung.error
            gates.release.set()
            join_threads("b_hangs")
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_signal_call_from_an_abandoned_import_fails_as_outside_the_main_thread(tmp_path, gates):
    """Once the loader stopped waiting, nobody can set the handler for the pack: the late call
    raises what `signal.signal()` raises outside the main thread, and only that pack is hit."""
    import signal
    root = tmp_path / "custom_nodes"
    write(root / "late_signal.py", '''
import signal
import pack_isolation_gates as gate
gate.entered.set()
gate.release.wait()
try:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
except ValueError as exc:
    gate.types_calls.append(str(exc))
''')
    saved = signal.getsignal(signal.SIGUSR1)
    results = load_custom_nodes(Registry(), [root], limits=SHORT)
    assert results[0].abandoned
    gates.release.set()
    join_threads("late_signal")
    assert gates.types_calls and "main thread" in gates.types_calls[0]
    assert signal.getsignal(signal.SIGUSR1) is saved


def test_pack_limits_refuse_nonsense():
    with pytest.raises(ValueError, match="import_timeout"):
        PackLimits(import_timeout=0)
    with pytest.raises(ValueError, match="call_timeout"):
        PackLimits(call_timeout=-1.0)


# -- through the server: compat surface, routes, /object_info, GET /custom_nodes/status -------------

ROUTES_PACK = NODE.format(cls="RouteNode") + '''
import nodes
from aiohttp import web
from server import PromptServer

routes = PromptServer.instance.routes

@routes.get("/isolation/boom")
async def boom(request):
    raise KeyError("the pack's bug")

@routes.get("/isolation/ok")
async def fine(request):
    return web.json_response({"ok": True})

@routes.get("/isolation/missing")
async def missing(request):
    raise web.HTTPNotFound(text="not here")

# A pack that reaches into the shared mappings and another pack's class at import (ComfyUI allows it).
target = nodes.NODE_CLASS_MAPPINGS["Target"]
target.DESCRIPTION = "patched by routes_pack"
nodes.NODE_CLASS_MAPPINGS["Target"] = RouteNode
nodes.NODE_DISPLAY_NAME_MAPPINGS.update({"Target": "Renamed"})
NODE_CLASS_MAPPINGS = {"RouteNode": RouteNode}
'''


V3_HANGS = '''
import pack_isolation_gates as gate
from comfy_api.latest import ComfyExtension, io


class V3First(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3First", category="isolation", inputs=[io.Int.Input("x")],
                         outputs=[io.Int.Output()])

    @classmethod
    def execute(cls, x):
        return io.NodeOutput(x)


class V3Stuck(V3First):
    @classmethod
    def define_schema(cls):
        gate.release.wait()
        return io.Schema(node_id="V3Stuck", category="isolation", inputs=[], outputs=[])


class V3Late(V3First):
    @classmethod
    def define_schema(cls):
        return io.Schema(node_id="V3Late", category="isolation", inputs=[], outputs=[])


class Extension(ComfyExtension):
    async def get_node_list(self):
        return [V3First, V3Stuck, V3Late]


async def comfy_entrypoint():
    return Extension()
'''


async def test_a_server_keeps_serving_around_broken_packs_and_says_which_and_why(tmp_path, gates, caplog):
    from tests.compat.compat_harness import start_pack_server

    root = tmp_path / "custom_nodes"
    write(root / "a_target.py", NODE.format(cls="Target") + 'NODE_CLASS_MAPPINGS = {"Target": Target}\n')
    write(root / "hangs_at_import.py", HANGS_AT_IMPORT)
    write(root / "mixed_pack" / "__init__.py", HANGS_OR_RAISES)
    write(root / "raises_at_import.py", "raise ImportError('needs a library that is not installed')\n")
    write(root / "routes_pack" / "__init__.py", ROUTES_PACK)
    write(root / "v3_hangs" / "__init__.py", V3_HANGS)
    with caplog.at_level(logging.INFO):
        server = await start_pack_server(tmp_path, custom_node_dirs=(root,), custom_node_import_timeout=1.0,
                                         custom_node_call_timeout=1.0)
    try:
        status = {p["name"]: p for p in (await server.get_json("/custom_nodes/status"))["packs"]}
        assert status["hangs_at_import"]["ok"] is False and status["hangs_at_import"]["abandoned"] is True
        assert "abandoned" in status["hangs_at_import"]["error"]
        assert status["raises_at_import"]["ok"] is False
        assert "needs a library that is not installed" in status["raises_at_import"]["error"]
        assert status["mixed_pack"]["ok"] and status["mixed_pack"]["skipped"] == ["HangsAtLoad"]
        assert set(status["mixed_pack"]["node_errors"]) == {"HangsAtLoad", "Raises"}
        assert status["routes_pack"]["ok"] and status["a_target"]["ok"]
        # a V3 registration that hangs (define_schema) is abandoned like an import
        assert status["v3_hangs"]["ok"] is False and status["v3_hangs"]["abandoned"] is True
        assert "registration (comfy_entrypoint) of custom node pack v3_hangs did not return" in \
            status["v3_hangs"]["error"]
        assert "hangs_at_import.py (IMPORT FAILED)" in caplog.text.replace(str(root) + os.sep, "")

        caplog.clear()
        with caplog.at_level(logging.INFO):
            info = await server.get_json("/object_info")
        assert {"Good", "HangLater", "RouteNode", "Target", "KSampler"} <= set(info)
        assert not {"Raises", "HangsAtLoad", "TooLate", "V3Stuck", "V3Late"} & set(info)
        assert "V3First" in info  # registered before the hang: kept, as ComfyUI keeps what it registered
        assert "custom node pack mixed_pack: node 'Raises' left out" in caplog.text
        # routes_pack changed a_target's class and the shared mappings at import: both packs load,
        # both serve their nodes (that the change shows, as in ComfyUI, is compat/node_facades.py's and
        # graph/v1.py's business, not isolation's)
        assert info["RouteNode"]["python_module"] == "custom_nodes.routes_pack"

        caplog.clear()
        with caplog.at_level(logging.INFO):
            async with server.session.get(f"{server.url}/isolation/boom") as resp:
                assert resp.status == 500 and resp.content_type == "application/json"
                error = (await resp.json())["error"]
        assert error["type"] == "custom_node_route_error" and "KeyError" in error["message"]
        assert error["extra_info"] == {"pack": "routes_pack", "method": "GET", "path": "/isolation/boom"}
        assert "custom node pack routes_pack: route GET /isolation/boom raised KeyError" in caplog.text
        async with server.session.get(f"{server.url}/api/isolation/boom") as resp:
            assert resp.status == 500 and (await resp.json())["error"]["extra_info"]["pack"] == "routes_pack"
        async with server.session.get(f"{server.url}/isolation/missing") as resp:
            assert resp.status == 404 and "not here" in await resp.text()  # aiohttp's answers pass through
        assert await server.get_json("/isolation/ok") == {"ok": True}
        assert "KSampler" in await server.get_json("/object_info")
    finally:
        await server.close()
        gates.release.set()
        join_threads("hangs_at_import")
        join_threads("v3_hangs")
    # the abandoned registration went on once released: what it registered then was refused
    assert "V3Late" not in server.state.registry and "V3Stuck" not in server.state.registry


def test_the_limits_come_from_flags_and_zero_means_no_limit():
    import main
    from web.bootstrap import pack_limits
    from web.config import ServerConfig

    flags = ["--custom-node-import-timeout", "12.5", "--custom-node-call-timeout", "0"]
    for parser, argv in ((main.build_serve_parser(), flags), (main.build_run_parser(), ["workflow.json", *flags])):
        config = main.config_from_args(parser.parse_args(argv), argv)
        assert (config.custom_node_import_timeout, config.custom_node_call_timeout) == (12.5, 0)
        assert pack_limits(config) == PackLimits(import_timeout=12.5, call_timeout=None)
    assert pack_limits(ServerConfig()) == PackLimits()  # bounded by default
    with pytest.raises(ValueError, match="custom_node_call_timeout"):
        ServerConfig(custom_node_call_timeout=-1)
