"""scripts/setup_stamp.py (the stamp that lets setup.sh, serve.sh and test.sh skip setting up when
.venv already matches) against small real virtual environments (`python -m venv --without-pip`)
holding one hand-made distribution, and scripts/setup.sh / serve.sh / test.sh run in a copy of
the scripts whose .venv/bin/python is a stand-in: pip only logs what it was asked, main.py and
pytest only log that they ran, the import probe goes to the small real environment. Nothing is
installed."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH = "cu130 torch==2.14.1 torchvision==0.29.1"


def _module():
    spec = importlib.util.spec_from_file_location("setup_stamp", REPO / "scripts" / "setup_stamp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ss = _module()


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _install(venv: Path, name: str, version: str, module: str | None = None) -> None:
    """A distribution as pip leaves it: NAME-VERSION.dist-info/METADATA and its module."""
    site = _site_packages(venv)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    package = site / (module or name.replace("-", "_"))
    package.mkdir()
    (package / "__init__.py").write_text("")


def _uninstall(venv: Path, name: str) -> None:
    for info in _site_packages(venv).glob(f"{name.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(info)


def _real_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    _install(path, "fakepkg", "1.0")
    _install(path, "fake-tool", "2.0")
    return path


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "serve.sh", "test.sh", "torch_build.py", "setup_stamp.py"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    (root / "requirements.txt").write_text("# runtime\nfakepkg==1.0\n")
    (root / "requirements-dev.txt").write_text("-r requirements.txt\nfake-tool>=2  # tests\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "requirements-test-data.txt").write_text("# beside the environment\nfake-data==3.0\n")
    return root


def _install_test_data(venv: Path) -> None:
    """What `pip install --target .venv/test-data` leaves for requirements-test-data.txt."""
    (venv / "test-data" / "fake_data-3.0.dist-info").mkdir(parents=True)


@pytest.fixture
def repo(tmp_path):
    root = _repo(tmp_path)
    _real_venv(root / ".venv")
    _install_test_data(root / ".venv")
    return root


def _cli(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """setup_stamp.py run as setup.sh runs it: by the environment's own interpreter, isolated."""
    full_env = {k: v for k, v in os.environ.items() if k != "TORCH_BUILD"}
    full_env.update({"TORCH_BUILD": "cu130", **env})  # the driver's answer aside
    return subprocess.run([str(root / ".venv" / "bin" / "python"), "-I", str(root / "scripts" / "setup_stamp.py"),
                           *args], capture_output=True, text=True, env=full_env, timeout=60)


def _seen(root: Path, mode: str = "runtime"):
    """What the import probe sees in root/.venv (run there), or how it fails."""
    done = _cli(root, "probe", *(["--dev"] if mode == "dev" else []))
    return json.loads(done.stdout) if done.returncode == 0 else ss.ProbeFailed(done.stdout.strip())


def _write(root: Path, mode: str = "runtime") -> None:
    seen = _seen(root, mode)
    assert isinstance(seen, dict), seen
    ss.write(root, root / ".venv", mode, TORCH, seen)


def _check(root: Path, mode: str = "runtime", torch: str = TORCH, seen=None):
    return ss.check(root, root / ".venv", mode, torch, _seen(root, mode) if seen is None else seen)


def test_same_inputs_skip_setup(repo):
    ok, why = _check(repo)
    assert not ok and "no setup stamp" in why
    _write(repo)
    assert _check(repo) == (True, "")
    stamp = json.loads((repo / ".venv" / "setup-stamp.json").read_text())
    assert stamp["packages"] == {"fakepkg": "1.0"} and stamp["torch"] == TORCH and stamp["mode"] == "runtime"
    assert stamp["python"]["version"] == sys.version.split()[0]
    assert set(stamp["inputs"]) >= {"requirements.txt", "requirements-dev.txt", "pyproject.toml",
                                    "scripts/setup.sh", "scripts/torch_build.py", "scripts/setup_stamp.py"}


