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

import re
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from sidecar.kafka.properties import ENV_PREFIX as ENV_PREFIX
from sidecar.kafka.properties import KAFKA_ENV_PREFIX as KAFKA_ENV_PREFIX
from sidecar.kafka.properties import kafka_property_variable
from sidecar.loopback import is_loopback
from sidecar.settings_http import HttpSettings
from sidecar.settings_journal import JournalSettings
from sidecar.settings_observe import ObservabilitySettings
from sidecar.settings_values import DAY_MS as _DAY_MS
from sidecar.settings_values import EVENT_TYPES as EVENT_TYPES
from sidecar.settings_values import TOPIC_NAME as _TOPIC_NAME
from sidecar.settings_values import WebhookSpec as WebhookSpec
from sidecar.settings_values import is_text as _is_text
from sidecar.settings_values import librdkafka_text as _librdkafka_text
from sidecar.settings_webhooks import WebhookSettings

CONFIG_FILE_ENV, ENV_FILE_ENV = "SIDECAR_CONFIG_FILE", "SIDECAR_ENV_FILE"

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

_HOST_PORT = re.compile(
    # [0-9], not \d: int() reads "٩٠٩٢" as 9092, librdkafka as port 0 (it connected there)
    r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://)?(\[[0-9a-fA-F:]+\]|[^\s:/,\[\]]+):([0-9]{1,5})$"
)


class InvalidSettings(Exception):
    """Settings that cannot run; ``str()`` names every offending setting."""


class Settings(BaseSettings, HttpSettings, WebhookSettings, JournalSettings, ObservabilitySettings):
    """Everything the sidecar needs, validated once. Units are in the names.

    Declared here: the group member (Kafka, the group, its timeouts), the process's
    lifecycle and logs. Grouped by area in base classes, as if declared here (same
    ``SIDECAR_`` names, same ``settings.name``): the HTTP listeners
    (``sidecar.settings_http``), webhooks (``sidecar.settings_webhooks``), the journal
    (``sidecar.settings_journal``), what the status page shows
    (``sidecar.settings_observe``). What combines settings of several groups is checked here.
    """

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
