"""build_state/build_environment: flags reach the environment, executor cache, packs and store."""
from __future__ import annotations

import shutil
from pathlib import Path

from web.bootstrap import build_environment, build_registry, build_state, cache_config
from web.config import CacheSettings, ServerConfig

PACK = Path(__file__).resolve().parent / "web_test_pack"


def test_folders_preview_method_and_cpu_reach_the_environment(tmp_path):
    config = ServerConfig(base_dir=tmp_path, output_dir=tmp_path / "out", temp_dir=tmp_path / "t" / "temp",
                          preview_method="none", cpu=True)
    env, custom_dirs = build_environment(config)
    assert env.output_dir == (tmp_path / "out").resolve() and env.output_dir.is_dir()
    assert env.temp_dir == (tmp_path / "t" / "temp").resolve()
    assert env.input_dir == tmp_path.resolve() / "input" and env.user_dir == tmp_path.resolve() / "user"
    assert env.preview_method == "none"
    assert env.memory is not None and env.memory.device.type == "cpu"
    assert custom_dirs == [tmp_path.resolve() / "custom_nodes"]


def test_extra_model_paths_add_model_and_custom_node_folders(tmp_path):
    yaml_file = tmp_path / "extra.yaml"
    yaml_file.write_text("mine:\n  base_path: shared\n  loras: my_loras\n  custom_nodes: my_nodes\n")
    env, custom_dirs = build_environment(ServerConfig(base_dir=tmp_path, extra_model_paths=(yaml_file,)))
    assert (tmp_path / "shared" / "my_loras").resolve() in env.folders.paths("loras")
    assert (tmp_path / "shared" / "my_nodes").resolve() in custom_dirs


def test_cache_flags_become_the_executor_cache():
    assert cache_config(ServerConfig(cache=CacheSettings("none"))).kind == "none"
    assert cache_config(ServerConfig(cache=CacheSettings("lru", size=0))).kind == "classic"  # ComfyUI: lru 0
    lru = cache_config(ServerConfig(cache=CacheSettings("lru", size=7)))
    assert (lru.kind, lru.size) == ("lru", 7)
    ram = cache_config(ServerConfig(cache=CacheSettings("ram", ram_headroom_gb=2.0)))
    assert (ram.kind, ram.ram_headroom_gb) == ("ram", 2.0)


def test_custom_nodes_load_unless_disabled_and_whitelist_still_loads(tmp_path):
    shutil.copytree(PACK, tmp_path / "custom_nodes" / "web_test_pack")
    dirs = [tmp_path / "custom_nodes"]
    registry, packs = build_registry(ServerConfig(base_dir=tmp_path), dirs)
    assert "SrvConst" in registry and [p.name for p in packs] == ["web_test_pack"]
    registry, packs = build_registry(ServerConfig(base_dir=tmp_path, disable_all_custom_nodes=True), dirs)
    assert "SrvConst" not in registry and packs == []
    registry, packs = build_registry(ServerConfig(base_dir=tmp_path, disable_all_custom_nodes=True,
                                                  whitelist_custom_nodes=("web_test_pack",)), dirs)
    assert "SrvConst" in registry


def test_state_uses_the_user_directory_for_its_store(tmp_path):
    from tests.web.web_test_nodes import make_test_registry

    state = build_state(ServerConfig(base_dir=tmp_path, user_dir=tmp_path / "u", custom_node_dirs=()),
                        registry=make_test_registry())
    assert state.store.path == (tmp_path / "u").resolve() / "comfy_engine_queue.sqlite3"
    assert state.executor.env is state.env and state.queue.remaining == 0
    state.store.close()


def test_the_memory_manager_is_built_on_first_use_and_tracks_what_loaders_load(tmp_path, tiny_sd1_ckpt):
    from graph.context import NodeContext, reset_current, set_current
    from nodes.loaders import checkpoint_loader_simple, vae_loader

    for kind in ("checkpoints", "vae"):
        (tmp_path / "models" / kind).mkdir(parents=True)
        shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / kind / "a.safetensors")
    env, _ = build_environment(ServerConfig(base_dir=tmp_path, cpu=True))
    assert not env.memory.resolved  # start-up builds nothing that imports torch
    token = set_current(NodeContext("p", "1", "1", None, env))
    try:
        model, clip, vae = checkpoint_loader_simple("a.safetensors")
        (lone_vae,) = vae_loader("a.safetensors")
    finally:
        reset_current(token)
    manager = env.memory.resolve()
    assert env.memory.resolved and manager.device.type == "cpu"
    for patcher in (model, clip.patcher, vae, lone_vae):
        assert patcher.memory is manager and patcher.load_device == manager.device


