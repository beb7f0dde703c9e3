"""Citations point at what the repository holds (``git ls-files``: a subprocess)."""

from __future__ import annotations

import subprocess

from tests.support.sidecars import REPO


def test_the_contract_cited_is_in_the_repository() -> None:
    """Citations point at docs/, not at a design document the repository does not hold."""
    assert (REPO / "docs" / "contract.md").is_file()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = [
        path
        for path in tracked
        if path.endswith((".py", ".md", ".yaml", ".sh"))
        and path != "tests/component/test_docs_tracked.py"  # this test names what it looks for
        and "DESIGN.md" in (REPO / path).read_text(errors="replace")
    ]
    assert citing == []
