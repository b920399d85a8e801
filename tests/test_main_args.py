"""main.py's flags: ComfyUI's names and meanings, flags ComfyUI lacks too refused."""
from __future__ import annotations

from pathlib import Path

import pytest

import main


def _config(*argv: str):
    parser = main.build_serve_parser()
    return main.config_from_args(parser.parse_args(list(argv)), list(argv))


def test_defaults_bind_loopback_8188():
    config = _config()
    assert config.listen == ("127.0.0.1",) and config.port == 8188 and config.loopback_only
    assert config.cache.kind == "classic" and config.cors_origin is None
    assert config.max_upload_bytes == 100 * 1024 * 1024


def test_bare_listen_means_all_interfaces():
    config = _config("--listen")
    assert config.listen == ("0.0.0.0", "::") and not config.loopback_only
    assert _config("--listen", "10.0.0.1,127.0.0.1").listen == ("10.0.0.1", "127.0.0.1")


def test_folders_and_repeatable_extra_model_paths(tmp_path):
    config = _config("--output-directory", str(tmp_path / "o"), "--input-directory", str(tmp_path / "i"),
                     "--temp-directory", str(tmp_path / "t"), "--user-directory", str(tmp_path / "u"),
                     "--extra-model-paths-config", "a.yaml", "--extra-model-paths-config", "b.yaml", "c.yaml")
    assert config.output_dir == tmp_path / "o" and config.input_dir == tmp_path / "i"
    assert config.temp_dir == tmp_path / "t" / "temp"  # ComfyUI appends temp/
    assert config.user_dir == tmp_path / "u"
    assert config.extra_model_paths == (Path("a.yaml"), Path("b.yaml"), Path("c.yaml"))


@pytest.mark.parametrize("argv, kind, size, headroom", [
    ((), "classic", 0, 4.0), (("--cache-classic",), "classic", 0, 4.0), (("--cache-lru", "5"), "lru", 5, 4.0),
    (("--cache-none",), "none", 0, 4.0), (("--cache-ram",), "ram", 0, 4.0), (("--cache-ram", "2.5"), "ram", 0, 2.5),
])
def test_cache_flags(argv, kind, size, headroom):
    cache = _config(*argv).cache
    assert (cache.kind, cache.size, cache.ram_headroom_gb) == (kind, size, headroom)


def test_cache_flags_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exc:
        main.build_serve_parser().parse_args(["--cache-none", "--cache-lru", "3"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_misc_flags():
    config = _config("--cpu", "--disable-all-custom-nodes", "--whitelist-custom-nodes", "a", "b",
                     "--max-upload-size", "1.5", "--enable-cors-header", "--verbose", "--quick-test-for-ci",
                     "--preview-method", "none", "--port", "9000")
    assert config.cpu and config.disable_all_custom_nodes and config.whitelist_custom_nodes == ("a", "b")
    assert config.max_upload_bytes == int(1.5 * 1024 * 1024) and config.cors_origin == "*"
    assert config.verbose and config.quick_test_for_ci and config.preview_method == "none" and config.port == 9000
    assert _config("--enable-cors-header", "http://x.test").cors_origin == "http://x.test"
    # ComfyUI's choices and default; 'auto' and 'taesd' reach the environment unchanged.
    assert _config().preview_method == "none"
    for method in ("auto", "taesd", "latent2rgb", "none"):
        assert _config("--preview-method", method).preview_method == method


@pytest.mark.parametrize("argv, needle", [
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--port", "abc"], "invalid int value"),
    (["--port", "70000"], "--port must be between"),
    (["--max-upload-size", "0"], "--max-upload-size must be positive"),
    (["--preview-method", "latent"], "invalid choice"),
    (["--fast", "warp_speed"], "invalid PerformanceFeature value"),
    (["--default-hashing-function", "crc32"], "invalid choice"),
    (["--front-end-root", "/nonexistent/editor"], "does not exist"),
    (["--tls-keyfile", "key.pem"], "--tls-keyfile and --tls-certfile must be given together"),
    (["--tls-keyfile", "/nonexistent/k.pem", "--tls-certfile", "/nonexistent/c.pem"], "no such file"),
    (["--lowvram", "--cpu"], "not allowed with"),  # ComfyUI's VRAM group includes --cpu
    (["--use-split-cross-attention", "--use-quad-cross-attention"], "not allowed with"),
    (["--reserve-vram", "-1"], "--reserve-vram must be >= 0"),
    (["run", "w.json", "--tls-keyfile", "k"], "unrecognized arguments: --tls-keyfile"),
    (["--extra-model-paths-config", "/nonexistent/x.yaml"], "no such file"),
    (["run"], "the following arguments are required: FILE"),
    (["run", "w.json", "--listen"], "unrecognized arguments: --listen"),
    (["--liste", "x"], "unrecognized arguments"),  # no silent abbreviations
])
def test_bad_flags_are_clear_errors(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main.main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_quick_test_for_ci_loads_everything_and_exits(tmp_path, capsys):
    assert main.main(["--base-directory", str(tmp_path), "--quick-test-for-ci", "--disable-all-custom-nodes"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("quick test: ") and "node types" in out
    assert (tmp_path / "user" / "comfy_engine_queue.sqlite3").is_file()


def test_bad_extra_model_paths_yaml_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    assert main.main(["--base-directory", str(tmp_path), "--extra-model-paths-config", str(bad),
                      "--quick-test-for-ci"]) == 1
    assert "error:" in capsys.readouterr().err


def test_port_in_use_is_a_clear_error(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main.main(["--base-directory", str(tmp_path), "--port", str(port), "--disable-all-custom-nodes"]) == 1
    assert f"cannot listen on 127.0.0.1 port {port}" in capsys.readouterr().err


def test_an_empty_checkpoint_folder_gets_a_hint_naming_the_folder_and_the_demo_command(tmp_path):
    from comfy_core.folders import ModelFolders
    from main import empty_model_hint

    folders = ModelFolders.default(tmp_path / "models")
    hint = empty_model_hint(folders)
    assert str(tmp_path / "models" / "checkpoints") in hint and "python -m tests.fixtures.checkpoints" in hint
    (tmp_path / "models" / "checkpoints").mkdir(parents=True)
    (tmp_path / "models" / "checkpoints" / "m.safetensors").write_bytes(b"x")
    assert empty_model_hint(folders) is None
