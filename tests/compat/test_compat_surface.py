"""ComfyUI's module-level APIs (folder_paths, comfy.*, comfy_execution, server, nodes) over a
session, without a server."""
from __future__ import annotations

import importlib
import logging

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.types import types_match


def _ctx(reports: list, interrupted: bool = False, node_id: str = "7") -> NodeContext:
    return NodeContext(prompt_id="p", node_id=node_id, display_node_id=node_id, list_index=0, env=None,
                       report=lambda v, m, p: reports.append((v, m, p)), is_interrupted=lambda: interrupted)


# -- the import hook ---------------------------------------------------------------------------
def test_comfyui_module_names_import_through_the_hook(session):
    for name in ("folder_paths", "server", "comfy.utils", "comfy.model_management", "comfy.sd", "comfy.samplers",
                 "comfy.sample", "comfy.cli_args", "comfy.comfy_types", "comfy.comfy_types.node_typing", "comfy_execution.graph_utils",
                 "comfy_execution.graph", "comfy_api.latest", "comfy_api.v0_0_2", "comfy_api.v0_0_1",
                 "latent_preview", "node_helpers"):
        module = importlib.import_module(name)
        assert module.__spec__.origin.startswith(str(importlib.import_module("compat.finder").SURFACE))
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("comfy.not_a_module")


def test_two_sessions_each_see_their_own_folders(tmp_path):
    import compat
    from compat.session import active
    from graph.registry import Registry
    from nodes.environment import Environment

    first = compat.install(Environment.rooted_at(tmp_path / "a"), Registry())
    second = compat.install(Environment.rooted_at(tmp_path / "b"), Registry())
    import folder_paths  # only after an install: the import hook is what finds ComfyUI's names
    assert active() is second  # outside any context: the most recent install
    with first.activate():
        assert folder_paths.get_output_directory() == str((tmp_path / "a" / "output").resolve())
    first.before_node_call("3", 0, 0)  # the executor's hook selects its server's session
    assert active() is first and folder_paths.models_dir == str((tmp_path / "a" / "models").resolve())


# -- folder_paths ------------------------------------------------------------------------------
def test_folder_paths_lists_and_resolves_model_files(session, tmp_path):
    import folder_paths

    ckpts = tmp_path / "models" / "checkpoints"
    (ckpts / "sub").mkdir(parents=True)
    (ckpts / "a.safetensors").write_bytes(b"x")
    (ckpts / "sub" / "b.ckpt").write_bytes(b"x")
    (ckpts / "notes.txt").write_text("not a model")
    assert folder_paths.get_filename_list("checkpoints") == ["a.safetensors", "sub/b.ckpt"]
    assert folder_paths.get_full_path("checkpoints", "sub/b.ckpt") == str((ckpts / "sub" / "b.ckpt").resolve())
    assert folder_paths.get_full_path("checkpoints", "missing.ckpt") is None
    assert folder_paths.get_full_path("checkpoints", "../checkpoints/a.safetensors") is None
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        folder_paths.get_full_path_or_raise("checkpoints", "missing.ckpt")
    with pytest.raises(KeyError, match="no_such_kind"):
        folder_paths.get_filename_list("no_such_kind")
    assert folder_paths.get_folder_paths("checkpoints")[0] == str(ckpts.resolve())
    assert ".safetensors" in folder_paths.supported_pt_extensions
    assert folder_paths.models_dir == str((tmp_path / "models").resolve())


def test_packs_add_folders_and_kinds_with_their_own_extensions(session, tmp_path):
    import folder_paths

    extra = tmp_path / "elsewhere"
    extra.mkdir()
    (extra / "first.pt").write_bytes(b"x")
    folder_paths.add_model_folder_path("loras", str(extra), is_default=True)
    assert folder_paths.get_folder_paths("loras")[0] == str(extra.resolve())
    assert folder_paths.get_filename_list("loras") == ["first.pt"]
    onnx = tmp_path / "onnx_models"
    onnx.mkdir()
    (onnx / "det.onnx").write_bytes(b"x")
    (onnx / "readme.md").write_text("x")
    folder_paths.folder_names_and_paths["detectors"] = ([str(onnx)], {".onnx"})
    assert folder_paths.get_filename_list("detectors") == ["det.onnx"]
    assert "detectors" in folder_paths.folder_names_and_paths
    paths, exts = folder_paths.folder_names_and_paths["detectors"]
    assert paths == [str(onnx.resolve())] and exts == {".onnx"}


