"""librdkafka properties as environment variables, and back.

``SIDECAR_KAFKA_<NAME>`` passes any librdkafka property through: ``_`` becomes ``.`` and
``__`` becomes ``_``. The few properties the sidecar sets itself have dedicated settings;
error messages name those, not the pass-through variable.
"""

from __future__ import annotations

from collections.abc import Mapping

ENV_PREFIX = "SIDECAR_"
KAFKA_ENV_PREFIX = "SIDECAR_KAFKA_"

# The dedicated settings behind the librdkafka properties ``consumer_config`` sets itself.
_PROPERTY_SETTINGS = {
    "bootstrap.servers": "bootstrap_servers",
    "group.id": "group_id",
    "group.protocol": "group_protocol",
    "group.instance.id": "group_instance_id",
    "partition.assignment.strategy": "assignment_strategy",
    "statistics.interval.ms": "statistics_interval_ms",
}


def kafka_properties_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``SIDECAR_KAFKA_SESSION_TIMEOUT_MS=6000`` -> ``{"session.timeout.ms": "6000"}``.

    ``_`` becomes ``.`` and ``__`` becomes ``_`` (for the few librdkafka names with one).
    """
    props: dict[str, str] = {}
    for key, value in environ.items():
        if not key.upper().startswith(KAFKA_ENV_PREFIX) or len(key) == len(KAFKA_ENV_PREFIX):
            continue
        props[kafka_property_name(key)] = value
    return props


def kafka_property_name(variable: str) -> str:
    """``SIDECAR_KAFKA_PLUGIN__LIBRARY__PATHS`` -> ``plugin_library_paths``."""
    raw = variable[len(KAFKA_ENV_PREFIX) :].lower()
    return ".".join(part.replace("\0", "_") for part in raw.replace("__", "\0").split("_"))


def setting_of_property(name: str) -> str | None:
    """The variable of the dedicated setting that sets librdkafka property ``name``."""
    setting = _PROPERTY_SETTINGS.get(name)
    return f"{ENV_PREFIX}{setting.upper()}" if setting else None


def kafka_property_variable(name: str) -> str:
    """``session.timeout.ms`` -> ``SIDECAR_KAFKA_SESSION_TIMEOUT_MS`` (inverse of the above)."""
    return KAFKA_ENV_PREFIX + name.replace("_", "__").replace(".", "_").upper()
