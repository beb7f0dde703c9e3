"""The configuration table of ``docs/settings.md``, generated from the
settings' own descriptions (``rebalance-sidecar settings --write FILE``); a test fails when
a copy is stale."""

from __future__ import annotations

from typing import Any

from sidecar.settings import (
    CONFIG_FILE_ENV,
    ENV_FILE_ENV,
    ENV_PREFIX,
    KAFKA_ENV_PREFIX,
    InvalidSettings,
    Settings,
)
from sidecar.settings_observe import ObservabilitySettings

# The variables that are not settings themselves but say where settings come from.
_SOURCE_VARIABLES = {
    ENV_FILE_ENV: "A dotenv file of `SIDECAR_*` lines (a FIFO works too); the environment wins "
    "over it, it wins over the settings file. Also `run --env-file FILE`.",
    CONFIG_FILE_ENV: "A YAML (default), TOML (`.toml`) or JSON (`.json`) file with the same "
    "settings under their lower-case names (`group_id: orders`, a `kafka:` mapping of "
    "librdkafka properties). Also `run --config FILE`. Either file: at most 4 MiB.",
}
_OBSERVE_FIELDS = frozenset(ObservabilitySettings.model_fields)
TABLE_START = "<!-- settings-table:start (generated: rebalance-sidecar settings --write FILE) -->"
TABLE_END = "<!-- settings-table:end -->"


def markdown_table() -> str:
    """Every variable with its default and meaning, from the fields' own descriptions."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    # Settings' own fields first, then those of its base (settings_observe), as declared.
    fields = sorted(Settings.model_fields.items(), key=lambda f: f[0] in _OBSERVE_FIELDS)
    for name, field in fields:
        variable = f"{KAFKA_ENV_PREFIX}<NAME>" if name == "kafka" else f"{ENV_PREFIX}{name.upper()}"
        default = _shown_default(field.get_default(call_default_factory=True))
        meaning = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{variable}` | {default} | {meaning} |")
    rows.extend(
        f"| `{variable}` |  | {meaning} |" for variable, meaning in _SOURCE_VARIABLES.items()
    )
    return "\n".join(rows) + "\n"


def _shown_default(value: Any) -> str:
    if value is None or value in ((), {}, ""):
        return ""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def rewrite_table(text: str) -> str:
    """``text`` with the table between its markers regenerated."""
    try:
        head, rest = text.split(TABLE_START, 1)
        _, tail = rest.split(TABLE_END, 1)
    except ValueError:
        raise InvalidSettings(
            f"no settings table markers ({TABLE_START} ... {TABLE_END})"
        ) from None
    return f"{head}{TABLE_START}\n{markdown_table()}{TABLE_END}{tail}"
