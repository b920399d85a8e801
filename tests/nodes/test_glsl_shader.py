"""GLSLShader (today's ComfyUI's comfy_extras/nodes_glsl.py): fragment shaders run over IMAGE
batches on the process's off-screen OpenGL context (comfy_core/image/glsl/), each result checked
against NumPy computing what the shader computes.

They need an OpenGL 3.3 driver without a display (EGL and Mesa's llvmpipe: scripts/setup.sh
installs them). Where the machine has no EGL library the GL tests are skipped with the reason;
where it has one, a failure to make a context is a failure here, never a skip.
"""
from __future__ import annotations

import ctypes.util
import glob
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from comfy_core.image.glsl import context as glcontext
from comfy_core.image.glsl.program import (DEFAULT_FRAGMENT_SHADER, ShaderCompileError, desktop_source, output_count,
                                           pass_count)
from nodes.errors import NodeInputError
from nodes.glsl_shader import glsl_shader
from nodes.histogram import Curve
from tests.nodes.workflow_2026 import Runner, node

ROOT = Path(__file__).resolve().parents[2]
HEADER = "#version 300 es\nprecision highp float;\nuniform sampler2D u_image0;\nin vec2 v_texCoord;\n"


def _system_has_egl() -> bool:
    """An EGL library and a vendor (glvnd ICD) for it: then a context must be possible."""
    return bool(ctypes.util.find_library("EGL")) and bool(glob.glob("/usr/share/glvnd/egl_vendor.d/*.json"))


@pytest.fixture(scope="module")
def gl():
    pytest.importorskip("OpenGL", reason="PyOpenGL is not installed (requirements.txt)")
    try:
        with glcontext.current_context() as context:
            pass
    except glcontext.GLUnavailableError as exc:
        if _system_has_egl():
            raise  # the libraries are here: the context is ours to make
        pytest.skip(f"no OpenGL driver on this machine: {exc}")
    return context


@pytest.fixture(autouse=True)
def _temp_folders(tmp_path):
    """The node's previews go to this test's temp folder (the host's environment)."""
    from nodes.environment import Environment, host_env

    environment = Environment.rooted_at(tmp_path / "host")
    environment.ensure_dirs()
    token = host_env.set(environment)
    yield environment
    host_env.reset(token)


def run(shader: str, *images: torch.Tensor, size_mode: dict | None = None, floats=(), ints=(), bools=(),
        curves=()) -> tuple[torch.Tensor, ...]:
    """The node called as the executor calls it (groups nested), its four IMAGE outputs."""
    result = glsl_shader(
        fragment_shader=shader, size_mode=size_mode or {"size_mode": "from_input"},
        images={f"image{i}": image for i, image in enumerate(images)},
        floats={f"u_float{i}": v for i, v in enumerate(floats)}, ints={f"u_int{i}": v for i, v in enumerate(ints)},
        bools={f"u_bool{i}": v for i, v in enumerate(bools)}, curves={f"u_curve{i}": v for i, v in enumerate(curves)})
    return result["result"]


