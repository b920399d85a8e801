"""Today's ComfyUI model-management names packs import (ComfyUI-MultiGPU, comfyui-tooling-nodes,
Lora-Manager): `comfy.memory_management`, the dynamic-VRAM names of `comfy.model_patcher`,
`comfy.model_management.current_stream` / `sync_stream`, `comfy.sd.load_state_dict_guess_config`
and `StyleModel`, `comfy.utils.convert_old_quants`, `app.logger` over the server's log store."""
from __future__ import annotations

import io
import json
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

# -- comfy.memory_management ---------------------------------------------------------------------


def test_memory_management_says_no_dynamic_vram_and_keeps_the_ram_release_hook(session):
    import comfy.memory_management as mem

    assert mem.aimdo_enabled is False
    assert mem.extra_ram_release(1000) == 0  # no callback set
    calls = []
    try:
        mem.set_ram_cache_release_state(lambda target, free_active=False: calls.append((target, free_active)) or 7,
                                        -5)
        assert mem.RAM_CACHE_HEADROOM == 0  # clamped at 0
        assert mem.extra_ram_release(123, free_active=True) == 7 and calls == [(123, True)]
        mem.set_ram_cache_release_state(None, 2048)
        assert mem.RAM_CACHE_HEADROOM == 2048 and mem.extra_ram_release(1) == 0
    finally:
        mem.set_ram_cache_release_state(None, 0)


def test_vram_aligned_size_rounds_each_tensor_up_to_1kib(session):
    import comfy.memory_management as mem

    assert mem.vram_aligned_size(torch.zeros(3)) == 1024  # 12 bytes
    assert mem.vram_aligned_size(torch.zeros(256)) == 1024  # exactly 1 KiB
    assert mem.vram_aligned_size(torch.zeros(257)) == 2048
    assert mem.vram_aligned_size(None) == 0
    assert mem.vram_aligned_size([torch.zeros(3), None, torch.zeros(300, dtype=torch.float16)]) == 2048
    assert mem.vram_aligned_size(mem.TensorGeometry((16, 16), torch.bfloat16)) == 1024


def test_geometries_carry_shape_and_dtype_without_data(session):
    import comfy.memory_management as mem

    geometry = mem.TensorGeometry(shape=(2, 3), dtype=torch.float16)
    assert (geometry.numel(), geometry.element_size()) == (6, 2)
    assert mem.TensorGeometry((4,), torch.int8).element_size() == 1
    stored = torch.zeros(5, dtype=torch.float8_e4m3fn)
    stored._model_dtype = torch.bfloat16  # a weight that computes in another dtype
    out = mem.tensors_to_geometries([torch.zeros(2, 3), None, stored])
    assert out[0] == (torch.Size([2, 3]), torch.float32) and out[1] is None
    assert out[2].dtype == torch.bfloat16
    overridden = mem.tensors_to_geometries([torch.zeros(1), stored], dtype=torch.float16)
    assert [g.dtype for g in overridden] == [torch.float16] * 2


def test_interpret_gathered_like_gives_aligned_views_of_one_buffer(session):
    import comfy.memory_management as mem

    gathered = torch.zeros(4096, dtype=torch.uint8)
    a, none, b = mem.interpret_gathered_like([torch.zeros(2, 3), None, torch.zeros(4, dtype=torch.float16)], gathered)
    assert none is None and (a.shape, a.dtype, b.shape, b.dtype) == ((2, 3), torch.float32, (4,), torch.float16)
    a.fill_(1.0)
    b.fill_(2.0)
    assert a.data_ptr() == gathered.data_ptr() and b.data_ptr() == gathered.data_ptr() + 1024  # aligned
    assert torch.equal(gathered[:24].view(torch.float32), torch.ones(6))
    assert torch.equal(gathered[1024:1032].view(torch.float16), torch.full((4,), 2.0, dtype=torch.float16))
    # geometries lay out the same way (what a caster sizes its buffer with)
    views = mem.interpret_gathered_like(mem.tensors_to_geometries([torch.zeros(2, 3)]), gathered)
    assert views[0].data_ptr() == gathered.data_ptr()
    with pytest.raises(ValueError, match="1D and single-byte"):
        mem.interpret_gathered_like([torch.zeros(1)], torch.zeros(8))
    with pytest.raises(ValueError, match="too small"):
        mem.interpret_gathered_like([torch.zeros(2000)], gathered)


