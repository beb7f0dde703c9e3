"""Every domain error of the sidecar, and the one mapping of them to HTTP statuses.

The tree (the HTTP status each maps to on the right)::

    SidecarError
    ├── StartupError              cannot start: port taken, data dir unwritable (CLI: exit 2)
    ├── RequestRefused            the caller's request is wrong                    (4xx)
    │   ├── BadRequest            undecodable body, non-decimal Last-Event-ID        400
    │   ├── Unauthorized          missing or wrong credential                        401
    │   ├── Forbidden             credential-less caller not allowed (cross-site,    403
    │   │                         non-loopback drain)
    │   ├── NotFound              no such webhook                                    404
    │   ├── ResumeAhead           a Last-Event-ID past the journal's newest event    409
    │   ├── TooManyWebhooks       a registration past SIDECAR_WEBHOOK_MAX_COUNT        409
    │   └── InvalidSubscription   a webhook registration that cannot be accepted     422
    ├── MemberRefused             the group member's state forbids it             (409)
    │   ├── NotInGroup            not (or no longer) in the group                    409
    │   ├── NotOwned              commit for partitions this member does not own     409
    │   ├── StaleGeneration       commit fenced by a generation the member left      409
    │   ├── CommitFenced          Kafka fenced the commit (KIP-848: UNKNOWN_MEMBER_ID, 409
    │   │                         FENCED_MEMBER_EPOCH): final, nothing committed
    │   ├── Stopping              the sidecar is stopping                            409
    │   └── MemberGone            the member thread has stopped                      409
    ├── MemberBusy                the member thread did not take the command in time 503
    ├── TooManyStreams            SIDECAR_EVENT_STREAMS_MAX event streams are open   503
    ├── KafkaRefused              librdkafka refused the member's call               503
    │   └── CommitFailed          Kafka refused the commit                           503
    │       └── CommitUnanswered  no answer within the bound: outcome unknown        503
    ├── JournalUnavailable        the journal (SQLite) failed under a request        503
    ├── DeadlinePassed            the awaited change did not happen in time          504
    └── StatusError               names its own status (``sidecar.api.ApiError``)  (any)

The classes live here; ``sidecar.commands``, ``sidecar.handoff``, ``sidecar.subscriptions``
and ``sidecar.daemon`` re-export the ones they raise, so older imports keep working.
``http_status`` is the one place that turns an error into a status: handlers raise, they
never pick a status themselves.
"""

from __future__ import annotations

import math
from typing import Any

from sidecar.model import TopicPartition

#: The process's exit code when the journal fails and the member stops (EX_SOFTWARE).
JOURNAL_FAILED_EXIT = 70

#: Seconds a client should wait before retrying after ``MemberBusy`` (the member thread is
#: usually held by a revoke barrier; a second is enough to find out whether it is free).
RETRY_AFTER_SECONDS = 1


class SidecarError(Exception):
    """Base of every domain error; ``details`` go into the JSON error body as they are."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class StartupError(SidecarError):
    """The sidecar cannot start (port taken, data dir unwritable, ...)."""


class RequestRefused(SidecarError):
    """The request itself is wrong; the caller must change it."""


class BadRequest(RequestRefused):
    pass


class Unauthorized(RequestRefused):
    def __init__(self, message: str, challenge: str = "Bearer") -> None:
        super().__init__(message)
        self.challenge = challenge  # the WWW-Authenticate scheme the caller must use


class Forbidden(RequestRefused):
    pass


class NotFound(RequestRefused):
    pass


class ResumeAhead(RequestRefused):
    """An SSE resume (``Last-Event-ID``) past the newest event: the journal the client
    read from was replaced (numbering restarted); waiting for that number would be a
    silent stall."""


class TooManyWebhooks(RequestRefused):
    """A registration past ``SIDECAR_WEBHOOK_MAX_COUNT``: an application that registers on
    every start without deleting would otherwise add a courier, a connection and a
    retention hold per start, without end."""


class InvalidSubscription(RequestRefused, ValueError):
    """A registration that cannot be accepted; the message says which field and why."""


class MemberRefused(SidecarError, RuntimeError):
    """The member's state forbids the request now; it may succeed later."""


class NotInGroup(MemberRefused):
    """The member is not (or no longer) in the group: nothing to enforce or commit as."""


class NotOwned(MemberRefused):
    def __init__(self, foreign: list[TopicPartition]) -> None:
        self.foreign = foreign
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in foreign)
        super().__init__(
            f"this member does not own {names}",
            not_owned=[tp.as_dict() for tp in foreign],
        )


class StaleGeneration(MemberRefused):
    """``/commit`` named a generation the member has moved on from (Kafka's own fencing)."""

    def __init__(self, requested: int, current: int) -> None:
        self.requested = requested
        self.current = current
        # Ahead of the member's is not "stale": a generation it has not reached, or (the
        # KIP-848 epoch of a member fenced and rejoined lower) one it no longer has.
        what = "is stale" if requested < current else "is not the member's"
        super().__init__(
            f"generation {requested} {what}: the member is at {current}",
            generation_id=current,
        )