def asymmetric(height: int = 5, width: int = 7, channels: int = 3, batch: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.rand(batch, height, width, channels, generator=torch.Generator().manual_seed(seed))


def sample_bilinear(image: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """OpenGL's GL_LINEAR lookup with CLAMP_TO_EDGE of an upright `[H, W, C]` image at texture
    coordinates (u, v), v = 1 at the image's top row (ComfyUI uploads the image bottom row first)."""
    height, width = image.shape[:2]
    x = np.clip(u * width - 0.5, 0, width - 1)
    y = np.clip((1.0 - v) * height - 0.5, 0, height - 1)  # upright row coordinate
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    x1, y1 = np.minimum(x0 + 1, width - 1), np.minimum(y0 + 1, height - 1)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    top = image[y0, x0] * (1 - fx) + image[y0, x1] * fx
    bottom = image[y1, x0] * (1 - fx) + image[y1, x1] * fx
    return top * (1 - fy) + bottom * fy


def texcoords(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """v_texCoord at each output pixel's centre, rows top first: y = 1 at the top."""
    columns, rows = np.meshgrid(np.arange(width), np.arange(height))
    return (columns + 0.5) / width, 1.0 - (rows + 0.5) / height


# -- sources (no GL) ------------------------------------------------------------------------------

def test_es_source_becomes_desktop_glsl_with_the_users_line_numbers():
    source = "// a comment\n#version 300 es\nprecision highp float;\nprecision mediump sampler2D;\nvoid main() {}\n"
    desktop = desktop_source(source)
    assert desktop.startswith("#version 330 core\n#line 1\n")
    body = desktop.split("\n", 2)[2]
    assert body.count("\n") == source.count("\n")  # each dropped line stays, blank
    assert "es" not in body.split("\n")[1] and "precision" not in body
    assert body.split("\n")[4] == "void main() {}"


def test_passes_and_outputs_are_read_from_the_source_as_comfyui_does():
    assert pass_count(DEFAULT_FRAGMENT_SHADER) == 1 and pass_count("#pragma passes 3\n") == 3
    assert pass_count("#pragma passes 0\n") == 1
    assert output_count("out vec4 fragColor;") == 1 and output_count(DEFAULT_FRAGMENT_SHADER) == 1
    assert output_count("fragColor0 = a; fragColor2 = b;") == 3 and output_count("fragColor7") == 4


def test_no_backend_is_a_typed_error_naming_what_to_install():
    def fails() -> glcontext.GLContext:
        raise RuntimeError("libEGL not found")

    with pytest.raises(glcontext.GLUnavailableError) as caught:
        glcontext.create_context((("EGL", fails), ("OSMesa", fails)))
    assert caught.value.attempts == [("EGL", "libEGL not found"), ("OSMesa", "libEGL not found")]
    assert "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri" in str(caught.value)


def test_the_node_reports_a_missing_driver_and_later_runs_get_the_same_error(monkeypatch):
    failure = glcontext.GLUnavailableError([("EGL", "no display")])
    monkeypatch.setitem(glcontext._state, "context", None)
    monkeypatch.setitem(glcontext._state, "failure", failure)
    for _ in range(2):
        with pytest.raises(glcontext.GLUnavailableError, match="libgl1-mesa-dri"):
            run(DEFAULT_FRAGMENT_SHADER, asymmetric())


def test_object_info_and_registration_import_neither_opengl_nor_the_gl_modules(tmp_path):
    code = (
        "import json, sys\n"
        "from graph.registry import Registry\nfrom nodes import register_builtin_nodes\n"
        "from nodes.environment import Environment\n"
        "r = Registry(); register_builtin_nodes(r)\n"
        f"info = r.object_info(Environment.rooted_at({str(tmp_path)!r}))\n"
        "print(json.dumps(['GLSLShader' in info, 'OpenGL' in sys.modules,\n"
        "                  'comfy_core.image.glsl.context' in sys.modules]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, False, False]  # torch: test_main_startup.py


# -- rendering ------------------------------------------------------------------------------------

def test_the_default_shader_returns_the_input_upright_with_alpha_one(gl):
    image = asymmetric()
    out = run(DEFAULT_FRAGMENT_SHADER, image)
    assert [tuple(o.shape) for o in out] == [(1, 5, 7, 4)] * 4 and all(o.dtype == torch.float32 for o in out)
    assert torch.allclose(out[0][..., :3], image, atol=1e-5)  # float targets: no 1/255 quantisation
    assert torch.equal(out[0][..., 3], torch.ones(1, 5, 7))
    assert all(torch.count_nonzero(o) == 0 for o in out[1:])  # outputs the shader does not write: black


def test_texcoord_and_fragcoord_count_from_the_bottom_row(gl):
    shader = HEADER + "uniform vec2 u_resolution;\nout vec4 fragColor;\n" \
                      "void main() { fragColor = vec4(v_texCoord, gl_FragCoord.xy / u_resolution); }\n"
    out = run(shader, asymmetric(4, 6))[0][0].numpy()
    u, v = texcoords(4, 6)
    assert np.allclose(out[..., 0], u, atol=1e-6) and np.allclose(out[..., 1], v, atol=1e-6)
    assert np.allclose(out[..., 2], u, atol=1e-6) and np.allclose(out[..., 3], v, atol=1e-6)


def test_channel_swap_and_inversion_of_an_rgba_image_keep_its_alpha_unclamped(gl):
    image = asymmetric(channels=4)
    shader = HEADER + "out vec4 fragColor;\nvoid main() {\n  vec4 c = texture(u_image0, v_texCoord);\n" \
                      "  fragColor = vec4(1.0 - c.bgr, c.a * 3.0);\n}\n"
    out = run(shader, image)[0].numpy()
    pixels = image.numpy()
    assert np.allclose(out[..., :3], 1.0 - pixels[..., [2, 1, 0]], atol=1e-5)
    assert np.allclose(out[..., 3], pixels[..., 3] * 3.0, atol=1e-5) and out[..., 3].max() > 1.0


def test_float_int_and_bool_uniforms_reach_the_shader(gl):
    shader = HEADER + ("uniform float u_float0;\nuniform float u_float1;\nuniform int u_int0;\nuniform int u_int1;\n"
                       "uniform bool u_bool0;\nuniform bool u_bool1;\nlayout(location = 0) out vec4 fragColor0;\n"
                       "void main() {\n  vec4 c = texture(u_image0, v_texCoord);\n"
                       "  fragColor0 = vec4(c.r * u_float0 + u_float1, float(u_int0 * u_int1),\n"
                       "                    u_bool0 ? 1.0 : -1.0, u_bool1 ? 1.0 : -1.0);\n}\n")
    image = asymmetric()
    out = run(shader, image, floats=(2.5, -0.25), ints=(3, -7), bools=(True, False))[0].numpy()
    assert np.allclose(out[..., 0], image.numpy()[..., 0] * 2.5 - 0.25, atol=1e-5)
    assert np.all(out[..., 1] == -21.0) and np.all(out[..., 2] == 1.0) and np.all(out[..., 3] == -1.0)


def test_two_images_sampled_together(gl):
    shader = HEADER + "uniform sampler2D u_image1;\nuniform float u_float0;\nout vec4 fragColor;\n" \
                      "void main() { fragColor = mix(texture(u_image0, v_texCoord), texture(u_image1, v_texCoord)," \
                      " u_float0); }\n"
    first, second = asymmetric(seed=1), asymmetric(channels=4, seed=2)
    out = run(shader, first, second, floats=(0.3,))[0].numpy()
    a = np.concatenate([first.numpy(), np.ones((1, 5, 7, 1), np.float32)], axis=-1)
    assert np.allclose(out, a * 0.7 + second.numpy() * 0.3, atol=1e-5)


def test_each_pass_reads_the_previous_result_as_u_image0(gl):
    shader = HEADER + ("#pragma passes 3\nuniform sampler2D u_image1;\nuniform int u_pass;\n"
                       "layout(location = 0) out vec4 fragColor0;\nvoid main() {\n"
                       "  vec4 c = texture(u_image0, v_texCoord);\n"
                       "  if (u_pass == 0) fragColor0 = c + 1.0;\n"
                       "  else if (u_pass == 1) fragColor0 = c * 2.0 + texture(u_image1, v_texCoord);\n"
                       "  else fragColor0 = c - 0.5;\n}\n")
    first, second = asymmetric(seed=3), asymmetric(channels=4, seed=4)
    out = run(shader, first, second)[0].numpy()
    rgba = np.concatenate([first.numpy(), np.ones((1, 5, 7, 1), np.float32)], axis=-1)
    assert np.allclose(out, (rgba + 1.0) * 2.0 + second.numpy() - 0.5, atol=1e-5)


def test_multiple_render_targets_are_the_outputs_in_order(gl):
    shader = HEADER + ("layout(location = 0) out vec4 fragColor0;\nlayout(location = 1) out vec4 fragColor1;\n"
                       "void main() {\n  vec4 c = texture(u_image0, v_texCoord);\n"
                       "  fragColor0 = vec4(c.rrr, 1.0);\n  fragColor1 = vec4(c.g, c.b, 0.25, 0.5);\n}\n")
    image = asymmetric()
    out = run(shader, image)
    pixels = image.numpy()
    assert np.allclose(out[0].numpy(), np.concatenate([pixels[..., [0, 0, 0]], np.ones((1, 5, 7, 1))], -1), atol=1e-5)
    expected = np.stack([pixels[..., 1], pixels[..., 2], np.full((1, 5, 7), 0.25), np.full((1, 5, 7), 0.5)], -1)
    assert np.allclose(out[1].numpy(), expected, atol=1e-5)
    assert torch.count_nonzero(out[2]) == 0 and torch.count_nonzero(out[3]) == 0


def test_custom_size_mode_samples_the_input_bilinearly_at_that_size(gl):
    image = asymmetric(5, 7)
    shader = HEADER + "uniform vec2 u_resolution;\nlayout(location = 0) out vec4 fragColor0;\n" \
                      "layout(location = 1) out vec4 fragColor1;\nvoid main() {\n" \
                      "  fragColor0 = texture(u_image0, v_texCoord);\n  fragColor1 = vec4(u_resolution, 0.0, 1.0);\n}\n"
    out = run(shader, image, size_mode={"size_mode": "custom", "width": 13, "height": 9})
    assert tuple(out[0].shape) == (1, 9, 13, 4)
    u, v = texcoords(9, 13)
    assert np.allclose(out[0][0, ..., :3].numpy(), sample_bilinear(image[0].numpy(), u, v), atol=1e-4)
    assert np.all(out[1][0, ..., 0].numpy() == 13.0) and np.all(out[1][0, ..., 1].numpy() == 9.0)
    same = run(DEFAULT_FRAGMENT_SHADER, image, size_mode={"size_mode": "from_input"})[0]
    assert tuple(same.shape) == (1, 5, 7, 4)


def test_a_batch_of_three_renders_each_item_with_its_partner(gl):
    shader = HEADER + "uniform sampler2D u_image1;\nout vec4 fragColor;\n" \
                      "void main() { fragColor = texture(u_image0, v_texCoord) - texture(u_image1, v_texCoord); }\n"
    first, second = asymmetric(batch=3, channels=4, seed=5), asymmetric(batch=3, channels=4, seed=6)
    out = run(shader, first, second)
    assert tuple(out[0].shape) == (3, 5, 7, 4) and tuple(out[3].shape) == (3, 5, 7, 4)
    assert np.allclose(out[0].numpy(), first.numpy() - second.numpy(), atol=1e-5)
    with pytest.raises(NodeInputError, match="images.image1"):
        run(shader, first, second[:1])


def test_a_curve_reaches_the_shader_as_its_256_sample_lookup_table(gl):
    shader = HEADER + "uniform sampler2D u_curve0;\nout vec4 fragColor;\nvoid main() {\n" \
                      "  fragColor = vec4(texelFetch(u_curve0, ivec2(int(v_texCoord.x * 256.0), 0), 0).r,\n" \
                      "                   float(textureSize(u_curve0, 0).x), 0.0, 1.0);\n}\n"
    curve = {"points": [[0.0, 0.2], [1.0, 0.6]], "interpolation": "linear"}
    out = run(shader, asymmetric(1, 256), curves=(curve,))[0][0, 0].numpy()
    assert np.allclose(out[:, 0], 0.2 + 0.4 * np.arange(256) / 255.0, atol=1e-6) and np.all(out[:, 1] == 256.0)


def test_a_shader_that_does_not_compile_is_an_input_error_with_the_compilers_log(gl, in_node):
    shader = "#version 300 es\nprecision highp float;\nout vec4 fragColor;\nvoid main() { fragColor = vec4(nope); }\n"
    with in_node("GLSLShader", "7"), pytest.raises(NodeInputError) as caught:
        run(shader, asymmetric())
    cause = caught.value.__cause__
    assert isinstance(cause, ShaderCompileError) and cause.stage == "fragment"
    assert "nope" in cause.log and re.search(r"0[:(]4\b", cause.log), cause.log  # the editor's line 4
    assert str(caught.value).startswith("GLSLShader (node 7): input 'fragment_shader'")
    assert cause.log in str(caught.value)
    assert torch.allclose(run(DEFAULT_FRAGMENT_SHADER, asymmetric())[0][..., :3], asymmetric(), atol=1e-5)


def test_threads_take_turns_and_the_environment_is_left_as_it_was(gl):
    before = os.environ.get("PYOPENGL_PLATFORM")
    images = [asymmetric(seed=s) for s in range(4)]
    results: dict[int, torch.Tensor] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, run(DEFAULT_FRAGMENT_SHADER, images[i])[0]))
               for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(torch.allclose(results[i][..., :3], images[i], atol=1e-5) for i in range(4))
    assert os.environ.get("PYOPENGL_PLATFORM") == before


# -- the official template ------------------------------------------------------------------------

def _template() -> dict | None:
    try:
        import comfyui_workflow_templates_json
    except ImportError:
        return None
    path = Path(comfyui_workflow_templates_json.__file__).parent / "templates" / "basic_image_color_adjustment.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _png(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path))


async def test_the_color_adjustment_template_runs_and_its_shaders_compute_what_numpy_does(gl, tmp_path):
    from PIL import Image

    from graph.editor_workflow import editor_to_prompt
    from nodes.environment import Environment

    workflow = _template()
    if workflow is None:
        pytest.skip("comfyui-workflow-templates-json is not installed (requirements.txt)")
    runner = Runner(tmp_path)
    source = np.random.default_rng(7).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    Image.fromarray(source).save(Path(runner.env.input_dir) / "example.png")
    info = json.loads(json.dumps(runner.registry.object_info(Environment.rooted_at(tmp_path))))
    prompt = editor_to_prompt(workflow, info)
    assert sum(n["class_type"] == "GLSLShader" for n in prompt.values()) == 10
    out = await runner.run(prompt)
    assert out.status == "success", out.error

    def shown(preview_id: str) -> np.ndarray:
        (record,) = out.ui_outputs[preview_id]["images"]
        return _png(Path(runner.env.temp_dir) / record["subfolder"] / record["filename"])

    x = source.astype(np.float64) / 255.0
    # Brightness and Contrast (subgraph 144, PreviewImage 182): brightness 13, contrast 51
    assert prompt["182"]["inputs"]["images"][0] == "144:143"
    linear = np.power(x, 2.2)
    linear = (linear - 0.18) * 1.51 + 0.13 + 0.18
    expected = np.clip(255.0 * np.power(np.clip(linear, 0.0, 1.0), 1.0 / 2.2), 0, 255).astype(np.int16)
    got = shown("182")
    assert got.shape == (12, 16, 4) and np.all(got[..., 3] == 255)
    assert np.abs(got[..., :3].astype(np.int16) - expected).max() <= 1

    # Color Curves (subgraph 10, PreviewImage 181): per-channel curves, then the master curve, through
    # 256-sample tables read with texelFetch and interpolated by the shader
    curves = [Curve.from_raw(prompt[f"10:{i}"]["inputs"]["curve"]) for i in (4, 5, 6, 7)]
    tables = [np.array([c.evaluate(float(t)) for t in np.linspace(0.0, 1.0, 256)]) for c in curves]

    def apply(table: np.ndarray, value: np.ndarray) -> np.ndarray:
        position = np.clip(value, 0.0, 1.0) * 255.0
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, 255)
        return table[low] + (position - low) * (table[high] - table[low])

    graded = np.stack([apply(tables[0], apply(tables[1 + c], x[..., c])) for c in range(3)], axis=-1)
    expected = np.clip(255.0 * graded, 0, 255).astype(np.int16)
    assert np.abs(shown("181")[..., :3].astype(np.int16) - expected).max() <= 1

    # Image Channels (subgraph 29): four render targets, each channel as grey (k / 255 back to uint8 by
    # truncation: k or k - 1)
    for preview_id, channel in (("191", 0), ("192", 1), ("194", 2)):
        grey = shown(preview_id)[..., :3].astype(np.int16)
        assert np.all(grey == grey[..., :1]) and np.all(np.abs(grey[..., 0] - source[..., channel]) <= 1)
    assert np.all(shown("193")[..., :3] == 255)  # the alpha of an RGB image: 1