def test_read_tensor_file_slice_into_reads_a_tagged_weight_and_declines_the_rest(session, tmp_path):
    import comfy.memory_management as mem

    values = torch.arange(6, dtype=torch.float32)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\x00" * 16 + values.numpy().tobytes())
    destination = torch.zeros(6)
    assert mem.read_tensor_file_slice_into(values.clone(), destination) is False  # our weights: not tagged
    assert torch.equal(destination, torch.zeros(6))

    with open(path, "rb") as handle:
        tagged = torch.empty(6)
        tagged.untyped_storage()._comfy_tensor_file_slice = mem.TensorFileSlice(handle, threading.Lock(), 16, 24)
        assert mem.read_tensor_file_slice_into(tagged, destination) is True
        assert torch.equal(destination, values)
        assert mem.read_tensor_file_slice_into(tagged, torch.zeros(3)) is False  # too small
        assert mem.read_tensor_file_slice_into(tagged, torch.zeros(6), destination2=torch.zeros(6)) is False


# -- comfy.model_patcher -------------------------------------------------------------------------


class _CastLinear(torch.nn.Linear):
    """A layer that casts its weights per call and stores its weight in another form (ComfyUI's
    `comfy_cast_weights` layers; our ScaledFp8Linear has the same set/convert protocol)."""

    comfy_cast_weights = True

    def convert_weight(self, weight, inplace=False, **kwargs):
        return weight * 2

    def set_weight(self, weight, inplace_update=False, seed=0, return_weight=False, **kwargs):
        return weight / 2


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.big = _CastLinear(128, 128)  # 66 KiB: >= 64 KiB
        self.small = _CastLinear(4, 4, bias=False)
        self.plain = torch.nn.Linear(2, 2)
        self.block = torch.nn.Sequential(torch.nn.Linear(3, 3))
        self.block.register_parameter("scale", torch.nn.Parameter(torch.ones(3)))  # beside a child


def test_get_key_weight_and_the_low_vram_estimate(session):
    import comfy.model_patcher as mp

    net = _Net()
    weight, set_func, convert_func = mp.get_key_weight(net, "plain.weight")
    assert weight is net.plain.weight and set_func is None and convert_func is None
    weight, set_func, convert_func = mp.get_key_weight(net, "small.weight")
    assert weight is net.small.weight and set_func.__self__ is net.small and convert_func.__self__ is net.small
    assert mp.get_key_weight(net, "block.scale")[0] is net.block.scale

    # elements x compute dtype x 2: float32 without `manual_cast_dtype`, the weight's own for None
    assert mp.LOWVRAM_PATCH_ESTIMATE_MATH_FACTOR == 2
    assert mp.low_vram_patch_estimate_vram(net, "plain.weight") == 4 * 4 * 2
    net.manual_cast_dtype = torch.bfloat16
    assert mp.low_vram_patch_estimate_vram(net, "plain.weight") == 4 * 2 * 2
    net.manual_cast_dtype = None
    net.plain.half()
    assert mp.low_vram_patch_estimate_vram(net, "plain.weight") == 4 * 2 * 2
    assert mp.low_vram_patch_estimate_vram(net, "small.bias") == 0  # no bias


def test_core_and_dynamic_patcher_classes(session):
    import comfy.model_patcher as mp
    import comfy.quant_ops

    assert mp.CoreModelPatcher is mp.ModelPatcher
    assert issubclass(mp.ModelPatcherDynamic, mp.ModelPatcher) and mp.ModelPatcherDynamic is not mp.ModelPatcher
    assert mp.QuantizedTensor is comfy.quant_ops.QuantizedTensor
    patcher = mp.CoreModelPatcher(_Net(), load_device="cpu", offload_device="cpu")
    assert isinstance(patcher, mp.ModelPatcher) and patcher.is_dynamic() is False
    assert mp.ModelPatcherDynamic(_Net(), "cpu", "cpu").is_dynamic() is False  # nothing loads dynamically here
    assert not isinstance(patcher, mp.ModelPatcherDynamic)


