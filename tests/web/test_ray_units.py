"""The Ray backend's parts that need no Ray: several running prompts in PromptQueue, placement,
the files that travel with a prompt, the --ray flags; and that the default start-up never
imports Ray."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import main
from tests.web.web_harness import REPO
from web.prompt_queue import PromptQueue
from web.queue_item import QueueItem
from web.ray_backend.files import FileBlob, changed_files, input_files, snapshot, write_files
from web.ray_backend.placement import READY, WorkerSlot, choose_worker, loader_keys
from web.store import PromptStore


def _item(n: int) -> QueueItem:
    return QueueItem(number=n, prompt_id=f"p{n}", prompt={}, extra_data={}, outputs=[])


async def test_the_queue_holds_several_running_prompts_by_id(tmp_path):
    store = PromptStore.open(tmp_path)
    queue = PromptQueue(store)
    for n in range(3):
        queue.put(_item(n))
    first, second = await queue.get(), await queue.get()
    assert [i.prompt_id for i in queue.running_items()] == ["p0", "p1"] and queue.running is first
    assert queue.remaining == 3 and queue.contains("p1")
    assert queue.interrupt("p1") and second.interrupt.is_set() and not first.interrupt.is_set()
    queue.task_done("p1")
    assert queue.running_items() == [first] and queue.running_start("p1") is None
    assert queue.requeue("p0") is first and queue.running is None
    assert [i.prompt_id for i in queue.pending()] == ["p0", "p2"]  # back in its place
    assert [i.prompt_id for i in store.pending_items()] == ["p0", "p2"]  # and pending in the store again
    assert queue.requeue("p0") is None
    store.close()


def _slot(index: int, loaded=(), run: int = 0, busy: str | None = None) -> WorkerSlot:
    return WorkerSlot(index, state=READY, loaded=set(loaded), prompts_run=run, busy=busy)


def test_placement_prefers_affinity_then_the_least_loaded_free_worker():
    prompt = {"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd.safetensors"}},
              "5": {"class_type": "LoraLoader", "inputs": {"lora_name": "l.safetensors", "model": ["4", 0]}},
              "6": {"class_type": "KSampler", "inputs": {"seed": 5, "sampler_name": "euler"}}}
    keys = loader_keys(prompt)
    assert keys == {"ckpt_name=sd.safetensors", "lora_name=l.safetensors"}
    warm, idle = _slot(0, run=5, loaded={"ckpt_name=sd.safetensors"}), _slot(1)
    assert choose_worker([warm, idle], keys) is warm
    assert choose_worker([warm, idle], loader_keys({})) is idle  # nothing shared: the least loaded
    warm.busy = "other"
    assert choose_worker([warm, idle], keys) is idle  # a busy worker is never chosen
    idle.busy = "x"
    assert choose_worker([warm, idle], keys) is None


def test_input_files_named_by_a_prompt_and_changed_outputs(tmp_path):
    inputs, out = tmp_path / "input", tmp_path / "output"
    (inputs / "sub").mkdir(parents=True)
    (inputs / "a.png").write_bytes(b"A")
    (inputs / "sub" / "b.png").write_bytes(b"B")
    prompt = {"1": {"inputs": {"image": "a.png"}}, "2": {"inputs": {"image": "sub/b.png [input]", "text": "a cat"}},
              "3": {"inputs": {"image": "../../etc/passwd", "other": "/etc/passwd", "o": "a.png [output]"}}}
    assert sorted((b.path, b.data) for b in input_files(prompt, inputs)) == [("a.png", b"A"), ("sub/b.png", b"B")]
    out.mkdir()
    (out / "old.png").write_bytes(b"old")
    before = snapshot({"output": out})
    (out / "new.png").write_bytes(b"new")
    assert changed_files({"output": out}, before) == [FileBlob("output", "new.png", b"new")]
    server_out = tmp_path / "server"
    write_files([FileBlob("output", "d/new.png", b"new")], {"output": server_out})
    assert (server_out / "d" / "new.png").read_bytes() == b"new"
    from web.confined_path import PathOutsideRoot
    with pytest.raises(PathOutsideRoot):
        write_files([FileBlob("output", "../escape.png", b"x")], {"output": server_out})


def test_ray_flags_reach_the_config():
    parser = main.build_serve_parser()
    assert main.config_from_args(parser.parse_args([]), []).ray is None
    local = main.config_from_args(parser.parse_args(["--ray"]), ["--ray"]).ray
    assert local.address is None and local.workers is None and not local.shared_output
    argv = ["--ray", "ray://head:10001", "--ray-workers", "3", "--ray-shared-output"]
    remote = main.config_from_args(parser.parse_args(argv), argv).ray
    assert (remote.address, remote.workers, remote.shared_output) == ("ray://head:10001", 3, True)
    with pytest.raises(SystemExit):
        main.main(["--ray-workers", "2"])  # needs --ray


def test_the_default_start_up_does_not_import_ray(tmp_path):
    code = textwrap.dedent(f"""
        import asyncio, json, sys
        from main import build_serve_parser, config_from_args
        from web.app import start_server
        from web.bootstrap import build_state

        async def run():
            argv = ["--base-directory", {str(tmp_path)!r}, "--port", "0"]
            state = build_state(config_from_args(build_serve_parser().parse_args(argv), argv))
            runner, _ = await start_server(state, frontend=False)
            started = state.worker.started
            await runner.cleanup()
            return started
        started = asyncio.run(run())
        print(json.dumps({{"started": started, "ray": any(m == "ray" or m.startswith("ray.") for m in sys.modules),
                          "backend": "web.ray_backend.dispatcher" in sys.modules}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"started": True, "ray": False, "backend": False}


def test_a_name_another_worker_took_is_written_under_the_next_free_counter(tmp_path):
    from web.ray_backend.files import rename_outputs, renamed_path

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "ComfyUI_00001_.png").write_bytes(b"first worker's")
    (out / "sub" / "ComfyUI_00002_.png").write_bytes(b"also taken")
    assert renamed_path(out, "sub/ComfyUI_00001_.png") == "sub/ComfyUI_00003_.png"
    (out / "plain.png").write_bytes(b"x")
    assert renamed_path(out, "plain.png") == "plain_1.png"
    folders = {"output": out}
    mine: dict = {}
    renames = write_files([FileBlob("output", "sub/ComfyUI_00001_.png", b"second worker's")], folders, mine)
    assert renames == {("output", "sub/ComfyUI_00001_.png"): "sub/ComfyUI_00003_.png"}
    assert (out / "sub" / "ComfyUI_00001_.png").read_bytes() == b"first worker's"  # nothing lost
    assert (out / "sub" / "ComfyUI_00003_.png").read_bytes() == b"second worker's"
    # The same worker writing that name again replaces its own copy, as a node overwriting its file.
    assert write_files([FileBlob("output", "sub/ComfyUI_00001_.png", b"again")], folders, mine) == renames
    assert (out / "sub" / "ComfyUI_00003_.png").read_bytes() == b"again"
    ui = {"images": [{"filename": "ComfyUI_00001_.png", "subfolder": "sub", "type": "output"},
                     {"filename": "other.png", "subfolder": "", "type": "output"}], "animated": (False,)}
    assert rename_outputs(ui, renames) == {
        "images": [{"filename": "ComfyUI_00003_.png", "subfolder": "sub", "type": "output"},
                   {"filename": "other.png", "subfolder": "", "type": "output"}], "animated": (False,)}
    # An identical file under a taken name is the same output: written in place, not renamed.
    assert write_files([FileBlob("output", "plain.png", b"x")], folders, {}) == {}


def test_a_worker_removes_the_folders_of_workers_that_are_gone(tmp_path):
    from web.ray_backend.runtime import FOLDER_PREFIX, OWNER_FILE, hold_folder, remove_abandoned_folders

    alive, gone, being_made, other = (tmp_path / f"{FOLDER_PREFIX}{n}" for n in ("alive", "gone", "new", "x"))
    for folder in (alive, gone, being_made):
        (folder / "output").mkdir(parents=True)
    other = tmp_path / "not-ours"
    other.mkdir()
    (other / OWNER_FILE).touch()
    fd = hold_folder(alive)  # a live worker holds its owner file's lock
    (gone / OWNER_FILE).touch()  # a dead one's lock went with its process
    try:
        me = tmp_path / f"{FOLDER_PREFIX}me"
        me.mkdir()
        (me / OWNER_FILE).touch()
        assert remove_abandoned_folders(tmp_path, keep=me) == [gone]
        assert alive.is_dir() and being_made.is_dir() and other.is_dir() and me.is_dir() and not gone.exists()
    finally:
        os.close(fd)
    assert remove_abandoned_folders(tmp_path, keep=me) == [alive]  # its worker ended


def test_an_upload_travels_once_per_worker_until_it_changes(tmp_path):
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.png").write_bytes(b"A")
    (inputs / "b.png").write_bytes(b"B")
    prompt = {"1": {"class_type": "LoadImage", "inputs": {"image": "a.png"}},
              "2": {"class_type": "LoadImage", "inputs": {"image": "b.png"}}}
    sent: dict = {}
    assert sorted(b.path for b in input_files(prompt, inputs, sent)) == ["a.png", "b.png"]
    assert input_files(prompt, inputs, sent) == []  # this worker has both
    assert len(input_files(prompt, inputs)) == 2 and len(input_files(prompt, inputs, {})) == 2  # another worker has none
    (inputs / "b.png").write_bytes(b"BB")  # replaced by a new upload of the same name
    assert [(b.path, b.data) for b in input_files(prompt, inputs, sent)] == [("b.png", b"BB")]
    assert input_files(prompt, inputs, sent) == []
