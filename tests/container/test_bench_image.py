"""``python -m bench --only image``: the image's size against its base, measured for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.sidecars import REPO


def test_bench_prints_the_image_size_against_its_base(image: str, tmp_path: Path) -> None:
    raw = tmp_path / "image.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "image", "--json", str(raw)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (section,) = json.loads(raw.read_text())["sections"]
    figures = section["raw"]
    assert figures["image"] == image
    assert 0 < figures["base_size"] < figures["size"]
    assert figures["added"] == figures["size"] - figures["base_size"]
    assert f"{image} " in done.stdout and figures["base"] in done.stdout