def test_load_list_orders_modules_by_what_moving_them_costs(session):
    import comfy.model_patcher as mp

    net = _Net()
    patcher = mp.ModelPatcher(net, "cpu", "cpu")
    by_name = {entry[-3]: entry for entry in patcher._load_list()}
    assert "block" not in by_name and set(by_name) == {"big", "small", "plain", "block.0"}  # `block` has a child
    big = (128 * 128 + 128) * 4
    assert by_name["big"][:2] == (big, big) and by_name["big"][3] is net.big
    assert set(by_name["big"][4]) == {"weight", "bias"}
    # a patched cast layer adds its patch estimate (float32 compute without manual_cast_dtype)
    patcher.add_patches({"small.weight": (torch.zeros(4, 4),)}, 1.0)
    small = patcher._load_list()
    small = next(e for e in small if e[-3] == "small")
    assert small[:2] == (64 + 16 * 4 * 2, 64)
    # a stored dtype other than the compute dtype adds the weight in the compute dtype
    net.manual_cast_dtype = torch.float16
    entry = next(e for e in mp.ModelPatcher(net, "cpu", "cpu")._load_list() if e[-3] == "big")
    assert entry[0] == big + 128 * 128 * 2 + 128 * 2
    # dynamic order: small modules first, then the largest
    dynamic = sorted(mp.ModelPatcher(net, "cpu", "cpu")._load_list(for_dynamic=True))
    assert [e[-3] for e in dynamic][-1] == "big" and dynamic[-1][:2] == (True, -entry[0])
    # default_device: parameters of a module that is not a leaf move there
    net.block.scale.data = net.block.scale.data.to(torch.float16)
    mp.ModelPatcher(net, "cpu", "cpu")._load_list(default_device="cpu")
    assert net.block.scale.dtype == torch.float16  # no `scale_comfy_model_dtype`: dtype kept


def test_a_wrap_of_the_dynamic_load_list_leaves_model_patcher_alone(session, monkeypatch):
    import comfy.model_patcher as mp

    original = mp.ModelPatcherDynamic._load_list
    monkeypatch.setattr(mp.ModelPatcherDynamic, "_load_list",
                        lambda self, for_dynamic=False, default_device=None: ["wrapped"])
    assert mp.ModelPatcherDynamic(_Net(), "cpu", "cpu")._load_list() == ["wrapped"]
    assert mp.ModelPatcher(_Net(), "cpu", "cpu")._load_list() != ["wrapped"]
    assert original is mp.ModelPatcher._load_list


def test_partially_load_and_unload_move_the_whole_model(session):
    import comfy.model_patcher as mp

    patcher = mp.ModelPatcher(torch.nn.Linear(2, 2), "cpu", "cpu")
    assert patcher.partially_load("cpu", extra_memory=1) == 0  # already on its load device
    assert patcher.partially_unload("cpu", memory_to_free=1) == 0
    patcher.add_patches({"weight": (torch.ones(2, 2),)}, 1.0)
    base = patcher.model.weight.detach().clone()
    patcher.partially_load("cpu")
    assert torch.equal(patcher.model.weight, base + 1)  # kept loaded with its patches
    patcher.partially_unload("cpu")
    assert torch.equal(patcher.model.weight, base)


def test_detach_takes_what_load_models_gpu_left_applied_off(session):
    import comfy.model_patcher as mp

    patcher = mp.ModelPatcher(torch.nn.Linear(2, 2), "cpu", "cpu")
    base = patcher.model.weight.detach().clone()
    patcher.add_patches({"weight": (torch.ones(2, 2),)}, 1.0)
    detached = []
    patcher.add_callback("on_detach_after", lambda p, unpatch_all: detached.append(unpatch_all))
    patcher.partially_load("cpu")
    assert patcher.detach(unpatch_all=False) is patcher.model and torch.equal(patcher.model.weight, base + 1)
    assert patcher.detach() is patcher.model and torch.equal(patcher.model.weight, base)
    assert detached == [False, True]


