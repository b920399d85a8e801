"""`python main.py run WORKFLOW.json`: runs without a server, prints where outputs went, and fails
with plain words and a non-zero status on bad workflows."""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.web.web_test_pack import srv_prompt
from web.config import ServerConfig
from web.headless import run_workflow

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "tests" / "web" / "web_test_pack"


@pytest.fixture
def base(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    return tmp_path


async def _run(base: Path, workflow: object, name: str = "wf.json") -> tuple[int, str, str]:
    path = base / name
    path.write_text(workflow if isinstance(workflow, str) else json.dumps(workflow))
    out, err = io.StringIO(), io.StringIO()
    config = ServerConfig(base_dir=base, output_dir=base / "out")
    code = await run_workflow(config, path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_run_writes_outputs_and_says_where(base):
    code, out, err = await _run(base, srv_prompt(7, prefix="cli"))
    assert code == 0, err
    assert out.strip() == f"wrote {base / 'out' / 'cli_007.png'}"
    assert (base / "out" / "cli_007.png").is_file()
    assert "SrvConst (node 1)" in err and "SrvSave (node 3)" in err


async def test_run_accepts_a_saved_prompt_body(base):
    code, out, _ = await _run(base, {"prompt": srv_prompt(8, prefix="body"), "client_id": "x"})
    assert code == 0 and "body_008.png" in out


async def test_invalid_workflow_is_explained(base):
    bad = srv_prompt(999)
    code, out, err = await _run(base, bad)
    assert code == 1 and out == ""
    assert "The workflow is not valid" in err
    assert "node 1 (SrvConst)" in err and "value" in err


async def test_execution_error_is_explained(base):
    prompt = srv_prompt(3)
    prompt["3"]["inputs"]["filename_prefix"] = "no/such/dir/x"
    code, _, err = await _run(base, prompt)
    assert code == 1 and "node 3 (SrvSave) failed" in err


@pytest.mark.parametrize("content, needle", [
    ("{oops", "is not valid JSON"), ("[]", "must be a JSON object"),
])
async def test_unreadable_workflow_files(base, content, needle):
    code, _, err = await _run(base, content)
    assert code == 2 and needle in err


def _editor_workflow(value: int, prefix: str) -> dict:
    """Const -> (bypassed Gate) -> Save, as the editor saves it, with a Note and a Reroute."""
    return {
        "nodes": [
            {"id": 1, "type": "SrvConst", "mode": 0, "widgets_values": [value],
             "outputs": [{"name": "INT", "type": "INT", "links": [1]}]},
            {"id": 2, "type": "SrvGate", "mode": 4, "widgets_values": ["g"],
             "inputs": [{"name": "value", "type": "INT", "link": 1}],
             "outputs": [{"name": "INT", "type": "INT", "links": [2]}]},
            {"id": 4, "type": "Reroute", "mode": 0, "inputs": [{"name": "", "type": "*", "link": 2}],
             "outputs": [{"name": "", "type": "INT", "links": [3]}]},
            {"id": 3, "type": "SrvSave", "mode": 0, "widgets_values": [prefix],
             "inputs": [{"name": "value", "type": "INT", "link": 3}]},
            {"id": 9, "type": "Note", "mode": 0, "widgets_values": ["just a note"]},
        ],
        "links": [[1, 1, 0, 2, 0, "INT"], [2, 2, 0, 4, 0, "INT"], [3, 4, 0, 3, 0, "INT"]],
        "version": 0.4,
    }


async def test_run_accepts_the_editors_saved_workflow(base):
    code, out, err = await _run(base, _editor_workflow(11, "ed"))
    assert code == 0, err
    assert out.strip() == f"wrote {base / 'out' / 'ed_011.png'}"


async def test_editor_workflow_with_unknown_nodes_is_explained(base):
    workflow = _editor_workflow(1, "x")
    workflow["nodes"][0]["type"] = "NoSuchNode"
    code, _, err = await _run(base, workflow)
    assert code == 1 and "node types this server does not have: NoSuchNode" in err


async def test_missing_file(base):
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base), base / "nope.json", out=out, err=err)
    assert code == 2 and "cannot read workflow" in err.getvalue()


@pytest.mark.slow
def test_main_run_subprocess(base):
    (base / "wf.json").write_text(json.dumps(srv_prompt(5, prefix="sub")))
    proc = subprocess.run([sys.executable, str(REPO / "main.py"), "run", str(base / "wf.json"),
                           "--base-directory", str(base), "--output-directory", str(base / "o")],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {base / 'o' / 'sub_005.png'}" in proc.stdout
    bad = subprocess.run([sys.executable, str(REPO / "main.py"), "run", str(base / "missing.json")],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and "cannot read workflow" in bad.stderr


def test_progress_printer_draws_a_bar_per_node():
    from graph.events import Event
    from web.headless import ProgressPrinter

    out = io.StringIO()
    printer = ProgressPrinter(out, {"5": {"class_type": "KSampler"}}, 1)
    printer(Event("executing", {"node": "5", "display_node": "5", "prompt_id": "p"}))
    printer(Event("progress", {"value": 1, "max": 4, "node": "5", "prompt_id": "p"}))
    printer(Event("progress", {"value": 4, "max": 4, "node": "5", "prompt_id": "p"}))
    printer(Event("executing", {"node": None, "prompt_id": "p"}))
    printer.close_bar()
    text = out.getvalue()
    assert text.startswith("[1] KSampler (node 5)\n")
    assert "[" + "#" * 7 + "." * 23 + "] 1/4" in text and "[" + "#" * 30 + "] 4/4\n" in text
