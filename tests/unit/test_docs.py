"""The README documents every setting (names are contract)."""

from __future__ import annotations

from sidecar.settings import Settings
from tests.support.sidecars import REPO


def test_readme_lists_every_setting() -> None:
    readme = (REPO / "README.md").read_text()
    for name in Settings.model_fields:
        env = "SIDECAR_KAFKA_<NAME>" if name == "kafka" else f"SIDECAR_{name.upper()}"
        assert f"`{env}`" in readme, env
