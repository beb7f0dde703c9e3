"""Section 8: the container image — its size against the base it was built from.

The image ``scripts/image.sh build`` makes (``rebalance-sidecar:dev``, built first when it is
missing; the build is cached), measured by the container engine (``podman image inspect``:
the uncompressed size of every layer) against the base image named by its
``org.opencontainers.image.base.name`` label: what the project adds to the base is the
difference. The layers the build adds are listed with their sizes (``podman history``).
Without podman (not installed, or not root to install it), the section says so and measures
nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from bench.common import REPO, Context, SectionResult, Table, ratio

IMAGE = os.environ.get("IMAGE", "rebalance-sidecar:dev")
IMAGE_SH = REPO / "scripts" / "image.sh"
CONTAINERS_CONF = REPO / ".cache" / "image" / "containers.conf"


def _podman(*args: str) -> str:
    podman = shutil.which("podman")
    assert podman is not None
    done = subprocess.run(
        [podman, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
        stdin=subprocess.DEVNULL,
        check=True,
    )
    return done.stdout


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _inspect(image: str) -> dict[str, object]:
    found: list[dict[str, object]] = json.loads(_podman("image", "inspect", image))
    return found[0]


def run(ctx: Context) -> SectionResult:
    result = SectionResult(
        key="image",
        title="8. The container image",
        method=(__doc__ or "").split("\n", 2)[2].strip(),
    )
    built = subprocess.run(  # a no-op but for the cache check when nothing changed
        [str(IMAGE_SH), "build"],
        capture_output=True,
        text=True,
        timeout=3600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if built.returncode != 0 or shutil.which("podman") is None:
        result.notes.append(f"not measured: scripts/image.sh build failed: {built.stderr[-300:]}")
        ctx.say(result.notes[-1])
        return result
    image = _inspect(IMAGE)
    labels = image.get("Labels") or {}
    assert isinstance(labels, dict)
    base_name = str(labels.get("org.opencontainers.image.base.name", ""))
    base = _inspect(base_name)
    size, base_size = int(str(image["Size"])), int(str(base["Size"]))
    table = Table(["image", "size", "ratio to base"], caption="Uncompressed, as podman stores it.")
    table.rows.append([f"{IMAGE} (built)", _mb(size), ratio(size, base_size)])
    table.rows.append([f"{base_name} (its base)", _mb(base_size), "x1.00"])
    table.rows.append(["added by the build", _mb(size - base_size), ""])
    result.tables.append(table)
    ctx.say(f"  {IMAGE:<44} {_mb(size):>12}   base {_mb(base_size):>12}   {ratio(size, base_size)}")
    ctx.say(f"  {'added by the build':<44} {_mb(size - base_size):>12}   ({base_name})")

    layers = Table(["layer (created by)", "size"], caption="The build's layers, newest first.")
    history = json.loads(_podman("history", "--format", "json", IMAGE))
    # Newest first: the base's own entries are the last ones.
    ours = history[
        : len(history) - len(json.loads(_podman("history", "--format", "json", base_name)))
    ]
    for entry in ours:
        if not entry.get("size"):
            continue
        created_by = " ".join(str(entry.get("CreatedBy") or entry.get("createdBy") or "").split())
        created_by = created_by.removeprefix("/bin/sh -c ").removeprefix("#(nop) ")
        layers.rows.append([created_by[:90], _mb(int(entry["size"]))])
        ctx.say(f"    {_mb(int(entry['size'])):>10}  {created_by[:90]}")
    if layers.rows:
        result.tables.append(layers)
    result.raw = {
        "image": IMAGE,
        "size": size,
        "base": base_name,
        "base_size": base_size,
        "added": size - base_size,
    }
    return result
