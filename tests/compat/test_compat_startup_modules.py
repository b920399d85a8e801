"""What packs find when they import (compat/startup.py): the modules ComfyUI has imported by then
(ComfyUI-nunchaku reads `sys.modules["folder_paths"]`; Long-CLIP uses `packaging.version` after
`import packaging`), and every custom-node folder as a place of the `custom_nodes` package
(packs import themselves as `custom_nodes.<pack>`), also from a `--base-directory` folder. Run as
`main.py --quick-test-for-ci` in a fresh process, as a user starts it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import sys

folder_paths = sys.modules["folder_paths"]  # ComfyUI-nunchaku's way
import packaging

PACKAGING = str(packaging.version.parse("1.2.3"))  # Long-CLIP's way
from custom_nodes.startup_probe.helper import ANSWER  # SaveImageWithMetaData's way


class StartupProbe:
    CATEGORY = "probe"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def run(self):
        return (ANSWER,)


print("STARTUP-PROBE", folder_paths.get_folder_paths("checkpoints") != [], PACKAGING, ANSWER, flush=True)
NODE_CLASS_MAPPINGS = {"StartupProbe": StartupProbe}
'''


def test_packs_find_comfyuis_startup_modules_and_the_custom_nodes_package(tmp_path):
    pack = tmp_path / "custom_nodes" / "startup_probe"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(PROBE)
    (pack / "helper.py").write_text("ANSWER = 42\n")
    done = subprocess.run([sys.executable, "main.py", "--cpu", "--quick-test-for-ci", "--base-directory", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "STARTUP-PROBE True 1.2.3 42" in out, out[-3000:]
    assert "IMPORT FAILED" not in out, out[-3000:]


EXIT_HANDLER = """
import asyncio
import atexit


def at_exit():  # comfyui-deploy's exit handler asks for the main thread's loop
    loop = asyncio.get_event_loop()
    print("EXIT-HANDLER", loop.run_until_complete(asyncio.sleep(0, result="ran")), flush=True)


atexit.register(at_exit)
NODE_CLASS_MAPPINGS = {}
"""


def test_packs_exit_handlers_find_an_event_loop(tmp_path):
    """A server stopped with Ctrl-C (SIGINT), then the pack's exit handler runs."""
    import signal
    import socket
    import time
    import urllib.request

    pack = tmp_path / "custom_nodes" / "exit_probe"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(EXIT_HANDLER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port),
                               "--base-directory", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/object_info", timeout=5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0 and "EXIT-HANDLER ran" in out, out[-3000:]
    assert "There is no current event loop" not in out, out[-3000:]
