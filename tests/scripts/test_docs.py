"""The documentation: generated pages are current, every link stays inside the repository, and the
README stays short (issue 28)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[2]
README_LIMIT = 15_360  # bytes: the README is the first page, not the manual
# [text](target "title") and ![alt](target); <a href="..."> / <img src="...">; <scheme:...> autolinks
MARKDOWN_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.IGNORECASE)
AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def links(text: str) -> list[str]:
    """Every link target of a markdown text, outside code blocks and code spans."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    return [m.group(1) for pattern in (MARKDOWN_LINK, HTML_LINK, AUTOLINK) for m in pattern.finditer(text)]


def broken(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, is not a file or folder of the repository (None if it is)."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return "points outside the repository (name the project in plain text instead)"
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None if target.startswith("#") else "empty link"
    resolved = (REPO / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
    resolved = resolved.resolve()
    if not resolved.is_relative_to(REPO):
        return "leaves the repository"
    if not resolved.exists():
        return "no such file or folder"
    return None


def test_the_generated_pages_are_current():
    generator = _generator()
    pages = generator.generated()
    assert set(pages) == {REPO / "docs" / "nodes.md", REPO / "docs" / "flags.md"}
    stale = [str(path.relative_to(REPO)) for path in generator.stale(pages)]
    assert not stale, f"{', '.join(stale)} out of date: run `{generator.COMMAND}` and commit the result"


def test_the_node_page_lists_every_builtin_node_once():
    generator = _generator()
    registry = generator.builtin_registry()
    text = generator.render_nodes(registry)
    rows = re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE)
    assert sorted(rows) == sorted(registry)  # every node type, none twice, no pack's
    assert f"{len(registry)} node types" in text
    assert "KSampler" in rows and "CheckpointLoaderSimple" in rows


def test_the_flag_page_lists_every_flag_of_the_server():
    import main

    text = _generator().render_flags()
    for action in main.build_serve_parser()._actions:
        for option in action.option_strings:
            assert f"`{option}`" in text, option


def test_every_link_in_the_docs_resolves_inside_the_repository():
    failures = []
    for page in _pages():
        for target in links(page.read_text(encoding="utf-8")):
            reason = broken(page, target)
            if reason:
                failures.append(f"{page.relative_to(REPO)}: ({target}) {reason}")
    assert not failures, "\n".join(failures)


def test_the_link_check_sees_each_kind_of_link(tmp_path: Path):
    text = ('[a](docs/x.md#part) ![b](img.png) <a href="https://example.com">c</a> <https://example.org> '
            '`[not](a-link)`\n```\n[nor](this)\n```\n')
    assert links(text) == ["docs/x.md#part", "img.png", "https://example.com", "https://example.org"]
    page = REPO / "docs" / "page.md"
    assert broken(page, "dev/CONTRACTS.md#graph") is None
    assert broken(page, "#a-heading") is None
    assert broken(page, "../README.md") is None
    assert "outside" in broken(page, "https://github.com/")
    assert "outside" in broken(page, "mailto:someone@example.com")
    assert broken(page, "../../elsewhere.md") == "leaves the repository"
    assert broken(page, "missing.md") == "no such file or folder"


def test_the_readme_is_short():
    size = (REPO / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md is {size} bytes; keep it under {README_LIMIT} (move detail to docs/)"
