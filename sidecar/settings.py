"""The one frozen settings object, built once at the edge from the environment and files.

``load_settings`` merges pydantic-settings' own sources, highest priority first: the
``SIDECAR_*`` environment, a dotenv file (``SIDECAR_ENV_FILE``), a YAML/TOML/JSON settings
file (``SIDECAR_CONFIG_FILE``), then the defaults. ``Settings(...)`` in code is a plain value
object: only what it is given, nothing read from the environment.

Every setting is documented with its unit and the reason for its default; docs/settings.md's
configuration table is generated from the same descriptions (``sidecar.settings_table``).
Where settings come from and how they are merged is ``sidecar.settings_sources``.
Nothing below the CLI reads ``os.environ``: components receive a ``Settings``.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from sidecar.kafka_properties import ENV_PREFIX as ENV_PREFIX
from sidecar.kafka_properties import KAFKA_ENV_PREFIX as KAFKA_ENV_PREFIX
from sidecar.kafka_properties import kafka_property_variable
from sidecar.loopback import is_loopback
from sidecar.settings_observe import ObservabilitySettings
from sidecar.settings_values import EVENT_TYPES as EVENT_TYPES
from sidecar.settings_values import WebhookSpec as WebhookSpec
from sidecar.settings_values import is_ipv6 as _is_ipv6
from sidecar.settings_values import is_text as _is_text
from sidecar.settings_values import librdkafka_text as _librdkafka_text

CONFIG_FILE_ENV, ENV_FILE_ENV = "SIDECAR_CONFIG_FILE", "SIDECAR_ENV_FILE"

# The longest duration a millisecond setting may name: the time and thread APIs these
# reach refuse absurd values (a timestamp out of range at shutdown), and none is sane.
_DAY_MS = 86_400_000
_MIB = 1024 * 1024

# librdkafka properties the sidecar reads as numbers itself (librdkafka parses a prefix:
# it takes "45000x" as 45000, where Python's int() refuses it).
NUMERIC_KAFKA_PROPERTIES = ("session.timeout.ms", "max.poll.interval.ms", "socket.timeout.ms")

# librdkafka properties the sidecar owns, and what to set instead: letting users override
# them would break the guarantees (it never fetches, never auto-commits, and owns the
# callbacks and the identity).
RESERVED_KAFKA_PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        "group.id": f"set {ENV_PREFIX}GROUP_ID",
        "bootstrap.servers": f"set {ENV_PREFIX}BOOTSTRAP_SERVERS",
        "enable.auto.commit": "nothing to set (the sidecar commits what the application says)",
        "enable.auto.offset.store": "nothing to set (the sidecar fetches no records)",
        "group.instance.id": f"set {ENV_PREFIX}GROUP_INSTANCE_ID",
        "group.protocol": f"set {ENV_PREFIX}GROUP_PROTOCOL",
        "partition.assignment.strategy": f"set {ENV_PREFIX}ASSIGNMENT_STRATEGY",
    }
)

# Kafka's own rule for a topic name (``Topic.validate``): the broker refuses any other.
_TOPIC_NAME = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}")

_HOST_PORT = re.compile(
    # [0-9], not \d: int() reads "٩٠٩٢" as 9092, librdkafka as port 0 (it connected there)
    r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://)?(\[[0-9a-fA-F:]+\]|[^\s:/,\[\]]+):([0-9]{1,5})$"
)


class InvalidSettings(Exception):
    """Settings that cannot run; ``str()`` names every offending setting."""


class Settings(BaseSettings, ObservabilitySettings):
    """Everything the sidecar needs, validated once. Units are in the names."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", case_sensitive=False
    )

    bootstrap_servers: str | None = Field(
        default=None,
        description="Kafka bootstrap servers, `host:port[,host:port]`. Unset: only `demo` runs "
        "(embedded mock cluster).",
    )
    group_id: str = Field(
        default="", description="Consumer group the sidecar joins for the application."
    )

    topics: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated topics; an entry starting with `^` is a regex in "
        "librdkafka's syntax (no `(?...)` groups or lookarounds; a comma only inside a "
        "`{m,n}` count; checked at start).",
    )
    group_instance_id: str | None = Field(
        default=None,
        description="Static membership id (KIP-345), typically the pod name: a restart within "
        "the session timeout causes no rebalance.",
    )
    group_protocol: Literal["classic", "consumer"] = Field(
        default="classic",
        description="`classic` (JoinGroup/SyncGroup) or `consumer` (KIP-848, broker-side "
        "assignment, always cooperative).",
    )
    assignment_strategy: str | None = Field(
        default=None,
        description="librdkafka `partition.assignment.strategy` (classic only), e.g. `range`, "
        "`roundrobin`, `cooperative-sticky`. Default: librdkafka's (`range,roundrobin`).",
    )
    revoke_timeout_ms: int = Field(
        default=30_000,
        ge=0,
        description="Bound of the revoke barrier: how long a revoked/lost callback waits for "
        "blocking subscribers. Must stay well below `max.poll.interval.ms` (the rebalance "
        "timeout) or the member is evicted while it waits.",
    )
    api_host: str = Field(
        default="127.0.0.1",
        description="HTTP listener address (an IPv6 one with or without brackets). "
        "Non-loopback requires `SIDECAR_API_TOKEN`.",
    )
    api_port: int = Field(default=8080, ge=0, le=65535, description="HTTP listener port.")
    api_token: SecretStr | None = Field(
        default=None,
        description="Bearer token required by mutating endpoints (POST, DELETE); printable "
        "ASCII only (it travels in a header).",
    )
    admin_host: str = Field(
        default="0.0.0.0",  # noqa: S104 - the kubelet and Prometheus reach the pod IP
        description="Admin listener address: probes, metrics and the kubelet's drain hook "
        "(read-only but for the drain, which needs `SIDECAR_DRAIN_TOKEN` or loopback).",
    )
    admin_port: int = Field(
        default=8081,
        ge=-1,
        le=65535,
        description="Admin listener port (0: any free port; -1: no admin listener).",
    )
    drain_token: SecretStr | None = Field(
        default=None,
        description="Credential of the admin listener's drain path (header `X-Drain-Token`, "
        "printable ASCII only); without it only loopback callers may drain through the admin "
        "listener.",
    )
    http_request_timeout_ms: int = Field(
        default=10_000,
        ge=1_000,
        le=600_000,
        description="Both listeners: a client must send a whole request (head and body) "
        "within this long of the connection opening or of the previous response, or the "
        "connection is closed (a silent connection or a request sent a byte at a time "
        "would otherwise hold a socket for ever). Responses are not bounded: an event "
        "stream lasts as long as its client.",
    )
    event_streams_max: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Event streams (`GET /events` as SSE) served at once; one more is "
        "`503` with `Retry-After` until one ends.",
    )
    ready_without_group: bool = Field(
        default=False,
        description="Report ready before the member first joined the group (readiness "
        "otherwise waits for the first assignment, then never depends on Kafka again).",
    )
    data_dir: Path = Field(
        default=Path(".rebalance-sidecar"),
        description="Directory of the journal (SQLite, WAL mode).",
    )
    webhooks: Annotated[tuple[WebhookSpec, ...], NoDecode] = Field(
        default=(),
        description="Webhooks declared at deploy time: JSON list of "
        "`{url, secret, events?, mode?, timeout_ms?, id?}` (the secret is required here: "
        "the application must know it to verify signatures; `mode` defaults to `blocking`).",
    )
    webhook_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated hosts webhooks may target; empty allows any host.",
    )
    webhook_max_count: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="At most this many webhooks that deliver (one disabled by a 410 does not "
        "count); a POST /webhooks past it is refused (409) until one is deleted. Webhooks "
        "declared in SIDECAR_WEBHOOKS count but are never refused.",
    )
    webhook_max_attempts: int = Field(
        default=0, ge=0, description="Give up a delivery after this many attempts (0: no limit)."
    )
    webhook_max_age_ms: int = Field(
        default=3_600_000,
        ge=1_000,
        le=30 * _DAY_MS,
        description="Give up a delivery this long after the event was journaled. A blocking "
        "subscriber that is down holds its later events until then (ordering).",
    )
    webhook_backoff_initial_ms: int = Field(
        default=500,
        ge=1,
        le=_DAY_MS,
        description="First retry delay; doubles per attempt, full jitter.",
    )
    webhook_backoff_max_ms: int = Field(
        default=30_000,
        ge=1,
        le=_DAY_MS,
        description="Largest retry delay, also caps `Retry-After`.",
    )
    webhook_tls_ca_location: Path | None = Field(
        default=None,
        description="PEM file of the CA certificate(s) that https webhooks' servers are "
        "verified against, instead of the public ones (certifi's bundle); a private CA. "
        "Reloaded when the file changes.",
    )
    webhook_tls_certificate_location: Path | None = Field(
        default=None,
        description="PEM client certificate (chain) sent to https webhooks that ask for one "
        "(mutual TLS); the key may be in the same file. Reloaded when the file changes.",
    )
    webhook_tls_key_location: Path | None = Field(
        default=None,
        description="PEM private key of `SIDECAR_WEBHOOK_TLS_CERTIFICATE_LOCATION`, when not "
        "in that file. Reloaded when the file changes.",
    )
    webhook_tls_key_password: SecretStr | None = Field(
        default=None,
        description="Password of an encrypted client key (never shown).",
    )
    events_topic: str | None = Field(
        default=None,
        description="Also produce every event to this Kafka topic (the fleet journal), keyed "
        "by group id, with an idempotent producer (a topic name, checked at start; empty: "
        "off).",
    )
    journal_retention_events: int = Field(
        default=100_000,
        ge=100,
        le=1_000_000_000,
        description="Keep at most this many delivered events (an event a webhook or the fleet "
        "topic has not taken yet is kept whatever this says).",
    )
    journal_retention_hours: float = Field(
        default=168.0,
        gt=0,
        le=87_600,
        description="Drop delivered events older than this; the fleet producer gives up an "
        "event it could not produce for this long.",
    )
    journal_max_bytes: int = Field(
        default=0,
        ge=0,
        le=2**50,
        description="Retention by size, after count and age: when the journal database "
        "uses more bytes than this (events, indexes, delivery log; not the WAL, which stays "
        "near 4 MiB), the oldest delivered events are dropped down to 80 % of it; the file "
        "then stops growing. 0: no limit; else at least 1048576 (1 MiB). Events a webhook or "
        "the fleet topic has not taken yet are kept even past it. Keep it well under the "
        "volume's size (an emptyDir over its `sizeLimit` gets the pod evicted): the Helm "
        "chart sets half of it.",
    )
    drain_timeout_ms: int = Field(
        default=60_000,
        ge=1_000,
        le=_DAY_MS,
        description="Default deadline of `POST /drain` (leave the group, deliver `revoked`).",
    )
    drained_restart_after_ms: int = Field(
        default=0,
        ge=0,
        le=_DAY_MS,
        description="Once a drain has ended, if no stop signal came within this, liveness "
        "fails so the "
        "orchestrator restarts the sidecar and it rejoins the group (in Kubernetes the app's "
        "`preStop` drains it also when only the app container restarts). 0: stay drained. "
        "The Helm chart sets the pod's grace period plus 30 s.",
    )
    shutdown_timeout_ms: int = Field(
        default=60_000,
        ge=1_000,
        le=_DAY_MS,
        description="On SIGTERM: leave the group and stop within this; then a hard exit.",
    )
    poll_timeout_ms: int = Field(
        default=20,
        ge=10,
        le=1_000,
        description="`poll()` timeout when the poll cannot be woken (see `SIDECAR_POLL_WAKEUP`); "
        "then also the latency bound for commands (enforce, commit, drain). At 20 ms an idle "
        "sidecar used 0.25-1.3 % of a core on the 2-core bench machine (docs/benchmarks.md, "
        "finding 7).",
    )
    poll_wakeup: bool = Field(
        default=True,
        description="Wake the member thread's `poll()` when a command arrives "
        "(`rd_kafka_queue_yield` on the consumer's queue, reached through ctypes; checked "
        "against the loaded librdkafka at start, else off): a command sent while the member "
        "waits in `poll()` runs without waiting for the poll timeout, and an idle sidecar "
        "polls every 190 ms instead of every `SIDECAR_POLL_TIMEOUT_MS`. `false`: plain "
        "polling.",
    )
    group_session_timeout_ms: int = Field(
        default=45_000,
        ge=1_000,
        le=_DAY_MS,
        description="Under `group.protocol=consumer` (KIP-848): the broker's "
        "`group.consumer.session.timeout.ms`, which librdkafka does not take (it refuses "
        "`SIDECAR_KAFKA_SESSION_TIMEOUT_MS` there). librdkafka never expires a KIP-848 "
        "session itself, so the sidecar reports `lost` after this long without an answer "
        "from Kafka. Default: Kafka's. (Classic: librdkafka's `session.timeout.ms` is used.)",
    )
    statistics_interval_ms: int = Field(
        default=5_000,
        ge=0,
        le=_DAY_MS,
        description="librdkafka statistics interval for metrics (0: off).",
    )
    committed_timeout_ms: int = Field(
        default=5_000,
        ge=100,
        le=_DAY_MS,
        description="Bound of reading committed offsets on assignment.",
    )
    commit_timeout_ms: int = Field(
        default=10_000,
        ge=100,
        le=25_000,
        description="Bound of a commit's wait for Kafka's answer: past it, the outcome is "
        "unknown (`POST /commit`: a `503`). A revoke callback holds the group at most the "
        "revoke timeout plus this, its commits included.",
    )
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto", description="`auto`: console on a terminal, JSON otherwise."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="`debug`, `info`, `warning` or `error`."
    )
    kafka: dict[str, str] = Field(
        default_factory=dict,
        description="Extra librdkafka properties (`SIDECAR_KAFKA_<NAME>`: `_` -> `.`, "
        "`__` -> `_`), e.g. security and SASL settings.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # ``Settings(...)`` in code is a value object: exactly what it is given, plus the
        # defaults. ``load_settings`` passes the environment and file sources explicitly.
        return (init_settings,)

    @field_validator("group_id", "group_instance_id", "assignment_strategy")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        # Spaces only: librdkafka aborts the process on a blank group id (an assertion in
        # confluent-kafka's Consumer_init) and refuses a blank strategy at subscribe time.
        if value is not None and value and not value.strip():
            raise ValueError("is blank; leave it unset or give a real value")
        return value

    @field_validator("api_host", "admin_host")
    @classmethod
    def _unbracketed(cls, value: str) -> str:
        # ``[::1]``, as IPv6 addresses are written in URLs: the socket takes ``::1``.
        inner = value[1:-1] if value.startswith("[") and value.endswith("]") else None
        if inner is not None and _is_ipv6(inner):
            return inner
        return value

    @field_validator("webhook_allowed_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("topics", mode="before")
    @classmethod
    def _split_topics(cls, value: Any) -> Any:
        """Comma-separated, but not inside ``{...}``: a regex's counted repetition
        (``^orders-[0-9]{1,3}$``, which librdkafka's regex engine supports). A topic
        name has neither braces nor commas, so nothing else is ambiguous."""
        if not isinstance(value, str):
            return value
        parts, start, depth = [], 0, 0
        for index, char in enumerate(value):
            if char == "{":
                depth += 1
            elif char == "}":
                depth = max(0, depth - 1)
            elif char == "," and depth == 0:
                parts.append(value[start:index])
                start = index + 1
        parts.append(value[start:])
        return tuple(part.strip() for part in parts if part.strip())

    @field_validator("webhooks", mode="before")
    @classmethod
    def _parse_webhooks(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else ()
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
            except RecursionError:
                raise ValueError("not valid JSON: nested too deeply") from None
        return value

    @field_validator("webhooks")
    @classmethod
    def _one_webhook_per_id(cls, value: tuple[WebhookSpec, ...]) -> tuple[WebhookSpec, ...]:
        seen: set[str] = set()
        for spec in value:
            if spec.subscription_id in seen:
                what = f"the id {spec.id!r}" if spec.id else f"the URL {spec.url!r} and no id"
                raise ValueError(
                    f"two webhooks share {what}: one would silently replace the other; "
                    "give each its own id"
                )
            seen.add(spec.subscription_id)
        return value

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_named(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            # Path("") is the working directory: a journal where nobody looks for it.
            raise ValueError("is empty; leave it unset for the default (.rebalance-sidecar)")
        return value

    @field_validator("journal_max_bytes", mode="before")
    @classmethod
    def _journal_budget_in_bytes(cls, value: Any) -> Any:
        # "128Mi" is what a Kubernetes manifest next to it says; this one takes bytes.
        if isinstance(value, str) and not re.fullmatch(r"\s*[0-9]+\s*", value):
            raise ValueError(
                f"{value!r} is not a whole number of bytes (128Mi is 134217728; 0: no limit)"
            )
        return value

    @field_validator("journal_max_bytes")
    @classmethod
    def _journal_budget_sane(cls, value: int) -> int:
        # A budget of a few pages would cut every delivered event at every prune: the
        # history API and SSE resumption would have nothing to give. 0 means no limit.
        if 0 < value < _MIB:
            raise ValueError(
                f"{value} bytes is below 1 MiB ({_MIB}); give at least that, or 0 for no limit"
            )
        return value

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka_values_as_text(cls, value: Any) -> Any:
        # A file says ``fetch.wait.max.ms: 100`` or ``enable.partition.eof: true``;
        # librdkafka wants the text ``100`` and ``true``.
        if isinstance(value, Mapping):
            return {str(k): _librdkafka_text(v) for k, v in value.items()}
        return value

    @field_validator("topics")
    @classmethod
    def _check_topics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for topic in value:
            if topic.startswith("^"):
                try:
                    with warnings.catch_warnings():  # "possible nested set" for [[:alpha:]]
                        warnings.simplefilter("ignore", FutureWarning)
                        re.compile(topic)
                except (re.error, OverflowError) as exc:  # OverflowError: "{99999999999}"
                    raise ValueError(f"{topic!r} is not a valid regex: {exc}") from None
                except RecursionError:  # the parser recurses per level of nesting
                    raise ValueError(f"{topic!r} is not a valid regex: nested too deeply") from None
            elif not _TOPIC_NAME.fullmatch(topic):
                raise ValueError(f"{topic!r} is not a valid topic name")
        return value

    @field_validator("events_topic")
    @classmethod
    def _check_events_topic(cls, value: str | None) -> str | None:
        # The broker refuses a bad name ("Invalid topic") for every event: the producer
        # retried every 2 s, a warning each time, holding the journal for the retention.
        if value and not _TOPIC_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid topic name (letters, digits, '.', '_' and '-', "
                "at most 249)"
            )
        return value

    @field_validator("api_token", "drain_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        token = value.get_secret_value()
        if not token.strip():
            raise ValueError("is blank; leave it unset for no token, or set a real one")
        if not re.fullmatch(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?", token):
            # It travels in an HTTP header, compared as ASCII, and a header value's
            # surrounding spaces are not part of it: anything else could never match
            # (every authenticated request answered 500), most likely a copy-paste accident.
            raise ValueError(
                "may hold only printable ASCII characters, without leading or trailing spaces"
            )
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for entry in value.split(","):
            match = _HOST_PORT.match(entry.strip())
            if not match or not 0 < int(match.group(2)) < 65536:
                raise ValueError(f"{entry.strip()!r} is not host:port")
        return value.strip()

    @field_validator("kafka")
    @classmethod
    def _check_kafka(cls, value: dict[str, str]) -> dict[str, str]:
        clash = sorted(RESERVED_KAFKA_PROPERTIES.keys() & set(value))
        if clash:
            raise ValueError(
                "; ".join(
                    f"{name} ({kafka_property_variable(name)}) is the sidecar's own: "
                    + RESERVED_KAFKA_PROPERTIES[name]
                    for name in clash
                )
            )
        properties = {k: str(v) for k, v in value.items()}
        for name in NUMERIC_KAFKA_PROPERTIES:
            if name in properties:
                number = properties[name].strip()
                if not re.fullmatch(r"[0-9]+", number):
                    raise ValueError(
                        f"{name} ({kafka_property_variable(name)}) must be a whole number "
                        f"of milliseconds, got {number!r}"
                    )
                properties[name] = number
        return properties

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        # A JSON settings file may spell a lone surrogate ("\\ud800"): not text, and it
        # would reach librdkafka's C code. (The environment is checked where it is read.)
        if isinstance(data, Mapping):
            for key, value in data.items():
                if not _is_text(value):
                    raise ValueError(
                        f"{key} holds characters that are not text (a NUL or a lone surrogate)"
                    )
        return data

    @model_validator(mode="after")
    def _check_combinations(self) -> Settings:
        max_poll = int(self.kafka.get("max.poll.interval.ms", "300000"))
        # The barrier blocks the member's rejoin; leave room for the join itself.
        if self.revoke_timeout_ms > max_poll - 5_000 or self.revoke_timeout_ms > max_poll * 0.8:
            raise ValueError(
                f"{ENV_PREFIX}REVOKE_TIMEOUT_MS={self.revoke_timeout_ms} leaves no headroom "
                f"under {kafka_property_variable('max.poll.interval.ms')}={max_poll} "
                "(max.poll.interval.ms): keep it below 80% and 5 s under it"
            )
        if self.group_protocol == "consumer" and self.assignment_strategy:
            raise ValueError(
                f"{ENV_PREFIX}ASSIGNMENT_STRATEGY applies to {ENV_PREFIX}GROUP_PROTOCOL=classic "
                "only; with consumer the broker assigns (see group.remote.assignor)"
            )
        if not is_loopback(self.api_host) and self.api_token is None:
            raise ValueError(
                f"{ENV_PREFIX}API_HOST={self.api_host} is not loopback: set {ENV_PREFIX}API_TOKEN "
                "so mutating endpoints are not open to the network"
            )
        return self

    @property
    def cooperative(self) -> bool:
        """Whether rebalances are incremental (KIP-429 or KIP-848) rather than eager."""
        if self.group_protocol == "consumer":
            return True
        return "cooperative-sticky" in (self.assignment_strategy or "")

    @property
    def protocol_name(self) -> Literal["eager", "cooperative"]:
        return "cooperative" if self.cooperative else "eager"

    def consumer_config(self) -> dict[str, Any]:
        """The librdkafka configuration of the group member, without its callbacks."""
        config: dict[str, Any] = {
            **self.kafka,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "group.protocol": self.group_protocol,
        }
        if self.statistics_interval_ms:
            config["statistics.interval.ms"] = self.statistics_interval_ms
        if self.group_instance_id:
            config["group.instance.id"] = self.group_instance_id
        if self.assignment_strategy:
            config["partition.assignment.strategy"] = self.assignment_strategy
        return config

    @property
    def session_timeout_seconds(self) -> float:
        """How long the broker waits for this member before fencing it: librdkafka's
        ``session.timeout.ms`` (classic), the broker's own setting under KIP-848."""
        if self.group_protocol == "consumer":
            return self.group_session_timeout_ms / 1000
        return int(self.kafka.get("session.timeout.ms", "45000")) / 1000

    @property
    def commit_wait_bound_seconds(self) -> float:
        """How long liveness lets a synchronous commit inside a rebalance callback wait
        for Kafka (``sidecar.probes``): one round of librdkafka's own timeouts, its wait
        for a coordinator (librdkafka's ``session.timeout.ms``, which it also uses under
        KIP-848, where it cannot be set: 45 s) and the request sent up to three times
        (``socket.timeout.ms`` each). Not a bound librdkafka keeps: it retries a commit it
        could not send for as long as the coordinator stays unreachable."""
        try:
            session = int(self.kafka.get("session.timeout.ms", "45000")) / 1000
            socket_timeout = int(self.kafka.get("socket.timeout.ms", "60000")) / 1000
        except ValueError:  # librdkafka refused it at start-up already; never raise here
            session, socket_timeout = 45.0, 60.0
        return session + 3 * socket_timeout

    def require_group(self) -> None:
        """The checks that only ``run`` needs (``demo`` fills these in itself)."""
        missing = [
            f"{ENV_PREFIX}{name.upper()}"
            for name, present in (
                ("bootstrap_servers", self.bootstrap_servers),
                ("group_id", self.group_id),
                ("topics", self.topics),
            )
            if not present
        ]
        if missing:
            raise InvalidSettings(
                f"missing required setting(s): {', '.join(missing)} "
                "(or run `rebalance-sidecar demo` for the embedded cluster)"
            )