def test_directories_annotations_and_save_paths(session, tmp_path):
    import folder_paths

    out = tmp_path / "output"
    assert folder_paths.get_output_directory() == str(out.resolve())
    assert folder_paths.get_input_directory() == str((tmp_path / "input").resolve())
    assert folder_paths.get_temp_directory() == str((tmp_path / "temp").resolve())
    assert folder_paths.get_annotated_filepath("x.png [output]") == str(out.resolve() / "x.png")
    assert folder_paths.get_annotated_filepath("x.png") == str((tmp_path / "input").resolve() / "x.png")
    assert not folder_paths.exists_annotated_filepath("x.png [output]")
    (out / "x.png").write_bytes(b"x")
    assert folder_paths.exists_annotated_filepath("x.png [output]")
    with pytest.raises(ValueError, match="inside"):
        folder_paths.get_annotated_filepath("../../etc/passwd [output]")
    assert not folder_paths.exists_annotated_filepath("../secret.png")

    folder, filename, counter, subfolder, prefix = folder_paths.get_save_image_path("run/img", str(out), 8, 8)
    assert (folder, filename, counter, subfolder, prefix) == (str(out.resolve() / "run"), "img", 1, "run", "run/img")
    (out / "run" / "img_00004_.png").write_bytes(b"x")
    assert folder_paths.get_save_image_path("run/img", str(out))[2] == 5
    assert folder_paths.get_save_image_path("%width%x%height%", str(out), 640, 480)[1] == "640x480"
    with pytest.raises(ValueError, match="outside"):
        folder_paths.get_save_image_path("../escape", str(out))


# -- comfy.utils, comfy.model_management -------------------------------------------------------
def test_progress_bar_reports_to_the_running_node_and_honours_interrupts(session):
    import comfy.model_management as mm
    import comfy.utils

    comfy.utils.ProgressBar(3).update(1)  # outside a node: counts, reports nowhere
    reports: list = []
    token = set_current(_ctx(reports))
    try:
        bar = comfy.utils.ProgressBar(4)
        bar.update(1)
        bar.update_absolute(3, 5, ("JPEG", "image", 64))
        bar.update_absolute(9)  # clamped to the total
    finally:
        reset_current(token)
    assert reports == [(1, 4, None), (3, 5, ("JPEG", "image", 64)), (5, 5, None)]

    token = set_current(_ctx([], interrupted=True))
    try:
        assert mm.processing_interrupted() is True
        with pytest.raises(mm.InterruptProcessingException):
            comfy.utils.ProgressBar(2).update(1)
        with pytest.raises(mm.InterruptProcessingException):
            mm.throw_exception_if_processing_interrupted()
    finally:
        reset_current(token)
    assert mm.processing_interrupted() is False
    mm.throw_exception_if_processing_interrupted()


def test_model_management_devices_and_unloading(session):
    import comfy.model_management as mm

    assert mm.intermediate_device() == torch.device("cpu")
    assert mm.OOM_EXCEPTION is torch.OutOfMemoryError  # resolved on first access
    from comfy.model_management import OOM_EXCEPTION
    assert OOM_EXCEPTION is mm.OOM_EXCEPTION
    with pytest.raises(AttributeError, match="not_a_name"):
        mm.not_a_name  # noqa: B018
    assert isinstance(mm.get_torch_device(), torch.device)
    assert mm.get_free_memory() > 0 and mm.get_total_memory() >= mm.get_free_memory()
    mm.soft_empty_cache()
    mm.unload_all_models()  # no memory manager in this environment: nothing to do, no error
    with pytest.raises(RuntimeError, match="no server"):
        mm.interrupt_current_processing()


