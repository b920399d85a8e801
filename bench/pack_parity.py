"""Run API workflows that use real node packs on this server and on ComfyUI, and compare images.

    python bench/pack_parity.py --packs-dir PACKS --pack NAME [--pack NAME ...]
        --comfyui COMFYUI_DIR --comfy-python COMFY_PY [--python PY] WORKFLOW.json [...]

Both servers start once, each with the named packs linked into its own base directory's
`custom_nodes/`, on free loopback ports, with `--cpu`. The model and input files the workflows
name are written as tiny random files with the real layouts (tests/fixtures/template_models.py)
into one folder both servers read; ComfyUI also gets bench/comfyui_tiny_models, which makes it
accept those tiny widths. Each workflow is queued on both; every image an output node
saved is fetched through `/view` and compared: the table prints, per workflow and output node,
the largest difference in 0..255 levels (or the error either side reported). Packs' requirements
must be installed in each server's Python.
"""
from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
# packs' loader nodes whose files tests/fixtures/template_models.py should write: -> models folder
PACK_LOADER_INPUTS = {
    ("ControlNetLoaderAdvanced", "control_net_name"): "controlnet",
    ("easy fullLoader", "ckpt_name"): "checkpoints",
    ("easy a1111Loader", "ckpt_name"): "checkpoints",
    ("easy comfyLoader", "ckpt_name"): "checkpoints",
    ("CheckpointLoaderSimpleWithNoiseSelect", "ckpt_name"): "checkpoints",
}
TINY_MODELS_FOR_COMFYUI = Path(__file__).resolve().parent / "comfyui_tiny_models"
sys.path.insert(0, str(REPO))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process over its own base directory (models and inputs linked from `shared`)."""

    def __init__(self, name: str, command: list[str], cwd: Path, base: Path, shared: Path, packs: list[Path]) -> None:
        self.name = name
        (base / "custom_nodes").mkdir(parents=True)
        for pack in packs:
            (base / "custom_nodes" / pack.name).symlink_to(pack.resolve(), target_is_directory=True)
        for folder in ("models", "input"):
            (base / folder).symlink_to(shared / folder, target_is_directory=True)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(base / "server.log", "w")
        self.proc = subprocess.Popen(command + ["--base-directory", str(base), "--listen", "127.0.0.1",
                                                "--port", str(self.port), "--cpu", "--preview-method", "none"],
                                     cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return response.read()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited; see {self.log.name}")
            try:
                self.get("/object_info/KSampler")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        raise RuntimeError(f"{self.name} server did not answer in {timeout:.0f} s")

    def run(self, prompt: dict, timeout: float) -> dict:
        """The history entry of `prompt` once it finished (or {"error": ...})."""
        body = json.dumps({"prompt": prompt, "client_id": str(uuid.uuid4())}).encode()
        request = urllib.request.Request(self.url + "/prompt", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                prompt_id = json.loads(response.read())["prompt_id"]
        except urllib.error.HTTPError as ex:
            return {"error": f"rejected: {ex.read()[:300].decode(errors='replace')}"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            history = json.loads(self.get(f"/history/{prompt_id}"))
            if prompt_id in history and history[prompt_id].get("status", {}).get("completed") is not None:
                entry = history[prompt_id]
                if entry["status"].get("status_str") == "error":
                    messages = [m[1] for m in entry["status"].get("messages", []) if m[0] == "execution_error"]
                    return {"error": (messages[0].get("exception_message", "") if messages else "error")[:300]}
                return entry
            time.sleep(0.5)
        return {"error": f"not finished in {timeout:.0f} s"}

    def images(self, entry: dict) -> dict[str, list[np.ndarray]]:
        out: dict[str, list[np.ndarray]] = {}
        for node_id, output in entry.get("outputs", {}).items():
            for image in output.get("images", []):
                query = urllib.parse.urlencode({k: image.get(k, "") for k in ("filename", "subfolder", "type")})
                pixels = Image.open(io.BytesIO(self.get(f"/view?{query}"))).convert("RGB")
                out.setdefault(node_id, []).append(np.asarray(pixels, dtype=np.int16))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflows", nargs="+", type=Path)
    parser.add_argument("--packs-dir", type=Path, required=True)
    parser.add_argument("--pack", action="append", default=[])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--comfyui", type=Path, required=True)
    parser.add_argument("--comfy-python", required=True)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true", help="keep the base directories and print where")
    args = parser.parse_args(argv)
    from tests.fixtures.template_models import LOADER_INPUTS, WRITERS, provide_files, register_writer

    LOADER_INPUTS.update(PACK_LOADER_INPUTS)

    # ComfyUI's detection needs SD1's transformer count per block, which the quick "sd1_fast"
    # stand-in of the template tests leaves out: the full tiny SD1 layout here.
    register_writer("sd1", WRITERS["sd1_full"])

    packs = [args.packs_dir / name for name in args.pack]
    prompts = {wf.stem: json.loads(wf.read_text()) for wf in args.workflows}
    tmp = Path(tempfile.mkdtemp(prefix="pack_parity_"))
    shared = tmp / "shared"
    (shared / "models").mkdir(parents=True)
    (shared / "input").mkdir()
    for prompt in prompts.values():
        provide_files(prompt, shared)
    servers = [Server("ours", [args.python, str(REPO / "main.py")], REPO, tmp / "ours", shared, packs),
               Server("ComfyUI", [args.comfy_python, str(args.comfyui / "main.py")], args.comfyui, tmp / "comfy",
                      shared, packs + [TINY_MODELS_FOR_COMFYUI])]
    try:
        for server in servers:
            server.wait_ready(args.timeout)
        for name, prompt in prompts.items():
            ours, theirs = (server.run(prompt, args.timeout) for server in servers)
            for line in compare_with(servers, ours, theirs):
                print(f"{name:36} {line}", flush=True)
    finally:
        for server in servers:
            server.stop()
        if args.keep:
            print("base directories:", tmp)
    return 0


def compare_with(servers: list[Server], ours: dict, theirs: dict) -> list[str]:
    if "error" in ours or "error" in theirs:
        return [f"ours: {ours.get('error', 'ok')} | ComfyUI: {theirs.get('error', 'ok')}"]
    a, b = servers[0].images(ours), servers[1].images(theirs)
    lines = []
    for node_id in sorted(set(a) | set(b)):
        x, y = a.get(node_id, []), b.get(node_id, [])
        if len(x) != len(y):
            lines.append(f"node {node_id}: {len(x)} images here, {len(y)} on ComfyUI")
            continue
        for i, (p, q) in enumerate(zip(x, y)):
            if p.shape != q.shape:
                lines.append(f"node {node_id}[{i}]: shape {p.shape} here, {q.shape} on ComfyUI")
            else:
                d = np.abs(p - q)
                lines.append(f"node {node_id}[{i}] {p.shape[1]}x{p.shape[0]}: max {d.max()} mean {d.mean():.3f}")
    return lines or ["no images"]


if __name__ == "__main__":
    raise SystemExit(main())