def test_the_command_line_as_setup_sh_runs_it(repo):
    done = _cli(repo, "check")
    assert done.returncode == 1 and done.stdout.startswith("setup needed: no setup stamp")
    assert _cli(repo, "write", "--torch", TORCH).returncode == 0
    done = _cli(repo, "check")  # TORCH_BUILD=cu130 without a GPU: the same build as recorded
    assert done.returncode == 0, done.stdout + done.stderr
    done = _cli(repo, "check", "--cpu")  # asking for another build
    assert done.returncode == 1 and "the torch build changed" in done.stdout
    done = _cli(repo, "check", TORCH_BUILD="cu128")
    assert done.returncode == 1 and "the torch build changed" in done.stdout
    _uninstall(repo / ".venv", "fakepkg")
    done = _cli(repo, "write", "--torch", TORCH)  # a probe that fails after setup: no stamp
    assert done.returncode == 1 and "fakepkg is not installed" in done.stderr
    assert not (repo / ".venv" / "setup-stamp.json").exists()


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt", "pyproject.toml", "scripts/setup.sh",
                                  "scripts/torch_build.py"])
def test_a_changed_input_file_means_setup(repo, name):
    _write(repo)
    path = repo / name
    path.write_text(path.read_text().replace("fakepkg==1.0", "fakepkg==1.1") if name == "requirements.txt"
                    else path.read_text() + "\n# one more line\n")
    assert _check(repo) == (False, f"{name} changed since the last setup")


def test_a_new_requirement_file_means_setup(repo):
    _write(repo)
    (repo / "requirements-extra.txt").write_text("fakepkg\n")
    assert _check(repo) == (False, "requirements-extra.txt changed since the last setup")


def test_a_changed_python_or_torch_build_means_setup(repo):
    _write(repo)
    seen = _seen(repo)
    assert _check(repo, seen=seen) == (True, "")
    ok, why = _check(repo, seen={**seen, "python": {**seen["python"], "version": "3.11.99"}})
    assert not ok and "the Python changed" in why and "3.11.99" in why
    ok, why = _check(repo, seen={**seen, "python": {**seen["python"], "platform": "macosx-14-arm64"}})
    assert not ok and "the Python changed" in why and "macosx-14-arm64" in why
    ok, why = _check(repo, torch="cu128 torch==2.14.1+cu128 torchvision==0.29.1+cu128")
    assert not ok and "the torch build changed" in why


def test_a_missing_or_broken_environment_means_setup(repo):
    venv = repo / ".venv"
    _write(repo)
    site = _site_packages(venv)
    shutil.rmtree(site / "fakepkg")  # the module went, its metadata stayed
    ok, why = _check(repo)
    assert not ok and why.endswith("fakepkg 1.0 is installed but its module fakepkg is not importable")
    (site / "fakepkg").mkdir()
    (site / "fakepkg" / "__init__.py").write_text("")
    assert _check(repo) == (True, "")
    _uninstall(venv, "fakepkg")
    ok, why = _check(repo)
    assert not ok and why.endswith("fakepkg is not installed")
    shutil.rmtree(venv)  # deleting .venv deletes the stamp with it
    ok, why = ss.check(repo, venv, "runtime", TORCH, ss.ProbeFailed("no interpreter"))
    assert not ok and "no setup stamp" in why


def test_a_package_version_changed_in_the_environment_means_setup(repo):
    _write(repo)
    metadata = next(_site_packages(repo / ".venv").glob("fakepkg-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 1.3"))
    assert _check(repo) == (False, "fakepkg is 1.3 in the environment, 1.0 at the last setup")


def test_a_dev_stamp_covers_runtime_not_the_reverse(repo):
    _write(repo)
    ok, why = _check(repo, "dev")
    assert not ok and "'runtime', not 'dev'" in why
    _write(repo, "dev")
    assert json.loads((repo / ".venv" / "setup-stamp.json").read_text())["packages"] == {
        "fakepkg": "1.0", "fake-tool": "2.0"}
    assert _check(repo, "dev") == (True, "")
    assert _check(repo, "runtime") == (True, "")


def test_unreadable_or_foreign_stamps_mean_setup(repo):
    stamp = repo / ".venv" / "setup-stamp.json"
    stamp.write_text("{not json")
    assert _check(repo) == (False, "the setup stamp is unreadable")
    stamp.write_text(json.dumps({"stamp": 0}))
    assert "another version" in _check(repo)[1]


