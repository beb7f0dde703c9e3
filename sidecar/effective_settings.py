"""``rebalance-sidecar settings --effective``: the settings ``run`` would use, with where
each value came from (``default``, ``environment``, ``file PATH``) and secrets redacted.

What a user debugging a pod needs: ``kubectl exec ... rebalance-sidecar settings
--effective`` reads the same environment and files as the running process.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sidecar.kafka.properties import kafka_property_variable
from sidecar.logs import REDACTED
from sidecar.secret_files import file_variables
from sidecar.settings import ENV_PREFIX
from sidecar.settings_sources import (
    load_settings_traced,
    unknown_variables,
    with_secret_files,
)
from sidecar.settings_table import field_names

# librdkafka properties that hold secrets: sasl.password, ssl.key.password,
# sasl.oauthbearer.client.secret, ssl.keystore.password, ssl.key.pem, sasl.jaas.config ...
_SECRET_PROPERTY = re.compile(r"password|secret|token|\.pem$|jaas|sasl\.oauthbearer\.config")


def effective_rows(
    environ: Mapping[str, str], config_file: Path | None = None, env_file: Path | None = None
) -> list[tuple[str, str, str]]:
    """(variable, value, source) for every setting, then every Kafka property given.
    ``InvalidSettings`` as ``run`` would refuse them."""
    settings, given = load_settings_traced(environ, config_file, env_file)
    rows = []
    for name in field_names():
        if name == "kafka":
            continue
        source = next((label for label, values in given if name in values), "default")
        rows.append((f"{ENV_PREFIX}{name.upper()}", _shown(getattr(settings, name)), source))
    for prop, value in sorted(settings.kafka.items()):
        source = next(
            (label for label, values in given if prop in (values.get("kafka") or {})), "default"
        )
        shown = REDACTED if _SECRET_PROPERTY.search(prop) else value
        rows.append((f"{kafka_property_variable(prop)} ({prop})", shown, source))
    return rows


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return REDACTED
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and value and not isinstance(value[0], str):
        # Webhooks: JSON as SIDECAR_WEBHOOKS takes it, each secret redacted.
        return json.dumps(
            [
                {k: REDACTED if k == "secret" else v for k, v in spec.model_dump().items()}
                for spec in value
            ],
            default=str,
        )
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def print_effective(
    environ: Mapping[str, str], config_file: Path | None, env_file: Path | None
) -> int:
    """The table on stdout; unknown ``SIDECAR_*`` names (likely typos) on stderr. Secrets
    given as files (``SIDECAR_<X>_FILE``) are read as ``run`` reads them, their source the
    file."""
    from_files = {
        target: f"file {environ[variable]} ({variable})"
        for variable, target in file_variables(environ).items()
    }
    resolved = with_secret_files(environ)
    rows = effective_rows(resolved, config_file, env_file)
    for line in unknown_variables(resolved):
        print(f"rebalance-sidecar: {line}", file=sys.stderr)
    print("| variable | value | source |\n|---|---|---|")
    for variable, value, given_by in rows:
        source = given_by
        if given_by == "environment":
            source = from_files.get(variable.partition(" ")[0].upper(), given_by)
        shown = f"`{value}`" if value else ""
        print(f"| `{variable}` | {shown.replace('|', chr(92) + '|')} | {source} |")
    return 0
