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
from sidecar.settings_http import HttpSettings
from sidecar.settings_journal import JournalSettings
from sidecar.settings_observe import ObservabilitySettings
from sidecar.settings_webhooks import WebhookSettings

# The variables that are not settings themselves but say where settings come from.
_SOURCE_VARIABLES = {
    ENV_FILE_ENV: "A dotenv file of `SIDECAR_*` lines (a FIFO works too); the environment wins "
    "over it, it wins over the settings file. Also `run --env-file FILE`.",
    CONFIG_FILE_ENV: "A YAML (default), TOML (`.toml`) or JSON (`.json`) file with the same "
    "settings under their lower-case names (`group_id: orders`, a `kafka:` mapping of "
    "librdkafka properties). Also `run --config FILE`. Either file: at most 4 MiB.",
}
# The areas ``Settings`` groups its fields in (its base classes), in the order they are
# listed after Settings' own fields (the group member, its lifecycle, logs, Kafka).
_AREAS = (HttpSettings, WebhookSettings, JournalSettings, ObservabilitySettings)
TABLE_START = "<!-- settings-table:start (generated: rebalance-sidecar settings --write FILE) -->"
TABLE_END = "<!-- settings-table:end -->"


def field_names() -> list[str]:
    """Every setting's field name, grouped: Settings' own fields, then each area's, each
    as declared."""
    areas = [list(area.model_fields) for area in _AREAS]
    in_areas = {name for names in areas for name in names}
    own = [name for name in Settings.model_fields if name not in in_areas]
    return own + [name for names in areas for name in names]


def markdown_table() -> str:
    """Every variable with its default and meaning, from the fields' own descriptions."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name in field_names():
        field = Settings.model_fields[name]
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
