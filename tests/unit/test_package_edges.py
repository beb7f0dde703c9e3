"""The package's edges, read from the source (ast) and pyproject.toml, nothing imported.

- The daemon (``sidecar/`` less the kits and the analytics extra) imports only its
  runtime dependencies, and never a kit's module. An import inside a function, which runs
  only when its feature is used, may also take an optional feature's extra (``tracing``,
  ``analytics``): the feature then says how to install it.
- The test kit (``sidecar/testkit``) pulls, with every ``sidecar`` module it imports, only
  what its extra ``testkit`` declares; the subscriber kit (``sidecar/subscriber``) only the
  standard library (OpenTelemetry, inside a function, when the application has it).
- No import cycle among the modules of ``sidecar/`` (imports at module level; an import
  inside a function or under ``TYPE_CHECKING`` runs later or never).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sidecar"
KITS = ("sidecar.testkit", "sidecar.subscriber")
OPTIONAL = ("sidecar.analytics",)  # the extra ``analytics``: its own dependencies
# Extras of optional features: what a function-level (lazy) import may also take.
FEATURE_EXTRAS = ("tracing", "analytics")


@dataclass(frozen=True)
class Import:
    module: str  # absolute, as written (or resolved from a relative import)
    names: tuple[str, ...]  # what ``from module import ...`` takes
    top_level: bool  # runs when the importing module is imported


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, top_level: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from ((n, top_level) for n in child.orelse)
            continue
        inner = top_level and not isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        yield child, inner
        yield from _walk(child, inner)


@cache
def imports_of(name: str) -> tuple[Import, ...]:
    path = modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    for node, top_level in _walk(ast.parse(path.read_text(), str(path)), True):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, (), top_level) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(Import(base, tuple(a.name for a in node.names), top_level))
    return tuple(found)


def sidecar_modules_imported(name: str, top_level_only: bool) -> set[str]:
    """The ``sidecar`` modules ``name`` imports (a ``from pkg import mod`` names ``mod``)."""
    found: set[str] = set()
    for imp in imports_of(name):
        if top_level_only and not imp.top_level:
            continue
        if imp.module != "sidecar" and not imp.module.startswith("sidecar."):
            continue
        submodules = {f"{imp.module}.{n}" for n in imp.names} & modules().keys()
        found |= submodules or {imp.module}
    return found & modules().keys()


def third_party(name: str, top_level_only: bool = False) -> set[str]:
    """Top-level names of the non-``sidecar``, non-standard-library modules it imports."""
    tops = {
        imp.module.partition(".")[0]
        for imp in imports_of(name)
        if imp.top_level or not top_level_only
    }
    return {t for t in tops if t and t != "sidecar" and t not in sys.stdlib_module_names}


def normalized(requirement: str) -> str:
    name = re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def declared() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"runtime": {normalized(r) for r in project["dependencies"]}}
    for extra, requirements in project["optional-dependencies"].items():
        groups[extra] = {normalized(r) for r in requirements}
    return groups


@cache
def installed() -> Mapping[str, list[str]]:
    return packages_distributions()  # reads every installed distribution's RECORD: once


def distributions(top: str) -> set[str]:
    dists = installed().get(top)
    assert dists, f"{top!r} is imported but no installed distribution provides it"
    return {normalized(d) for d in dists}


def undeclared(modules_: set[str], allowed: set[str]) -> dict[str, set[str]]:
    """What ``modules_`` import that ``allowed`` does not declare; a lazy import may also
    take a feature's extra (``FEATURE_EXTRAS``)."""
    lazy = allowed.union(*(declared()[extra] for extra in FEATURE_EXTRAS))
    missing: dict[str, set[str]] = {}
    for name in sorted(modules_):
        eager = third_party(name, top_level_only=True)
        for top in third_party(name):
            if not distributions(top) & (allowed if top in eager else lazy):
                missing.setdefault(top, set()).add(name)
    return missing


def in_group(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def daemon_modules() -> set[str]:
    return {m for m in modules() if not in_group(m, KITS + OPTIONAL)}


def closure(start: set[str]) -> set[str]:
    """``start`` and every ``sidecar`` module it imports, at any depth, when it runs."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo.extend(p for p in parents if p in modules())  # a package runs its __init__
        todo.extend(sidecar_modules_imported(name, top_level_only=False))
    return seen


def test_the_daemon_imports_only_its_runtime_dependencies() -> None:
    assert undeclared(daemon_modules(), declared()["runtime"]) == {}


def test_the_daemon_imports_no_kit() -> None:
    reached = closure(daemon_modules() - {"sidecar"})
    assert sorted(m for m in reached if in_group(m, KITS[:1])) == []


def test_the_test_kit_pulls_only_its_extra() -> None:
    reached = closure({m for m in modules() if in_group(m, ("sidecar.testkit",))})
    assert undeclared(reached, declared()["testkit"]) == {}


def test_the_subscriber_kit_needs_only_the_standard_library() -> None:
    reached = closure({m for m in modules() if in_group(m, ("sidecar.subscriber",))})
    eager = {m: third_party(m, top_level_only=True) for m in sorted(reached)}
    assert {m: tops for m, tops in eager.items() if tops} == {}
    assert undeclared(reached, set()) == {}  # lazily, only what a feature's extra declares
    assert sorted(m for m in reached if not in_group(m, ("sidecar.subscriber", "sidecar"))) == []


def test_sidecar_has_no_import_cycle() -> None:
    graph = {m: sidecar_modules_imported(m, top_level_only=True) - {m} for m in modules()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_walk_sees_what_it_must() -> None:
    """The checks above are only as good as the import walk: it must see these."""
    assert "dotenv" in third_party("sidecar.settings_sources")
    assert "sidecar.model" in sidecar_modules_imported("sidecar.testkit.events", True)
    assert "sidecar.subscriber.events" in sidecar_modules_imported("sidecar.subscriber", True)
    assert {"httpx", "standardwebhooks"} <= set().union(
        *(third_party(m) for m in modules() if m.startswith("sidecar.testkit"))
    )


def test_no_module_of_the_package_is_over_450_lines() -> None:
    """The rooms people work in stay small enough to read whole (issue 39)."""
    long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text().splitlines())) > 450
    }
    assert long == {}
