"""Load3D / Load3DAnimation / Preview3D / Preview3DAnimation (ComfyUI 0.3.64's nodes_load_3d.py):
the editor's LOAD_3D widget value (a dict naming the uploaded canvas renders) read as LoadImage
reads files, through the executor; the model path passed on; Preview3D's UI result."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def canvas(runner: Runner, passes=("image", "mask", "normal", "lineart")) -> dict:
    """The renders the editor uploads to temp/threed/ and the widget dict that names them."""
    folder = runner.env.temp_dir / "threed"
    folder.mkdir(parents=True, exist_ok=True)
    value = {"camera_info": {"position": {"x": 1, "y": 2, "z": 3}, "target": {"x": 0, "y": 0, "z": 0},
                             "zoom": 1, "cameraType": "perspective"}, "recording": ""}
    for index, name in enumerate(passes):
        rgba = np.zeros((24, 32, 4), np.uint8)
        rgba[..., index % 3] = 200
        rgba[:, :16, 3] = 255  # the left half opaque: where the model is, in the mask render
        Image.fromarray(rgba, "RGBA").save(folder / f"scene_{name}.png")
        value[name] = f"threed/scene_{name}.png [temp]"
    (runner.env.input_dir / "3d").mkdir(parents=True, exist_ok=True)
    (runner.env.input_dir / "3d" / "model.glb").write_bytes(b"glTF")
    return value


async def test_load3d_reads_the_canvas_renders_and_passes_the_model_path_on(runner):
    value = canvas(runner)
    out = await runner.run({
        "l": node("Load3D", model_file="3d/model.glb", image=value, width=32, height=24),
        "i": node("PreviewAny", source=["l", 2]),
        "c": node("PreviewAny", source=["l", 5]),
        "s": node("PreviewImage", images=["l", 0]),
        "m": node("PreviewAny", source=["l", 1]),
        "p": node("Preview3D", model_file=["l", 2], camera_info=["l", 5]),
    })
    assert out.status == "success", out.error
    ui = out.ui_outputs
    assert ui["i"]["text"] == ["3d/model.glb"]
    assert '"cameraType": "perspective"' in ui["c"]["text"][0]
    assert ui["p"]["result"] == ["3d/model.glb", value["camera_info"]]
    preview = ui["s"]["images"][0]
    pixels = np.asarray(Image.open(runner.env.temp_dir / preview["subfolder"] / preview["filename"]))
    assert pixels.shape == (24, 32, 3) and pixels[0, 0, 0] == 200  # the image render's red channel


def test_the_outputs_are_comfyuis(runner, monkeypatch):
    from nodes import load_3d

    monkeypatch.setattr(load_3d, "current_env", lambda: runner.env)
    value = canvas(runner)
    image, mask, path, normal, lineart, camera, video = load_3d.load_3d("3d/model.glb", value, 32, 24)
    assert image.shape == (1, 24, 32, 3) and normal.shape == (1, 24, 32, 3) and lineart.shape == (1, 24, 32, 3)
    # LoadImage's mask (1 - alpha) of the mask render: 0 where the model is drawn
    assert mask.shape == (1, 24, 32) and float(mask[0, 0, 0]) == 0.0 and float(mask[0, 0, 31]) == 1.0
    assert path == "3d/model.glb" and camera == value["camera_info"] and video is None
    assert float(normal[0, 0, 0, 2]) == pytest.approx(200 / 255)
    out = load_3d.load_3d_animation("3d/model.glb", canvas(runner, ("image", "mask", "normal")), 32, 24)
    assert len(out) == 6 and out[2] == "3d/model.glb" and out[5] is None


def test_the_model_list_is_the_input_folders_3d_models(runner):
    from nodes.load_3d import ANIMATED_SUFFIXES, MODEL_SUFFIXES, _model_files

    folder = runner.env.input_dir / "3d" / "sub"
    folder.mkdir(parents=True)
    for name in ("a.glb", "b.obj", "c.STL", "notes.txt"):
        (folder / name).write_bytes(b"x")
    assert _model_files(MODEL_SUFFIXES)(runner.env) == ["3d/sub/a.glb", "3d/sub/b.obj", "3d/sub/c.STL"]
    assert _model_files(ANIMATED_SUFFIXES)(runner.env) == ["3d/sub/a.glb"]


async def test_a_widget_value_without_renders_is_a_clear_node_error(runner):
    canvas(runner)
    out = await runner.run({"l": node("Load3D", model_file="3d/model.glb", image={"camera_info": {}},
                                      width=32, height=24),
                            "i": node("PreviewAny", source=["l", 2])})
    assert out.status == "error" and "image" in str(out.error)
    out = await runner.run({"l": node("Load3D", model_file="3d/model.glb",
                                      image={**canvas(runner), "mask": "../../etc/passwd"}, width=32, height=24),
                            "i": node("PreviewAny", source=["l", 2])})
    assert out.status == "error"
