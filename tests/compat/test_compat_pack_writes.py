"""Where a pack's own writes go: a pack in `custom_nodes/` that writes into its own folder, into
ComfyUI's old `web/extensions/` beside `custom_nodes/` or beside `folder_paths.py` leaves a
checkout clean (`git status` shows nothing), through the repository's .gitignore; the pack loads
and its node registers (docs/dev/README-packs.md, "Where a pack's own writes go")."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).resolve().parent / "writer_packs" / "writer_pack"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=False)


def checkout_like(root: Path) -> Path:
    """A repository laid out as ours (the .gitignore, the shipped example pack, the served
    extension files), everything committed."""
    root.mkdir(parents=True)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    shutil.copytree(REPO / "custom_nodes" / "example_pack", root / "custom_nodes" / "example_pack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "custom_nodes" / ".gitkeep").write_text("")
    (root / "web" / "extensions").mkdir(parents=True)
    shutil.copy(REPO / "web" / "extensions" / "default_graph.js", root / "web" / "extensions")
    assert git(root, "init", "-q").returncode == 0
    git(root, "add", "-A")
    assert git(root, "commit", "-q", "-m", "checkout").returncode == 0
    return root


def test_a_pack_writing_into_its_folder_and_web_extensions_leaves_the_checkout_clean(session, tmp_path):
    from graph.packs import load_custom_nodes
    from graph.registry import Registry

    import folder_paths

    root = checkout_like(tmp_path / "checkout")
    shutil.copytree(WRITER, root / "custom_nodes" / "writer_pack")
    # beside folder_paths.py is the server's base folder (ComfyUI's install root), not our source
    beside_folder_paths = Path(folder_paths.base_path) / "web"
    made_beside = not beside_folder_paths.exists()
    registry = Registry()
    try:
        [result] = [r for r in load_custom_nodes(registry, [root / "custom_nodes"]) if r.name == "writer_pack"]
        assert result.ok, result.error
        written = [Path(p) for p in result.module.WRITTEN]
        assert len(written) == 5 and all(p.is_file() for p in written)
        assert root / "web" / "extensions" / "writer_pack" / "writer.js" in written
        assert "WriterNode" in registry
        status = git(root, "status", "--porcelain", "--untracked-files=all")
        assert status.returncode == 0 and status.stdout == ""
        # the copy beside folder_paths.py lands in the base folder, never in our source tree
        ours = beside_folder_paths / "extensions" / "writer_pack" / "writer.js"
        assert ours in written
        assert not (REPO / "compat" / "comfy_surface" / "web" / "extensions" / "writer_pack").exists()
    finally:
        target = beside_folder_paths if made_beside else beside_folder_paths / "extensions" / "writer_pack"
        shutil.rmtree(target, ignore_errors=True)


def test_without_the_ignore_rules_the_same_writes_would_show(session, tmp_path):
    """The check above can fail: the same pack in a checkout without our .gitignore rules for
    packs dirties it."""
    from graph.packs import load_custom_nodes
    from graph.registry import Registry

    root = checkout_like(tmp_path / "checkout")
    kept = [line for line in (root / ".gitignore").read_text().splitlines()
            if not line.startswith(("/custom_nodes", "!/custom_nodes", "/web/extensions", "/compat/"))]
    (root / ".gitignore").write_text("\n".join(kept) + "\n")
    git(root, "commit", "-q", "-am", "no pack rules")
    shutil.copytree(WRITER, root / "custom_nodes" / "writer_pack")
    import folder_paths

    beside_folder_paths = Path(folder_paths.base_path) / "web"
    made_beside = not beside_folder_paths.exists()
    try:
        [result] = [r for r in load_custom_nodes(Registry(), [root / "custom_nodes"]) if r.name == "writer_pack"]
        assert result.ok, result.error
        dirty = git(root, "status", "--porcelain", "--untracked-files=all").stdout.splitlines()
        assert "?? web/extensions/writer_pack/writer.js" in dirty
        assert "?? custom_nodes/writer_pack/writer_pack.ini" in dirty
    finally:
        target = beside_folder_paths if made_beside else beside_folder_paths / "extensions" / "writer_pack"
        shutil.rmtree(target, ignore_errors=True)