def test_requirement_names_follow_includes_and_skip_options(tmp_path):
    (tmp_path / "base.txt").write_text("# c\nPillow>=10\ntorch==2.14.1\nPyYAML >= 6 ; python_version >= '3.8'\n")
    (tmp_path / "dev.txt").write_text("-r base.txt\n--index-url https://x\n-c constraints.txt\n"
                                      "uvicorn[standard]>=0.2  # extras\nopenai_clip==1.0.1\ntorch\n")
    assert ss.requirement_names(tmp_path / "dev.txt") == ["pillow", "torch", "pyyaml", "uvicorn", "openai-clip"]
    assert [ss.import_name(n) for n in ("pillow", "pyyaml", "openai-clip", "comfyui-frontend-package")] == [
        "PIL", "yaml", "clip", "comfyui_frontend_package"]
    (tmp_path / "bad.txt").write_text("fine\n==1.0\n")
    with pytest.raises(ss.StampError, match="bad.txt:2"):
        ss.requirement_names(tmp_path / "bad.txt")
    (tmp_path / "loop.txt").write_text("-r loop.txt\n")
    with pytest.raises(ss.StampError, match="includes itself"):
        ss.requirement_names(tmp_path / "loop.txt")
    (tmp_path / "gone.txt").write_text("-r nowhere.txt\n")
    with pytest.raises(ss.StampError, match="cannot read"):
        ss.requirement_names(tmp_path / "gone.txt")


def test_the_project_requirements_are_all_probed_by_their_module():
    """Every distribution the real requirement files name maps to a module name the probe can
    look for (a new requirement with an unusual module name needs an IMPORT_NAMES entry, else
    setup would never be skipped)."""
    names = ss.requirement_names(REPO / "requirements-dev.txt")
    assert {"torch", "torchvision", "transformers", "pillow", "pytest"} <= set(names)
    missing = [(n, ss.import_name(n)) for n in names if importlib.util.find_spec(ss.import_name(n)) is None]
    assert missing == []


# ---------------------------------------------------------------------------------------------
# setup.sh / serve.sh / test.sh with a stand-in .venv/bin/python

COMPILE = "-m compileall -q -j 0 comfy_core nodes graph web compat main.py"
STAND_IN = """#!/bin/sh
# .venv/bin/python's stand-in: the import probe (-I) runs in a small real environment, the torch
# queries (-c) answer the installed pair, `-m pip` logs (and fails with PIP_FAILS), the rest
# (main.py, -m pytest) logs that it ran.
case "$1" in
    -I) exec "$REAL_VENV_PYTHON" "$@" ;;
    -c) case "$2" in *'print("torch==" + version("torch"))'*) printf 'torch==2.14.1\\ntorchvision==0.29.1\\n' ;;
        *) echo "torch==2.14.1+cu130 torchvision==0.29.1+cu130" ;; esac; exit 0 ;;
esac
case "$*" in
    "-m pip "*) echo "$*" >> "$PIP_LOG"; [ -n "$PIP_FAILS" ] && exit 1; exit 0 ;;
esac
echo "$*" >> "$RUN_LOG"
"""


@pytest.fixture
def scripted(tmp_path):
    root = _repo(tmp_path)
    venv = root / ".venv"
    (venv / "bin").mkdir(parents=True)
    _install_test_data(venv)  # the stand-in pip only logs its `--target .venv/test-data` call
    real = _real_venv(tmp_path / "real-venv")
    python = venv / "bin" / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")  # present but failing: no GPU
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "apt-get").write_text("#!/bin/sh\nexit 1\n")  # setup --dev never installs Chromium here
    (bin_dir / "apt-get").chmod(0o755)
    logs = {"pip": tmp_path / "pip.log", "run": tmp_path / "run.log"}
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_BUILD", "SETUP_FORCE", "PIP_FAILS")}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=sys.executable, TORCH_BUILD="cu130",
               REAL_VENV_PYTHON=str(real / "bin" / "python"), PIP_LOG=str(logs["pip"]), RUN_LOG=str(logs["run"]))

    def run(script: str, *args: str, **extra: str):
        for log in logs.values():
            log.write_text("")
        done = subprocess.run(["bash", str(root / "scripts" / script), *args], capture_output=True, text=True,
                              env={**env, **extra}, timeout=120)
        return done, logs["pip"].read_text().splitlines(), logs["run"].read_text().splitlines()

    run.root, run.real = root, real
    return run


