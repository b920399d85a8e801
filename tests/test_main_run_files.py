"""`main.py run` on saved workflows with subgraphs and on image / video files that carry their
workflow (as SaveImage, SaveAnimatedWEBP and SaveVideo write it); `serve` names the default mode."""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from tests.web.web_test_pack import srv_prompt
from web.config import ServerConfig
from web.headless import EXIT_FAILED, EXIT_OK, EXIT_UNREADABLE, load_api_workflow, run_workflow
from web.workflow_files import EmbeddedWorkflowError, read_embedded

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "tests" / "web" / "web_test_pack"


@pytest.fixture
def base(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    return tmp_path


async def _run(base: Path, path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_workflow(ServerConfig(base_dir=base, output_dir=base / "out"), path, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _subgraph_workflow(value: int | None, prefix: str) -> dict:
    """Save <- instance 5 of a subgraph holding SrvConst (its value promoted) -> output."""
    definition = {
        "id": "const-sg", "name": "Const", "inputNode": {"id": -10}, "outputNode": {"id": -20},
        "inputs": [{"name": "value", "type": "INT", "linkIds": [1]}],
        "outputs": [{"name": "INT", "type": "INT", "linkIds": [2]}],
        "nodes": [{"id": 1, "type": "SrvConst", "mode": 0, "widgets_values": [9],
                   "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": 1}],
                   "outputs": [{"name": "INT", "type": "INT", "links": [2]}]}],
        "links": [{"id": 1, "origin_id": -10, "origin_slot": 0, "target_id": 1, "target_slot": 0, "type": "INT"},
                  {"id": 2, "origin_id": 1, "origin_slot": 0, "target_id": -20, "target_slot": 0, "type": "INT"}],
    }
    return {
        "nodes": [{"id": 5, "type": "const-sg", "mode": 0, "widgets_values": [value],
                   "inputs": [{"name": "value", "type": "INT", "widget": {"name": "value"}, "link": None}],
                   "outputs": [{"name": "INT", "type": "INT", "links": [7]}]},
                  {"id": 3, "type": "SrvSave", "mode": 0, "widgets_values": [prefix],
                   "inputs": [{"name": "value", "type": "INT", "link": 7}]}],
        "links": [[7, 5, 0, 3, 0, "INT"]],
        "definitions": {"subgraphs": [definition]},
        "version": 0.4,
    }


async def test_run_flattens_subgraphs(base):
    path = base / "sg.json"
    path.write_text(json.dumps(_subgraph_workflow(42, "sg")))
    code, out, err = await _run(base, path)
    assert code == EXIT_OK, err
    assert out.strip() == f"wrote {base / 'out' / 'sg_042.png'}"
    assert "SrvConst (node 5:1)" in err  # the compound id
    path.write_text(json.dumps(_subgraph_workflow(None, "inner")))  # no saved value: the inner widget's
    code, out, err = await _run(base, path)
    assert code == EXIT_OK and "inner_009.png" in out, err


def _png_with(path: Path, prompt: dict | None, workflow: dict | None) -> Path:
    from PIL import Image

    from comfy_core.image.png import png_metadata  # what SaveImage writes

    Image.new("RGB", (2, 2)).save(path, pnginfo=png_metadata(prompt, {"workflow": workflow} if workflow else None))
    return path


async def test_run_a_png_runs_its_embedded_prompt(base):
    png = _png_with(base / "ComfyUI_00001_.png", srv_prompt(21, prefix="png"), _subgraph_workflow(22, "wf"))
    code, out, err = await _run(base, png)
    assert code == EXIT_OK, err
    assert "png_021.png" in out  # the prompt wins over the workflow: it is what ran


async def test_run_a_png_with_only_a_workflow(base):
    png = _png_with(base / "only_workflow.png", None, _subgraph_workflow(23, "wf"))
    code, out, err = await _run(base, png)
    assert code == EXIT_OK and "wf_023.png" in out, err


async def test_a_png_without_a_workflow_is_explained(base):
    from PIL import Image

    Image.new("RGB", (2, 2)).save(base / "plain.png")
    code, out, err = await _run(base, base / "plain.png")
    assert code == EXIT_UNREADABLE and out == ""
    assert "carries no workflow" in err and "Traceback" not in err


async def test_binary_that_is_no_workflow_is_explained(base):
    (base / "junk.bin").write_bytes(b"\x00\xff\xfe\x80" * 10)
    code, _, err = await _run(base, base / "junk.bin")
    assert code == EXIT_UNREADABLE and "is not a workflow" in err


def test_webp_exif_as_save_animated_webp_writes_it(tmp_path):
    from PIL import Image

    from nodes.save_formats import webp_exif

    prompt, workflow = srv_prompt(3), _subgraph_workflow(4, "w")
    path = tmp_path / "anim.webp"
    Image.new("RGB", (4, 4)).save(path, exif=webp_exif(prompt, {"workflow": workflow}))
    assert read_embedded(path) == {"prompt": prompt, "workflow": workflow}
    assert load_api_workflow(path) == prompt
    Image.new("RGB", (4, 4)).save(tmp_path / "bare.webp")
    with pytest.raises(EmbeddedWorkflowError, match="carries no workflow"):
        read_embedded(tmp_path / "bare.webp")


def test_mp4_tags_as_save_video_writes_them(tmp_path):
    torch = pytest.importorskip("torch")
    from comfy_core.video.encode import write_mp4

    workflow = _subgraph_workflow(5, "v")
    path = tmp_path / "clip.mp4"
    write_mp4(str(path), torch.zeros(2, 16, 16, 3), 8, metadata={"workflow": workflow})
    assert read_embedded(path) == {"workflow": workflow}
    assert load_api_workflow(path) == workflow  # an editor workflow: converted when it runs


def test_png_text_chunk_kinds():
    import struct
    import zlib

    from web.workflow_files import PNG_SIGNATURE, png_texts

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    data = (PNG_SIGNATURE + chunk(b"zTXt", b"prompt\0\0" + zlib.compress(b'{"a": 1}'))
            + chunk(b"iTXt", b"workflow\0\0\0en\0\0" + '{"b": "\u00e9"}'.encode())
            + chunk(b"comf", b"extra\0{}") + chunk(b"IEND", b""))
    assert png_texts(data) == {"prompt": '{"a": 1}', "workflow": '{"b": "\u00e9"}', "extra": "{}"}


def test_serve_is_the_default_modes_name(monkeypatch):
    import main

    called = {}
    monkeypatch.setattr(main, "serve", lambda config: called.setdefault("port", config.port) and 0)
    assert main.main(["serve", "--port", "8199"]) == 0
    assert called == {"port": 8199}


def test_run_help_names_every_kind_of_file(capsys):
    import main

    with pytest.raises(SystemExit):
        main.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("API-format prompt", "saved by the editor", "template", "subgraphs", "PNG", "MP4"):
        assert needle in text


async def test_invalid_subgraph_workflow_fails_cleanly(base):
    workflow = _subgraph_workflow(1, "x")
    workflow["definitions"]["subgraphs"][0]["nodes"][0]["type"] = "NoSuchInner"
    path = base / "bad.json"
    path.write_text(json.dumps(workflow))
    code, _, err = await _run(base, path)
    assert code == EXIT_FAILED and "NoSuchInner" in err


@pytest.mark.slow
async def test_an_official_template_with_a_subgraph_runs_headless(tmp_path, request):
    """The newest package's flux_dev_checkpoint_example (one subgraph, legacy proxyWidgets) on
    tiny Flux files: ~40 s on 2 busy cores, so only with --all-templates."""
    if not request.config.getoption("--all-templates"):
        pytest.skip("a 20-step Flux run on tiny files; pass --all-templates")
    from graph.editor_workflow import editor_to_prompt
    from tests.fixtures.template_models import provide_files
    from web.bootstrap import build_state

    source = REPO / "tests" / "data" / "templates" / "flux_dev_checkpoint_example.json"
    state = build_state(ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=()))
    provide_files(editor_to_prompt(json.loads(source.read_text()), state.registry.object_info(state.env)), tmp_path)
    code, out, err = await _run(tmp_path, source)
    assert code == EXIT_OK, err[-3000:]
    assert "KSampler (node 56:52)" in err and "Flux.1_Dev_00001_.png" in out


def test_audio_and_webm_tags_as_save_audio_and_save_webm_write_them(tmp_path):
    torch = pytest.importorskip("torch")
    from comfy_core.video.audio_files import encode_audio
    from comfy_core.video.encode import write_webm

    prompt = srv_prompt(6)
    flac = tmp_path / "a.flac"
    flac.write_bytes(encode_audio(torch.zeros(1, 800), 8000, "flac", None, {"prompt": json.dumps(prompt)}))
    assert read_embedded(flac) == {"prompt": prompt}
    webm = tmp_path / "v.webm"
    write_webm(str(webm), torch.zeros(2, 16, 16, 3), "vp9", 8, 40, metadata={"prompt": prompt})
    assert load_api_workflow(webm) == prompt