# -- comfy.model_management ----------------------------------------------------------------------


def test_loaded_model_load_for_packs_that_replace_load_models_gpu(session):
    """ComfyUI-MultiGPU's DisTorch replaces `load_models_gpu` with its own, which ends in
    `LoadedModel(patcher).model_load(...)` and detaches records with `model_finalizer.detach()`."""
    import comfy.model_management as mm
    import comfy.model_patcher as mp

    patcher = mp.ModelPatcher(torch.nn.Linear(2, 2), "cpu", "cpu")
    base = patcher.model.weight.detach().clone()
    patcher.add_patches({"weight": (torch.ones(2, 2),)}, 1.0)
    record = mm.LoadedModel(patcher)
    assert record.model_load(0, force_patch_weights=False) is patcher.model is record.real_model
    assert torch.equal(patcher.model.weight, base + 1)  # loaded as load_models_gpu leaves it
    assert record.model_finalizer.detach() is None and not record.model_finalizer.alive
    patcher.detach()
    assert torch.equal(patcher.model.weight, base)



def test_current_stream_and_sync_stream(session, monkeypatch):
    import comfy.model_management as mm

    assert mm.current_stream(None) is None and mm.current_stream(torch.device("cpu")) is None
    assert mm.current_stream("cuda:0") is None  # ComfyUI's test reads `.type`: a string is no device
    mm.sync_stream(torch.device("cpu"), object())  # no stream on the CPU: nothing to wait on
    assert mm.get_offload_stream(torch.device("cpu")) is None

    waited = []

    class Stream:
        def wait_stream(self, other):
            waited.append(other)

    current = Stream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    assert mm.current_stream(torch.device("cuda", 0)) is current
    side = object()
    mm.sync_stream(torch.device("cuda", 0), side)
    mm.sync_stream(torch.device("cuda", 0), None)
    assert waited == [side]


# -- comfy.sd ------------------------------------------------------------------------------------