def test_load_torch_file_and_common_upscale(session, tmp_path):
    import comfy.utils
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 3)}, str(tmp_path / "w.safetensors"), metadata={"format": "pt"})
    sd, meta = comfy.utils.load_torch_file(str(tmp_path / "w.safetensors"), return_metadata=True)
    assert torch.equal(sd["w"], torch.ones(2, 3)) and meta == {"format": "pt"}
    torch.save({"state_dict": {"v": torch.zeros(1)}}, tmp_path / "w.pt")
    assert list(comfy.utils.load_torch_file(str(tmp_path / "w.pt"))) == ["v"]
    (tmp_path / "bad.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="bad.safetensors"):
        comfy.utils.load_torch_file(str(tmp_path / "bad.safetensors"))

    samples = torch.rand(1, 4, 8, 16)  # [B, C, H, W]
    assert comfy.utils.common_upscale(samples, 32, 16, "bilinear", "disabled").shape == (1, 4, 16, 32)
    assert comfy.utils.common_upscale(samples, 8, 8, "nearest-exact", "center").shape == (1, 4, 8, 8)
    assert comfy.utils.common_upscale(samples, 8, 8, "bislerp", "center").shape == (1, 4, 8, 8)
    with pytest.raises(ValueError, match="upscale_method"):
        comfy.utils.common_upscale(samples, 8, 8, "magic", "disabled")


def test_samplers_and_sd_names(session):
    import comfy.samplers
    import comfy.sd

    assert len(comfy.samplers.KSampler.SAMPLERS) == 42 and comfy.samplers.KSampler.SAMPLERS[0] == "euler"
    assert "karras" in comfy.samplers.KSampler.SCHEDULERS
    assert callable(comfy.sd.load_checkpoint_guess_config) and callable(comfy.sd.load_lora_for_models)


# -- comfy.comfy_types -------------------------------------------------------------------------
def test_io_type_matching_semantics(session):
    from comfy.comfy_types import IO, CheckLazyMixin

    assert not (IO.ANY != "MODEL") and not (IO.INT != "*")
    assert not (IO.NUMBER != "INT") and not (IO.INT != "FLOAT,INT")
    assert IO.INT != "FLOAT" and IO.NUMBER != "INT,STRING" and IO.IMAGE != 3
    assert IO.INT == "INT" and {IO.INT: 1}["INT"] == 1 and str(IO.NUMBER) == "FLOAT,INT"
    assert types_match("INT", IO.NUMBER) and not types_match("STRING", IO.NUMBER)
    assert CheckLazyMixin().check_lazy_status(a=None, b=2) == ["a"]


# -- comfy_execution ---------------------------------------------------------------------------
def test_graph_builder_default_prefix_protocol(session):
    from comfy_execution.graph import ExecutionBlocker as GraphBlocker
    from comfy_execution.graph_utils import ExecutionBlocker, GraphBuilder, add_graph_prefix, is_link

    from graph.expansion import ExecutionBlocker as EngineBlocker

    assert ExecutionBlocker is GraphBlocker is EngineBlocker
    GraphBuilder.set_default_prefix("12", 3)
    first, second = GraphBuilder(), GraphBuilder()
    assert (first.prefix, second.prefix) == ("12.3.0.", "12.3.1.")
    a = first.node("CompatAdd", a=1, b=2)
    b = first.node("CompatAdd", a=a.out(0), b=None)
    assert a.id == "12.3.0.1" and b.id == "12.3.0.2" and is_link(b.get_input("a"))
    assert first.node("Other", id="1") is a  # ComfyUI returns the node already there
    first.replace_node_output("1", 0, 5)
    assert first.finalize()["12.3.0.2"] == {"class_type": "CompatAdd", "inputs": {"a": 5}}
    assert GraphBuilder("custom.").node("X").id == "custom.1"
    assert GraphBuilder.alloc_prefix(root="r", call_index=1, graph_index=9) == "r.1.9."
    graph, outputs = add_graph_prefix({"1": {"class_type": "X", "inputs": {"v": ["2", 0], "c": 3}}}, [["1", 0]], "p.")
    assert graph == {"p.1": {"class_type": "X", "inputs": {"v": ["p.2", 0], "c": 3}}} and outputs == [["p.1", 0]]


# -- server.PromptServer ---------------------------------------------------------------------
def test_prompt_server_instance_routes_events_and_handlers(session, caplog):
    from server import BinaryEventTypes, PromptServer

    assert PromptServer.instance is PromptServer.instance and PromptServer.instance.routes is session.routes
    assert PromptServer.instance.client_id is None
    with caplog.at_level(logging.WARNING):
        PromptServer.instance.send_sync("pack.event", {"x": 1})  # no server bound yet: dropped, logged
    assert "before the server started" in caplog.text

    sent = []

    class FakeQueue:
        running = type("Item", (), {"client_id": "c1", "prompt_id": "p1"})()

    class FakeState:
        def __init__(self):
            self.extra_routes, self.on_prompt_handlers = [], []

        queue = FakeQueue()
        running_client_id = "c1"
        running_prompt_id = "p1"

        def send(self, event, data, client_id=None):
            sent.append((event, data, client_id))

    handler = lambda body: body  # noqa: E731
    PromptServer.instance.add_on_prompt_handler(handler)

    @PromptServer.instance.routes.get("/pack/hello")
    async def hello(request):
        return None

    state = FakeState()
    session.bind(state)
    assert handler in state.on_prompt_handlers
    served = [route.path for table in state.extra_routes for route in table]
    assert served == ["/pack/hello", "/custom_nodes/status"]
    assert PromptServer.instance.client_id == "c1"
    PromptServer.instance.send_sync("pack.event", {"x": 2}, PromptServer.instance.client_id)
    PromptServer.instance.send_progress_text("hi", "5")
    assert sent[0] == ("pack.event", {"x": 2}, "c1")
    assert sent[1] == (BinaryEventTypes.TEXT, b"\x00\x00\x00\x015hi", "c1")


# -- nodes ---------------------------------------------------------------------------------------
def test_nodes_module_facade(session):
    import nodes
    from graph.registry import Registry

    assert nodes.MAX_RESOLUTION == 16384
    assert nodes.KSampler is nodes.KSampler and nodes.KSampler.FUNCTION == "sample"
    assert nodes.KSampler.RETURN_TYPES == ("LATENT",) and nodes.KSampler.CATEGORY == "sampling"
    assert list(nodes.KSampler.INPUT_TYPES()["required"])[:3] == ["model", "seed", "steps"]
    latent = nodes.EmptyLatentImage().generate(64, 32, 2)[0]
    assert latent["samples"].shape == (2, 4, 4, 8)
    with pytest.raises(AttributeError):
        nodes.NotANodeOfOurs  # noqa: B018

    class PackNode:
        CATEGORY = "x"
        RETURN_TYPES = ()
        FUNCTION = "run"

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {}}

        def run(self):
            return ()

    registry: Registry = session.registry
    from nodes import register_builtin_nodes

    register_builtin_nodes(registry)
    registry.add_v1("PackNode", PackNode, display_name="Pack Node")
    mappings = nodes.NODE_CLASS_MAPPINGS
    assert mappings["PackNode"] is PackNode and mappings["KSampler"] is nodes.KSampler
    assert nodes.NODE_DISPLAY_NAME_MAPPINGS["PackNode"] == "Pack Node"

    # copied or pickled, ComfyUI's plain dict of the same classes (ComfyUI-to-Python-Extension
    # deep-copies it as its base node set)
    import copy

    copied = copy.deepcopy(mappings)
    assert type(copied) is dict and copied == mappings.copy()
    assert copied["PackNode"] is PackNode and copied["KSampler"] is nodes.KSampler
    assert type(copy.copy(mappings)) is dict and copy.copy(mappings) == copied


