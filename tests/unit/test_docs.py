"""The written contract stays true to the code: settings tables, citations."""

from __future__ import annotations

import pytest

from sidecar.settings import Settings
from sidecar.settings_table import TABLE_START, rewrite_table
from tests.support.sidecars import REPO

# The table lives in docs/settings.md; the README links to it (a first read, not a manual).
SETTINGS_DOC = "docs/settings.md"
TABLES = (SETTINGS_DOC,)


def test_the_settings_page_lists_every_setting() -> None:
    readme = (REPO / SETTINGS_DOC).read_text()
    for name in Settings.model_fields:
        env = "SIDECAR_KAFKA_<NAME>" if name == "kafka" else f"SIDECAR_{name.upper()}"
        assert f"`{env}`" in readme, env


@pytest.mark.parametrize("path", TABLES)
def test_settings_tables_are_generated_from_the_settings(path: str) -> None:
    text = (REPO / path).read_text()
    assert TABLE_START in text
    assert rewrite_table(text) == text, (
        f"{path} is stale: run `rebalance-sidecar settings --write docs/settings.md`"
    )


def test_the_settings_page_has_the_real_poll_timeout() -> None:
    default = Settings.model_fields["poll_timeout_ms"].default
    assert f"| `SIDECAR_POLL_TIMEOUT_MS` | `{default}` |" in (REPO / SETTINGS_DOC).read_text()