def test_prestartup_scripts_run_once_before_the_built_in_nodes_register(tmp_path):
    import compat
    from graph.registry import Registry

    pack = tmp_path / "custom_nodes" / "counting_pack"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    log_file = tmp_path / "order.txt"
    (pack / "prestartup_script.py").write_text(
        "import nodes\n"  # ComfyUI's nodes module: the registry being built
        f"with open({str(log_file)!r}, 'a') as f:\n"
        "    f.write(str(len(nodes.NODE_CLASS_MAPPINGS)) + '\\n')\n")
    config = ServerConfig(base_dir=tmp_path)
    env, dirs = build_environment(config)
    session = compat.install(env, Registry())
    registry, packs = build_registry(config, dirs, compat_session=session)
    assert log_file.read_text().splitlines() == ["0"]  # once, with no built-in node registered yet
    assert [r.name for r in session.prestartup] == ["counting_pack"] and "KSampler" in registry
    assert [p.name for p in packs] == ["counting_pack"] and packs[0].ok


def test_attention_flags_set_the_backend_of_loaded_models_and_vaes(tmp_path, tiny_sd1_ckpt):
    from comfy_core.attention import current_backend
    from graph.context import NodeContext, reset_current, set_current
    from main import build_serve_parser, config_from_args
    from nodes.loaders import checkpoint_loader_simple, vae_loader

    for kind in ("checkpoints", "vae"):
        (tmp_path / "models" / kind).mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_sd1_ckpt, tmp_path / "models" / kind / "a.safetensors")

    def load(*flags: str):
        argv = ["--base-directory", str(tmp_path), "--cpu", *flags]
        env, _ = build_environment(config_from_args(build_serve_parser().parse_args(argv), argv))
        token = set_current(NodeContext("p", "1", "1", None, env))
        try:
            model, _clip, vae = checkpoint_loader_simple("a.safetensors")
            return model, vae, vae_loader("a.safetensors")[0]
        finally:
            reset_current(token)

    model, vae, lone_vae = load("--use-quad-cross-attention")
    assert model.attention_choice().name == "sub_quadratic"
    assert vae.attention_choice().name == "split" and lone_vae.attention_choice().name == "split"
    with model.applied():  # the backend in force while the model runs, for this patcher only
        assert current_backend().name == "sub_quadratic"
    assert current_backend().name == "sdpa"
    model, vae, _ = load("--use-split-cross-attention")
    assert (model.attention_choice().name, vae.attention_choice().name) == ("split", "split")
    model, vae, lone_vae = load()
    assert {p.attention_choice().name for p in (model, vae, lone_vae)} == {"sdpa"}


def test_metadata_mmap_and_preview_flags_reach_the_environment(tmp_path):
    from graph.context import NodeContext, reset_current, set_current
    from nodes.loaders import _options

    env, _ = build_environment(ServerConfig(base_dir=tmp_path, disable_metadata=True, mmap=False,
                                            preview_method="taesd", preview_size=256))
    assert env.disable_metadata and not env.mmap and env.preview_method == "taesd" and env.preview_size == 256
    token = set_current(NodeContext("p", "1", "1", None, env))
    try:
        assert _options().mmap is False  # --disable-mmap: weights copied, not mapped
    finally:
        reset_current(token)
    plain, _ = build_environment(ServerConfig(base_dir=tmp_path))
    assert not plain.disable_metadata and plain.mmap and plain.preview_method == "none"


def test_reserve_vram_keeps_that_much_more_device_memory_free(monkeypatch):
    import comfy_core.memory as memory
    from web.bootstrap import memory_factory

    gib = 1024 ** 3
    monkeypatch.setattr(memory, "device_total_memory", lambda device: 16 * gib)  # as if on a 16 GiB GPU
    assert memory_factory(None) is None
    manager = memory_factory(2.0)(cpu_only=True)
    assert manager.budget_bytes == 16 * gib - memory.DEFAULT_RESERVE - 2 * gib


def test_vram_flags_build_the_memory_manager_in_that_mode(monkeypatch):
    import comfy_core.memory as memory
    from comfy_core.memory_plan import VramMode
    from web.bootstrap import memory_factory

    assert memory_factory(None, None) is None
    manager = memory_factory(None, "lowvram")(cpu_only=True)
    assert manager.mode is VramMode.DISABLED  # the CPU ignores VRAM flags, as ComfyUI
    monkeypatch.setattr(memory, "choose_device", lambda cpu_only=False: memory.torch.device("meta"))
    manager = memory_factory(None, "novram")(cpu_only=False)
    assert manager.mode is VramMode.NO and manager.device.type == "meta"
    assert memory_factory(1.0, "gpu_only")(cpu_only=False).offload_device.type == "meta"