def test_cli_args_answer_for_the_bound_server(session, tmp_path):
    from comfy.cli_args import LatentPreviewMethod, args

    from web.comfy_args import comfy_args
    from web.config import ServerConfig

    # A session whose host gave no flags answers the environment's folders and the preview method
    # only; the preview method is the environment's (what the samplers follow).
    assert args.output_directory == str((tmp_path / "output").resolve())
    assert args.preview_method == LatentPreviewMethod(session.env.preview_method) == LatentPreviewMethod.Latent2RGB
    with pytest.raises(AttributeError, match="no flag"):
        args.port  # noqa: B018

    session.comfy_args = comfy_args(ServerConfig())  # what the web host gives: ComfyUI's defaults
    session.env.preview_method = ServerConfig().preview_method  # as the host builds its environment
    assert args.preview_method == LatentPreviewMethod.NoPreviews and args.port == 8188
    assert args.lowvram is False and args.disable_metadata is False
    with pytest.raises(AttributeError, match="no flag"):
        args.not_a_flag  # noqa: B018
    with pytest.raises(AttributeError, match="read-only"):
        args.port = 1

    config = ServerConfig(port=9999, preview_method="taesd", cpu=True, attention_backend="split",
                          disable_metadata=True)
    session.comfy_args = comfy_args(config)
    session.env.preview_method = config.preview_method
    assert (args.port, args.preview_method, args.cpu) == (9999, LatentPreviewMethod.TAESD, True)
    # A config built in code (no parsed flags) still reports what the server runs with.
    assert args.use_split_cross_attention and args.disable_metadata and not args.use_quad_cross_attention
    assert args.fast == set() and args.lowvram is False and args.front_end_version == "comfyanonymous/ComfyUI@latest"
    args.fast.add("x")  # a pack mutating what it read changes nothing for the next read
    assert args.fast == set()