class CommitFenced(MemberRefused):
    """Kafka fenced the commit as final (KIP-848's ``UNKNOWN_MEMBER_ID`` or
    ``FENCED_MEMBER_EPOCH``): the member is out of the group at that epoch; nothing was
    committed. The message names the error."""


class Stopping(MemberRefused):
    pass


class MemberGone(MemberRefused):
    """The consumer thread has stopped; the command was not (and will not be) run."""


class MemberBusy(SidecarError, TimeoutError):
    """The consumer thread did not take the command in time; it was withdrawn, never run.

    A ``TimeoutError``: callers that only care that the deadline passed need not know it.
    """


class TooManyStreams(SidecarError):
    """``SIDECAR_EVENT_STREAMS_MAX`` event streams are being served: retry when one ends."""


class KafkaRefused(SidecarError, RuntimeError):
    """librdkafka raised on the member's call (a rejoin after a fatal error, say)."""


class CommitFailed(KafkaRefused):
    pass


class CommitUnanswered(CommitFailed):
    """Kafka did not answer the commit within ``SIDECAR_COMMIT_TIMEOUT_MS``: its outcome is
    unknown (it may still be applied); committing the same offsets again is safe."""


class JournalUnavailable(SidecarError):
    """SQLite failed under an API request (disk full, I/O error, read-only volume)."""


class DeadlinePassed(SidecarError):
    pass


class StatusError(SidecarError):
    """An error that names its own status: the first API's ``ApiError(status, message)``,
    kept for routers written against it. New code raises a domain error instead."""

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.status = status


_STATUS: tuple[tuple[type[SidecarError], int], ...] = (
    (BadRequest, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (ResumeAhead, 409),
    (TooManyWebhooks, 409),
    (InvalidSubscription, 422),
    (RequestRefused, 400),  # a caller's mistake without a more precise status
    (MemberRefused, 409),
    (MemberBusy, 503),
    (TooManyStreams, 503),
    (KafkaRefused, 503),
    (JournalUnavailable, 503),
    (DeadlinePassed, 504),
)


def http_status(error: SidecarError) -> int:
    """The HTTP status of a domain error (500 only for one that should never reach HTTP)."""
    if isinstance(error, StatusError):
        return error.status
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def http_headers(error: SidecarError) -> dict[str, str]:
    """Headers the status needs: the auth scheme for 401, when to retry for 503."""
    if isinstance(error, Unauthorized):
        return {"WWW-Authenticate": error.challenge}
    if isinstance(error, MemberBusy | TooManyStreams | KafkaRefused | JournalUnavailable):
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return {}


def http_body(error: SidecarError) -> dict[str, Any]:
    body: dict[str, Any] = json_safe({"error": error.message, **error.details})
    return body


#: How deep ``json_safe`` copies nested lists and objects; deeper ones become a placeholder.
JSON_SAFE_DEPTH = 32


def json_safe(value: Any, depth: int = JSON_SAFE_DEPTH) -> Any:
    """``value`` made fit for a JSON error body, which must always render: a string with
    a lone surrogate (valid JSON ``"\\ud800"``, not encodable as UTF-8) gets it
    backslash-escaped, NaN and ±Infinity (Python's ``json`` reads them) become the strings
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, nesting deeper than ``depth`` becomes
    ``"..."`` (an echo of a hostile body must not exhaust the stack) and anything else
    that is not JSON (an exception in a validation error's context, say) becomes its
    ``str``. Values that are already safe are returned as they are."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return _safe_text(value)
    if isinstance(value, bytes):  # a body that is not JSON, echoed as its text
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict | list | tuple) and depth <= 0:
        return "..."
    if isinstance(value, dict):
        return {_safe_text(str(k)): json_safe(v, depth - 1) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(json_safe(v, depth - 1) for v in value)
    if isinstance(value, list):
        return [json_safe(v, depth - 1) for v in value]
    return _safe_text(str(value))


def _safe_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


__all__ = [
    "BadRequest",
    "CommitFailed",
    "CommitFenced",
    "CommitUnanswered",
    "DeadlinePassed",
    "Forbidden",
    "InvalidSubscription",
    "JournalUnavailable",
    "KafkaRefused",
    "MemberBusy",
    "MemberGone",
    "MemberRefused",
    "NotFound",
    "NotInGroup",
    "NotOwned",
    "RequestRefused",
    "SidecarError",
    "StaleGeneration",
    "StartupError",
    "StatusError",
    "Stopping",
    "TooManyStreams",
    "Unauthorized",
    "http_body",
    "http_headers",
    "http_status",
    "json_safe",
]
