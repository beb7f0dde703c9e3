"""Validate Kubernetes manifests offline, strictly, with nothing skipped.

Built-in kinds are checked with kubernetes-validate's bundled OpenAPI schemas in
strict mode (unknown fields fail) against each requested Kubernetes version.
Prometheus Operator kinds (ServiceMonitor, PodMonitor, PrometheusRule) are not
in those schemas; they are checked against the hand-written subsets in
``schemas/``. Any other kind without a schema is an error, not a warning:
kubernetes-validate on its own only warns, which would let a typo'd
``apiVersion`` pass.

Usage: validate_manifests.py [-k 1.29.0 -k 1.37.0] FILE... ("-" reads stdin)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml
from kubernetes_validate import utils as kv  # type: ignore[import-untyped]

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
OWN_SCHEMA_GROUPS = ("monitoring.coreos.com/",)
DEFAULT_VERSIONS = ("1.29.0", "1.37.0")


def documents(path: str) -> Iterator[dict[str, Any]]:
    """The non-empty YAML documents of a file (or stdin for "-")."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: a document is a {type(doc).__name__}, not a mapping")
        yield doc


def own_schema(resource: dict[str, Any]) -> dict[str, Any] | None:
    """The local schema for a CRD kind, or None when the kind is built in."""
    api_version = str(resource.get("apiVersion", ""))
    if not api_version.startswith(OWN_SCHEMA_GROUPS):
        return None
    group, _, version = api_version.partition("/")
    name = f"{str(resource.get('kind', '')).lower()}-{group.split('.')[0]}-{version}.json"
    path = SCHEMA_DIR / name
    if not path.exists():
        raise LookupError(f"no local schema {path.name} for {api_version} {resource.get('kind')}")
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def check(resource: dict[str, Any], versions: list[str]) -> list[str]:
    """Problems with one resource; empty when it is valid for every version."""
    schema = own_schema(resource)
    if schema is not None:
        validator = jsonschema.Draft7Validator(schema)
        return [
            f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
            for error in validator.iter_errors(resource)
        ]
    problems: list[str] = []
    for version in versions:
        try:
            kv.validate(resource, version, strict=True)
        except kv.ValidationError as error:
            where = ".".join(str(p) for p in error.path) or "<root>"
            problems.append(f"k8s {version}: {where}: {error.message}")
        except kv.SchemaNotFoundError as error:
            problems.append(f"k8s {version}: {error.message}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-k",
        "--kubernetes-version",
        action="append",
        dest="versions",
        help=f"validate against this version (repeatable; default {', '.join(DEFAULT_VERSIONS)})",
    )
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    versions: list[str] = args.versions or list(DEFAULT_VERSIONS)

    failed = 0
    checked = 0
    for path in args.files:
        for resource in documents(path):
            checked += 1
            name = f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
            try:
                problems = check(resource, versions)
            except LookupError as error:
                problems = [str(error)]
            if problems:
                failed += 1
                for problem in problems:
                    print(f"FAIL {path} {name}: {problem}")
            else:
                print(f"ok   {path} {name}")
    if checked == 0:
        print("FAIL no resources found in " + " ".join(args.files))
        return 1
    print(f"{checked - failed}/{checked} resources valid (Kubernetes {', '.join(versions)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