def test_node_helpers(session, tmp_path):
    import node_helpers
    from PIL import Image

    cond = [[torch.zeros(1, 2, 3), {"strength": 1.0, "hooks": [1]}]]
    out = node_helpers.conditioning_set_values(cond, {"strength": 0.5, "hooks": [2]}, append=False)
    assert out[0][1] == {"strength": 0.5, "hooks": [2]} and cond[0][1] == {"strength": 1.0, "hooks": [1]}
    assert node_helpers.conditioning_set_values(cond, {"hooks": [2]}, append=True)[0][1]["hooks"] == [1, 2]
    with pytest.raises(TypeError, match="CONDITIONING"):
        node_helpers.conditioning_set_values([torch.zeros(1)], {})
    Image.new("RGB", (4, 4)).save(tmp_path / "x.png")
    assert node_helpers.pillow(Image.open, tmp_path / "x.png").size == (4, 4)
    assert node_helpers.hasher()(b"a").hexdigest() == __import__("hashlib").sha256(b"a").hexdigest()
    assert node_helpers.string_to_torch_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="fp64"):
        node_helpers.string_to_torch_dtype("fp64")


def test_sampling_helpers_and_latent_preview_callback(session):
    import comfy.sample
    import comfy.samplers
    import latent_preview

    from comfy_core.models.model_sampling import ModelSampling

    sigmas = comfy.samplers.calculate_sigmas(ModelSampling(), "karras", 4)
    assert sigmas.shape == (5,) and float(sigmas[-1]) == 0.0
    latent = torch.zeros(2, 4, 8, 8)
    noise = comfy.sample.prepare_noise(latent, 42)
    assert noise.shape == latent.shape and torch.equal(noise, comfy.sample.prepare_noise(latent, 42))

    reports: list = []
    out: dict = {}
    token = set_current(_ctx(reports))
    try:
        callback = latent_preview.prepare_callback(object(), 3, out)
        x0 = torch.ones(1, 4, 2, 2)
        callback(0, x0, x0, 3)
    finally:
        reset_current(token)
    assert reports == [(1, 3, None)] and out["x0"] is x0


def test_nodes_facade_lists_the_bound_servers_model_files(session, tmp_path):
    import nodes

    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    (tmp_path / "models" / "checkpoints" / "here.safetensors").write_bytes(b"x")
    assert nodes.CheckpointLoaderSimple.INPUT_TYPES()["required"]["ckpt_name"][0] == ["here.safetensors"]
    assert nodes.CheckpointLoaderSimple.FUNCTION == "load_checkpoint"
