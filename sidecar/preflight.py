"""Checks ``run`` makes before anything starts: the bootstrap hosts exist, librdkafka
accepts the configuration and the subscription, the declared webhooks are allowed.

Each failure is ``InvalidSettings`` naming the variable: one line, exit 2.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecar.settings import Settings


_PERMANENT_DNS_ERRORS = frozenset(
    code
    for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
    if code is not None
)


def check_resolvable(
    settings: Settings,
    warn: Callable[..., Any],
    resolve: Callable[..., Any] = socket.getaddrinfo,
) -> None:
    """Fail fast when no bootstrap host exists: that is a typo, not an outage.

    Only a definite "no such name" counts. A temporary failure (``EAI_AGAIN``: the
    resolver is unreachable, as in a pod whose DNS is not up yet) is an outage that
    librdkafka rides out by retrying, so it is logged and start-up goes on.
    """
    from sidecar.settings import InvalidSettings

    assert settings.bootstrap_servers
    problems = []
    temporary = []
    for entry in settings.bootstrap_servers.split(","):
        host = entry.strip().split("://")[-1].rsplit(":", 1)[0].strip("[]")
        try:
            resolve(host, None)
        except UnicodeError as exc:
            problems.append(f"{host}: {exc}")
        except socket.gaierror as exc:
            if exc.errno in _PERMANENT_DNS_ERRORS:
                problems.append(f"{host}: {exc.strerror}")
            else:
                temporary.append(f"{host}: {exc.strerror}")
        else:
            return
    if temporary:
        warn(
            "bootstrap servers do not resolve yet; librdkafka keeps retrying",
            errors=problems + temporary,
        )
        return
    raise InvalidSettings(
        "invalid setting SIDECAR_BOOTSTRAP_SERVERS: no host resolves (" + "; ".join(problems) + ")"
    )


# The configuration check's logger: what its probe consumer logs goes nowhere.
_SILENT = logging.getLogger("rebalance-sidecar.config-check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def check_kafka_config(settings: Settings) -> None:
    """Let librdkafka judge the final configuration before anything starts.

    Constructing a ``Consumer`` validates every property (names, types, empty values,
    combinations such as ``session.timeout.ms`` with ``group.protocol=consumer``) without
    network I/O; a refusal here would otherwise kill the member thread with a traceback
    while the process keeps serving.
    """
    from confluent_kafka import Consumer, KafkaException

    from sidecar.settings import InvalidSettings

    # The probe's connection attempts to the brokers are not worth a line: its logger
    # drops them. Not ``log_level: 0``, which hid an invalid ``log_level`` of the user's
    # from the check (the member thread then died of it while the process served on).
    config = {**settings.consumer_config(), "logger": _SILENT}
    try:
        Consumer(config).close()
    except KafkaException as exc:
        error = exc.args[0]
        message = error.str() if hasattr(error, "str") else str(error)
        raise InvalidSettings(
            f"invalid setting {_culprits(config, message)}: librdkafka: {message}"
        ) from None
    except (TypeError, ValueError) as exc:
        # confluent-kafka's own properties, e.g. error_cb or stats_cb given as text: they
        # take Python callables, which no setting can give.
        raise InvalidSettings(
            f"invalid setting {_culprits(config, str(exc))}: confluent-kafka: {exc}"
        ) from None
    _check_subscription(settings, config)


def _check_subscription(settings: Settings, config: dict[str, Any]) -> None:
    """Let librdkafka judge the subscription too: its own regex engine (not Python's)
    refuses some patterns, e.g. ``(?:...)`` groups, and ``subscribe`` checks the assignment
    strategy. Refused, the member thread died at start while the process served on.

    The probe talks to librdkafka's in-process mock cluster only, in a group of its own,
    with none of the real settings but the two ``subscribe`` judges (the assignment
    strategy and the group protocol): no network, no credentials, no token fetch, so it
    can join nothing and hold nothing up.
    """
    from confluent_kafka import Consumer, KafkaException

    from sidecar.settings import InvalidSettings

    probe: dict[str, Any] = {
        "group.id": "rebalance-sidecar-probe",
        "test.mock.num.brokers": 1,
        "log_level": 0,
        **{
            k: config[k] for k in ("group.protocol", "partition.assignment.strategy") if k in config
        },
    }

    def refused(topics: list[str]) -> bool:
        consumer = Consumer(probe)
        try:
            consumer.subscribe(topics)
        except KafkaException:
            return True
        finally:
            consumer.close()
        return False

    if not settings.topics or not refused(list(settings.topics)):
        return
    patterns = [t for t in settings.topics if t.startswith("^") and refused([t])]
    if patterns:
        raise InvalidSettings(
            "invalid setting SIDECAR_TOPICS: librdkafka's regex engine refuses "
            + ", ".join(repr(p) for p in patterns)
            + " (no (?...) groups, lookarounds or backreferences)"
        )
    raise InvalidSettings(
        "invalid setting SIDECAR_TOPICS, SIDECAR_ASSIGNMENT_STRATEGY: librdkafka refuses "
        "the subscription"
    )


def _culprits(config: dict[str, Any], message: str) -> str:
    """The variables behind the properties of the configuration that librdkafka's (or
    confluent-kafka's) message names. Only those: a file name in the message
    (``dlopen() failed: /x.so``) is not a property."""
    import re

    from sidecar.kafka.properties import kafka_property_variable, setting_of_property

    names = []
    # librdkafka quotes property names in some messages and not in others.
    for prop in re.findall(r"\b[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*\b", message):
        if prop not in config:
            continue
        owner = setting_of_property(prop)
        name = owner if owner else kafka_property_variable(prop)
        if name not in names:
            names.append(name)
    return ", ".join(names) or "SIDECAR_KAFKA_*"


def check_declared_webhooks(settings: Settings) -> None:
    from sidecar.settings import InvalidSettings
    from sidecar.subscriptions import InvalidSubscription, check_events, check_secret, check_url

    for index, spec in enumerate(settings.webhooks):
        try:
            check_url(spec.url, settings.webhook_allowed_hosts)
            check_secret(spec.secret.get_secret_value())
            check_events(spec.events)
        except InvalidSubscription as exc:
            raise InvalidSettings(f"invalid setting SIDECAR_WEBHOOKS[{index}]: {exc}") from None