def test_serve_sets_up_once_then_starts_main_directly(scripted):
    stamp = scripted.root / ".venv" / "setup-stamp.json"
    done, pip, ran = scripted("serve.sh", "--port", "8190")
    assert done.returncode == 0, done.stderr
    assert pip and pip[-1].endswith("-c .venv/torch-constraints.txt -r requirements.txt")
    assert ran == [COMPILE, "main.py --port 8190"] and stamp.exists()  # a setup compiles the engine's bytecode
    done, pip, ran = scripted("serve.sh", "--port", "8190")
    assert done.returncode == 0, done.stderr
    assert pip == [] and ran == ["main.py --port 8190"]
    assert "setup: .venv is up to date" in done.stdout
    done, pip, ran = scripted("serve.sh", SETUP_FORCE="1")  # forced: sets up again
    assert pip and ran == [COMPILE, "main.py"]


def test_an_interpreter_that_does_not_run_means_setup(scripted):
    assert scripted("setup.sh")[0].returncode == 0
    python = scripted.root / ".venv" / "bin" / "python"
    stand_in = python.read_text()
    python.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so.1.0' >&2\nexit 127\n")
    done, _, _ = scripted("setup.sh")
    assert "setup needed: .venv/bin/python does not run" in done.stdout and "libpython3.11" in done.stderr
    assert done.returncode != 0  # setup went on and failed on the same interpreter, loudly
    python.write_text(stand_in)
    assert scripted("setup.sh")[1]  # no stamp was left: set up again


def test_a_changed_requirement_or_broken_environment_sets_up_again(scripted):
    assert scripted("setup.sh")[0].returncode == 0
    requirements = scripted.root / "requirements.txt"
    requirements.write_text(requirements.read_text() + "otherpkg>=1\n")
    _install(scripted.real, "otherpkg", "1.5")
    done, pip, _ = scripted("setup.sh")
    assert "setup needed: requirements.txt changed since the last setup" in done.stdout
    assert pip and done.returncode == 0, done.stderr
    assert scripted("setup.sh")[1] == []  # the new stamp matches
    _uninstall(scripted.real, "otherpkg")
    done, pip, _ = scripted("setup.sh")
    assert "setup needed: the environment fails the import probe: otherpkg is not installed" in done.stdout
    assert pip  # set up again; the environment still lacks it, so no stamp and a warning
    assert "no setup stamp written" in done.stderr
    assert not (scripted.root / ".venv" / "setup-stamp.json").exists()


def test_a_failed_setup_leaves_no_stamp(scripted):
    stamp = scripted.root / ".venv" / "setup-stamp.json"
    assert scripted("setup.sh")[0].returncode == 0 and stamp.exists()
    done, pip, _ = scripted("setup.sh", "--force", PIP_FAILS="1")
    assert done.returncode != 0 and pip
    assert not stamp.exists()
    done, pip, _ = scripted("setup.sh")  # so the next start sets up again
    assert "setup needed: no setup stamp" not in done.stdout  # no stamp file: no check, straight to setup
    assert pip and done.returncode == 0 and stamp.exists()


def test_test_sh_skips_the_dev_setup_once_done(scripted):
    assert scripted("serve.sh")[0].returncode == 0  # a runtime setup does not cover the test tools
    done, pip, ran = scripted("test.sh", "-x")
    assert done.returncode == 0, done.stderr
    assert "'runtime', not 'dev'" in done.stdout
    assert pip[-2].endswith("-r requirements-dev.txt") and ran == [COMPILE, "-m pytest -x"]
    assert pip[-1].endswith("--no-deps --upgrade --target .venv/test-data -r requirements-test-data.txt")
    done, pip, ran = scripted("test.sh", "-x")
    assert pip == [] and ran == ["-m pytest -x"]
    assert scripted("serve.sh")[1] == []  # and the dev setup covers serving


def test_a_dev_stamp_needs_the_test_data_beside_the_environment(repo):
    _write(repo, "dev")
    assert _check(repo, "dev") == (True, "")
    shutil.rmtree(repo / ".venv" / "test-data")
    ok, why = _check(repo, "dev")
    assert not ok and "test data fake-data==3.0 is not in" in why
    assert _check(repo, "runtime") == (True, "")  # the runtime needs no test data
    (repo / "requirements-test-data.txt").write_text("fake-data==3.1\n")
    _install_test_data(repo / ".venv")
    ok, why = _check(repo, "dev")
    assert not ok and "requirements-test-data.txt changed" in why
