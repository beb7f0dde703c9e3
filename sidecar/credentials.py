"""Credentials Kafka refuses: one clear line, ``/startupz`` failing, and a distinct exit.

A wrong SASL password, a CA that does not verify the broker, a client certificate the
broker refuses (expired, from another CA): librdkafka retries for ever, many times a
second, and each attempt is an error and a log line. Restarting cannot fix credentials,
but an orchestrator restarting the container with back-off makes the failure visible
(``CrashLoopBackOff``) and picks up a corrected Secret. So:

* each refusal is classified (``classify``) into one line that names the settings
  involved, never their values;
* from the first refusal ``/startupz`` answers 503 with that line (``Probes.startup``);
* after ``REFUSAL_SECONDS`` of refusals with no sign of success in between (the member
  joined the group), the line is logged once more and the process stops with
  ``EXIT_CREDENTIALS`` (78, ``EX_CONFIG``);
* librdkafka's own log lines that repeat are collapsed (``sidecar.logs.RepeatedLines``):
  one line per kind every few seconds, not hundreds.

The state is per process (``REFUSALS``): librdkafka's error callback runs on the member
thread, the watch on the event loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from confluent_kafka import KafkaError

from sidecar.kafka.properties import kafka_property_variable
from sidecar.model import MemberState

if TYPE_CHECKING:
    from sidecar.daemon import Sidecar

log = structlog.get_logger("sidecar.credentials")

#: The exit code when Kafka kept refusing the credentials (sysexits' EX_CONFIG).
EXIT_CREDENTIALS = 78
#: Seconds of refusals, with no success in between, before the process exits.
REFUSAL_SECONDS = 30.0
#: The refusals must still be going on: the latest no older than this (librdkafka tries
#: again at least every ``reconnect.backoff.max.ms``, 10 s by default). An early refusal
#: followed by a long join with working credentials is no reason to exit.
RECENT_SECONDS = 15.0

_SASL_CODES = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)
_TLS_CODES = (KafkaError._SSL, KafkaError._TRANSPORT)
# TLS alerts a broker sends when it refuses the client's certificate.
_CLIENT_CERT_REFUSED = re.compile(
    r"alert (certificate unknown|bad certificate|certificate expired|unknown ca|"
    r"certificate required|certificate revoked|access denied)",
    re.IGNORECASE,
)


def _variables(*properties: str) -> str:
    return ", ".join(kafka_property_variable(p) for p in properties)


def classify(code: int, text: str, config: dict[str, Any]) -> str | None:
    """The one line for a refusal of the credentials, or ``None`` for any other error."""
    if code in _SASL_CODES:
        mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "")
        if "OAUTHBEARER" in text or mechanism.upper() == "OAUTHBEARER":
            return (
                "Kafka refused the OAUTHBEARER credentials (SASL authentication failed): check "
                + _variables(
                    "sasl.oauthbearer.client.id",
                    "sasl.oauthbearer.client.secret",
                    "sasl.oauthbearer.token.endpoint.url",
                )
                + " (a secret may come from its _FILE variable)"
            )
        return (
            f"Kafka refused the {mechanism or 'SASL'} credentials (SASL authentication failed):"
            " check "
            + _variables("sasl.username", "sasl.password")
            + " (the password may come from SIDECAR_KAFKA_SASL_PASSWORD_FILE)"
        )
    if code not in _TLS_CODES:
        return None
    if "certificate verify failed" in text:
        return (
            "the broker's TLS certificate did not verify (SSL handshake failed: certificate "
            "verify failed): check " + _variables("ssl.ca.location") + ", the CA that signed it"
        )
    if _CLIENT_CERT_REFUSED.search(text):
        return (
            "the broker refused the client certificate (SSL handshake failed: expired, revoked "
            "or signed by a CA it does not trust): check "
            + _variables("ssl.certificate.location", "ssl.key.location")
        )
    if code == KafkaError._SSL and "handshake failed" in text.lower():
        return "the TLS handshake with the broker failed: check the SIDECAR_KAFKA_SSL_* settings"
    return None


class Refusals:
    """Refusals seen since the last sign that the credentials work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reason: str | None = None  # the line for the latest refusal
        self.since: float | None = None  # monotonic, the first refusal of this run of them
        self.latest: float | None = None  # monotonic, the latest refusal
        self.count = 0

    def observe(self, error: KafkaError, config: dict[str, Any], now: float | None = None) -> None:
        reason = classify(error.code(), error.str(), config)
        if reason is None:
            return
        with self._lock:
            first = self.reason is None
            now = time.monotonic() if now is None else now
            if self.since is None or self.latest is None or now - self.latest > RECENT_SECONDS:
                self.since = now  # the first refusal, or a new run of them after a quiet spell
            self.reason = reason
            self.count += 1
            self.latest = now
        if first:
            log.error(
                reason,
                exit_in_s=REFUSAL_SECONDS,
                code=EXIT_CREDENTIALS,
                note="exits unless Kafka accepts the credentials before then",
            )

    def clear(self) -> None:
        with self._lock:
            self.reason, self.since, self.latest, self.count = None, None, None, 0

    def verdict(self, now: float, after: float = REFUSAL_SECONDS) -> str | None:
        """The line to exit with, once refusals have lasted ``after`` seconds and are still
        going on (the latest within ``RECENT_SECONDS``)."""
        with self._lock:
            if self.reason is None or self.since is None or self.latest is None:
                return None
            if now - self.since < after or now - self.latest > RECENT_SECONDS:
                return None
            return self.reason


REFUSALS = Refusals()


def observing(
    on_error: Callable[[KafkaError], None], config: dict[str, Any]
) -> Callable[[KafkaError], None]:
    """librdkafka's ``error_cb``: refusals are noted, then ``on_error`` sees every error."""

    def error_cb(error: KafkaError) -> None:
        REFUSALS.observe(error, config)
        on_error(error)

    return error_cb


async def watch(sidecar: Sidecar, every: float = 1.0) -> None:
    """Clear the refusals once the member is in the group; stop the process with
    ``EXIT_CREDENTIALS`` once they lasted ``REFUSAL_SECONDS``."""
    while True:
        await asyncio.sleep(every)
        try:
            snapshot = sidecar.handoff.snapshot
            if snapshot.state is MemberState.STABLE and snapshot.connected:
                if REFUSALS.reason is not None:
                    log.info("Kafka accepts the credentials now")
                REFUSALS.clear()
                continue
            reason = REFUSALS.verdict(time.monotonic())
        except Exception as exc:  # never end the watch on a surprise: log it, go on
            log.error("credentials watch failed; trying again", error=repr(exc))
            continue
        if reason is not None:
            log.critical(
                f"{reason}; exiting with {EXIT_CREDENTIALS}",
                refused_for_s=REFUSAL_SECONDS,
                code=EXIT_CREDENTIALS,
            )
            sidecar.request_stop(EXIT_CREDENTIALS)
            return
