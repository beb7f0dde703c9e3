"""The suite's own layout: test modules share through tests/support, never each other.

A test module that imports another runs that module's fixtures and module-level code a
second time, ties the two together by name, and breaks when one of them moves to another
tier. What two test modules share goes in tests/support (a helper, or a fixture that a
conftest.py takes from there).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "cli", "component", "integration")


def is_test_module(dotted: str) -> bool:
    last = dotted.rpartition(".")[2]
    return dotted.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def imported_modules(source: str, path: Path) -> set[str]:
    """Every module the source at ``path`` imports, and ``module.name`` for each name a
    ``from module import name`` takes (it may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                package = path.relative_to(TESTS.parent).parent.parts
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *filter(None, [node.module])])
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    offenders = {
        str(path.relative_to(TESTS)): sorted(
            m for m in imported_modules(path.read_text(), path) if is_test_module(m)
        )
        for path in sorted(TESTS.rglob("*.py"))
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_check_sees_an_import_of_a_test_module() -> None:
    source = "from tests.unit.test_journal import subscription\nfrom . import test_y\n"
    found = imported_modules(source, TESTS / "unit" / "test_x.py")
    assert {m for m in found if is_test_module(m)} == {
        "tests.unit.test_journal",
        "tests.unit.test_y",
    }


def test_the_tiers_are_packages() -> None:
    for tier in TIERS:
        assert (TESTS / tier / "__init__.py").is_file(), tier