@pytest.fixture
def checkpoint(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    import shutil

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    return tmp_path / "models" / "checkpoints" / "tiny.safetensors"


def _same_weights(a, b) -> bool:
    ours, theirs = a.model_state_dict(), b.model_state_dict()
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_load_state_dict_guess_config_loads_a_checkpoint_in_memory(checkpoint):
    import comfy.model_patcher
    import comfy.sd
    from safetensors.torch import load_file

    sd = load_file(str(checkpoint))
    model, clip, vae, clipvision = comfy.sd.load_state_dict_guess_config(sd, disable_dynamic=True)
    ref_model, ref_clip, ref_vae, _ = comfy.sd.load_checkpoint_guess_config(str(checkpoint), disable_dynamic=False)
    assert isinstance(model, comfy.model_patcher.ModelPatcher) and clipvision is None
    assert isinstance(clip, comfy.sd.CLIP) and isinstance(vae, comfy.sd.VAE)
    assert _same_weights(model, ref_model) and _same_weights(vae, ref_vae)
    assert clip.tokenize("a cat").keys() == ref_clip.tokenize("a cat").keys()
    none_model, clip2, vae2, _ = comfy.sd.load_state_dict_guess_config(sd, output_model=False, output_vae=False,
                                                                        output_clip=False)
    assert none_model is None and clip2 is None and vae2 is None


def test_load_state_dict_guess_config_loads_a_bare_diffusion_model_alone(checkpoint):
    import comfy.sd
    from safetensors.torch import load_file

    sd = load_file(str(checkpoint))
    unet = {k: v for k, v in sd.items() if k.startswith("model.diffusion_model.")}
    model, clip, vae, clipvision = comfy.sd.load_state_dict_guess_config(unet)
    assert clip is None and vae is None and clipvision is None
    assert _same_weights(model, comfy.sd.load_diffusion_model_state_dict(dict(unet), disable_dynamic=True))
    from comfy_core.families.errors import UnknownFamilyError

    with pytest.raises(UnknownFamilyError):
        comfy.sd.load_state_dict_guess_config({"nothing.weight": torch.zeros(2)})


def test_a_pack_replacing_load_state_dict_guess_config_is_called_through_comfy_sd(session, monkeypatch):
    import comfy.sd
    import compat.files_sd

    calls = []
    monkeypatch.setattr(comfy.sd, "load_state_dict_guess_config", lambda sd, **kw: calls.append(kw) or "theirs")
    assert compat.files_sd.load_state_dict_guess_config is comfy.sd.load_state_dict_guess_config
    assert comfy.sd.load_state_dict_guess_config({}, disable_dynamic=True) == "theirs" and calls


def test_style_model_is_our_style_model_and_builds_from_a_network(session):
    import comfy.sd
    from comfy_core.style_models.style_model import StyleModel as Core
    from comfy_core.style_models.t2i_style import T2IStyleAdapter, T2IStyleConfig

    torch.manual_seed(0)
    network = T2IStyleAdapter(T2IStyleConfig(width=8, context_dim=16, layers=1, tokens=2, heads=2)).eval()
    with torch.no_grad():  # the runtime's layers skip initialisation (weights come from files): set them
        for parameter in network.parameters():
            parameter.normal_(0.0, 0.2)
    built = comfy.sd.StyleModel(network, device="cpu")
    assert type(built) is Core and isinstance(built, comfy.sd.StyleModel)
    assert isinstance(Core(network, "t2i_style"), comfy.sd.StyleModel) and not isinstance(network, comfy.sd.StyleModel)
    output = types.SimpleNamespace(last_hidden_state=torch.randn(1, 5, 8))
    assert torch.equal(built.get_cond(output), Core(network, "t2i_style").get_cond(output))
    assert torch.equal(comfy.sd.StyleModel.get_cond(built, output), built.get_cond(output))
    with pytest.raises(TypeError, match="not a style model network"):
        comfy.sd.StyleModel(torch.nn.Linear(2, 2))


# -- comfy.utils.convert_old_quants ------------------------------------------------------------


def _conf(tensor) -> dict:
    return json.loads(bytes(tensor.tolist()).decode("utf-8"))


def test_convert_old_quants_rewrites_a_scaled_fp8_model(session):
    import comfy.utils
    from comfy_core.weights.quant_registry import quantized_layers

    fp8 = torch.float8_e4m3fn
    sd = {
        "model.diffusion_model.scaled_fp8": torch.zeros(0, dtype=fp8),
        "model.diffusion_model.a.weight": torch.ones(4, 4).to(fp8),
        "model.diffusion_model.a.scale_weight": torch.tensor(0.5),
        "model.diffusion_model.a.scale_input": torch.tensor(1.0),
        "model.diffusion_model.b.weight": torch.ones(4, 4).to(fp8),
        "model.diffusion_model.b.scale_weight": torch.tensor(2.0),
        "model.diffusion_model.b.scale_input": torch.tensor(3.0),
        "model.diffusion_model.norm.weight": torch.ones(4),
        "first_stage_model.x": torch.ones(1),
    }
    out, metadata = comfy.utils.convert_old_quants(sd, "model.diffusion_model.", metadata=None)
    assert metadata == {}
    assert set(out) == {"model.diffusion_model.a.weight", "model.diffusion_model.a.weight_scale",
                        "model.diffusion_model.b.weight", "model.diffusion_model.b.weight_scale",
                        "model.diffusion_model.b.input_scale", "model.diffusion_model.norm.weight",
                        "first_stage_model.x", "model.diffusion_model.a.comfy_quant",
                        "model.diffusion_model.b.comfy_quant"}
    assert _conf(out["model.diffusion_model.a.comfy_quant"]) == {"format": "float8_e4m3fn"}
    assert out["model.diffusion_model.b.input_scale"].item() == 3.0
    # the model's tensors were taken out of the caller's dict, as ComfyUI pops them (not the marker)
    assert set(sd) == {"first_stage_model.x", "model.diffusion_model.scaled_fp8"}
    # what our loaders read (a file's header: safetensors dtype names)
    names = {torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32", torch.uint8: "U8"}
    header = {k: types.SimpleNamespace(dtype=names[v.dtype]) for k, v in out.items()}
    layers = quantized_layers(header, None, out.__getitem__)
    assert set(layers) == {"model.diffusion_model.a", "model.diffusion_model.b"}
    assert layers["model.diffusion_model.a"].format.name == "float8_e4m3fn"


def test_convert_old_quants_marker_variants_metadata_and_plain_files(session):
    import comfy.utils

    two = {"scaled_fp8": torch.zeros(2, dtype=torch.float8_e4m3fn), "l.weight": torch.zeros(2, 2),
           "l.scale_weight": torch.tensor(1.0)}
    out, _ = comfy.utils.convert_old_quants(two)
    assert _conf(out["l.comfy_quant"]) == {"format": "float8_e4m3fn", "full_precision_matrix_mult": True}
    e5m2 = {"scaled_fp8": torch.zeros(0, dtype=torch.float8_e5m2), "l.scale_weight": torch.tensor(1.0)}
    assert _conf(comfy.utils.convert_old_quants(e5m2)[0]["l.comfy_quant"]) == {"format": "float8_e5m2"}
    f32 = {"scaled_fp8": torch.zeros(0), "l.scale_weight": torch.tensor(1.0)}
    assert _conf(comfy.utils.convert_old_quants(f32)[0]["l.comfy_quant"]) == {"format": "float8_e4m3fn"}

    described = {"_quantization_metadata": json.dumps({"layers": {"x.proj": {"format": "nvfp4"}}}), "other": "1"}
    plain = {"x.proj.weight": torch.zeros(1), "scaled_fp8": torch.zeros(0)}
    out, metadata = comfy.utils.convert_old_quants(plain, metadata=described)
    assert metadata is described and _conf(out["x.proj.comfy_quant"]) == {"format": "nvfp4"}
    assert "scaled_fp8" in out  # the metadata wins: the marker is not read

    untouched = {"w": torch.zeros(1)}
    out, metadata = comfy.utils.convert_old_quants(untouched, "model.", metadata={})
    assert out is untouched and set(out) == {"w"} and metadata == {}


# -- app.logger ----------------------------------------------------------------------------------


@pytest.fixture
def log_store(session, monkeypatch):
    """The session bound to a server state whose log store is a `LogBuffer` (web/routes_logs.py)."""
    from web.routes_logs import LogBuffer

    store = LogBuffer(types.SimpleNamespace(loop=None, clients={}), capacity=4)
    monkeypatch.setattr(session, "state", types.SimpleNamespace(log_buffer=store))
    return store


def test_get_logs_is_none_without_a_server(session):
    import app.logger

    assert app.logger.get_logs() is None and app.logger.logs is None
    assert app.logger.stdout_interceptor is None and app.logger.stderr_interceptor is None
    app.logger.on_flush(lambda entries: None)  # nothing to register with
    app.logger.setup_logger(log_level="INFO", capacity=10, use_stdout=True)
    assert app.logger.get_logs() is None


def test_get_logs_answers_from_the_servers_log_store(log_store):
    import app.logger

    log_store.add_text("first line\n")
    log_store.add_text("50%")
    log_store.add_text("\r100%\n")  # replaces the unfinished line, as ComfyUI's
    entries = app.logger.get_logs()
    assert [e["m"] for e in entries] == ["first line\n", "\r100%\n"] and entries.maxlen == 4
    assert list(app.logger.logs) == list(entries) and list(entries) == log_store.snapshot()
    entries.clear()  # a copy: the store keeps its entries
    assert len(log_store.snapshot()) == 2


def test_on_flush_callbacks_get_each_new_entry(log_store):
    import app.logger

    seen = []

    def callback(entries):
        seen.append([e["m"] for e in entries])
        log_store.add_text("written by the callback\n")  # not fed back to it

    app.logger.on_flush(callback)
    log_store.add_text("hello\n")
    assert seen == [["hello\n"]]
    assert [e["m"] for e in log_store.snapshot()] == ["hello\n", "written by the callback\n"]


def test_log_interceptor_writes_through_into_the_store(log_store):
    import app.logger

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8")
    interceptor = app.logger.LogInterceptor(stream)
    flushed = []
    interceptor.on_flush(flushed.append)
    interceptor.write("to the console\n")
    interceptor.flush()
    assert raw.getvalue() == b"to the console\n"
    assert [e["m"] for e in log_store.snapshot()] == ["to the console\n"]
    assert [e["m"] for e in flushed[0]] == ["to the console\n"]


def test_startup_warnings_are_kept_and_printed_once(session, caplog):
    import app.logger

    app.logger.log_startup_warning("careful")
    assert app.logger.STARTUP_WARNINGS == ["careful"]
    app.logger.print_startup_warnings()
    assert app.logger.STARTUP_WARNINGS == [] and caplog.text.count("careful") == 2


def test_the_servers_log_routes_share_their_store_with_app_logger():
    from aiohttp import web

    from web.routes_logs import LogBuffer, log_routes
    from web.state import STATE_KEY

    app = web.Application()
    state = types.SimpleNamespace(hub=types.SimpleNamespace(loop=None, clients={}), log_buffer=None)
    app[STATE_KEY] = state
    log_routes(app)
    assert isinstance(state.log_buffer, LogBuffer)


def test_a_packs_own_app_module_wins_over_comfyuis(session, tmp_path, monkeypatch):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("OWN = True\n")
    (tmp_path / "app" / "logger.py").write_text("logger = 'theirs'\n")
    saved = {name: sys.modules.pop(name) for name in ("app", "app.logger") if name in sys.modules}
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import app.logger

        assert app.OWN is True and app.logger.logger == "theirs"
        assert Path(app.__file__).parent == tmp_path / "app"
    finally:
        for name in ("app", "app.logger"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


LOGS_PACK = '''
import logging

import app.logger
from aiohttp import web
from server import PromptServer


@PromptServer.instance.routes.get("/logs_pack/logs")
async def logs(request):
    entries = app.logger.get_logs()
    return web.json_response(None if entries is None else list(entries))

NODE_CLASS_MAPPINGS = {}
'''


async def test_a_packs_get_logs_is_what_internal_logs_serves(tmp_path):
    import logging
    import uuid

    from tests.compat.compat_harness import start_pack_server

    packs = tmp_path / "packs"
    (packs / "logs_pack").mkdir(parents=True)
    (packs / "logs_pack" / "__init__.py").write_text(LOGS_PACK)
    server = await start_pack_server(tmp_path / "base", custom_node_dirs=(packs,))
    try:
        marker = f"marker {uuid.uuid4()}"
        logging.getLogger("logs_pack_test").warning(marker)
        theirs = await server.get_json("/logs_pack/logs")
        ours = (await server.get_json("/internal/logs/raw"))["entries"]
        mine = [entry for entry in theirs if marker in entry["m"]]
        assert len(mine) == 1 and mine[0] in ours  # the same entry, time stamp included: one store
    finally:
        await server.close()


# -- the multi-GPU device choices (comfy_extras/nodes_multigpu.py's, which packs import) ----------


def test_device_options_and_their_resolution_on_this_runtimes_one_device(session):
    import comfy.model_management as mm

    device = mm.get_torch_device()
    assert mm.get_all_torch_devices() == [device] and mm.get_all_torch_devices(exclude_current=True) == []
    assert mm.get_gpu_device_options() == ["default", "cpu"]  # one device: no gpu:i entries, as ComfyUI
    assert mm.get_gpu_device_options_no_cpu() == ["default"]
    assert mm.resolve_gpu_device_option("default") is None and mm.resolve_gpu_device_option(None) is None
    assert mm.resolve_gpu_device_option("cpu") == torch.device("cpu")
    assert mm.resolve_gpu_device_option("gpu:1") is None and mm.resolve_gpu_device_option("bad") is None
    # gpu:0 is the one device when it is a GPU; on a CPU-only machine there is none
    assert mm.resolve_gpu_device_option("gpu:0") == (device if device.type != "cpu" else None)
