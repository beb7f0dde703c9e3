"""The documentation stays connected: every relative link in a Markdown file of the
repository points at a file or directory that exists (and an anchor at a heading of it),
and every page of docs/ is reachable from the top-level README by following links.

Pure: it only reads files."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.sidecars import REPO

# [text](target) and ![alt](target), not inside code spans; <https://...> autolinks are absolute.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_SKIPPED = (".venv", ".cache", ".tools", ".git", "node_modules", ".pytest_cache", "dist")


def _markdown_files() -> list[Path]:
    return sorted(
        path
        for path in REPO.rglob("*.md")
        if not any(part in _SKIPPED for part in path.relative_to(REPO).parts)
    )


def _links(path: Path) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    return _LINK.findall(text)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of the headings of ``path``."""
    anchors = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            anchors.add(slug)
    return anchors


def _resolve(source: Path, target: str) -> tuple[Path, str] | None:
    """The file a relative link points at and its anchor; ``None`` for an absolute link."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
        return None
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    return resolved, anchor


def test_every_relative_link_resolves() -> None:
    broken = []
    for source in _markdown_files():
        for target in _links(source):
            resolved = _resolve(source, target)
            if resolved is None:
                continue
            path, anchor = resolved
            where = f"{source.relative_to(REPO)}: {target}"
            if not path.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and path.suffix == ".md" and anchor.lower() not in _anchors(path):
                broken.append(f"{where} (no such heading)")
    assert broken == [], "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    readme = REPO / "README.md"
    seen = {readme}
    todo = [readme]
    while todo:
        page = todo.pop()
        for target in _links(page):
            resolved = _resolve(page, target)
            if resolved is None:
                continue
            path = resolved[0]
            if path.is_dir() and (path / "README.md").exists():
                path = path / "README.md"
            if path.suffix == ".md" and path.is_file() and path not in seen:
                seen.add(path)
                todo.append(path)
    pages = sorted((REPO / "docs").rglob("*.md"))
    unreached = [str(p.relative_to(REPO)) for p in pages if p not in seen]
    assert unreached == [], f"not linked from README.md or a page it links: {unreached}"
    for readme_of in ("deploy", "deploy/example-app", "deploy/local", "helm/rebalance-sidecar"):
        assert REPO / readme_of / "README.md" in seen, readme_of


def test_the_readme_is_a_first_read() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    assert "open http" not in "\n".join(lines)  # macOS only: a URL is enough
