"""The one place logging is configured: structlog, JSON off a terminal, secrets redacted.

Standard-library loggers (uvicorn, librdkafka through confluent-kafka's ``logger``) are
routed through the same processors, so every line has one format.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Literal

import structlog

_SECRET_KEYS = re.compile(r"(token|secret|password|authorization|sasl)", re.IGNORECASE)
_INLINE = re.compile(r"(whsec_)[A-Za-z0-9+/=]+|(Bearer\s+)\S+")
REDACTED = "[redacted]"


def redact(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Drop the values of secret-looking keys and inline secrets from every line."""
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and value is not None:
            event_dict[key] = REDACTED
        elif isinstance(value, str):
            event_dict[key] = _INLINE.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, value)
    return event_dict


def configure(level: str = "info", fmt: Literal["auto", "json", "console"] = "auto") -> None:
    """``SIDECAR_LOG_FORMAT``: ``json`` one object per line, for a container's log
    collector; ``console`` structlog's readable renderer, coloured on a terminal; ``auto``
    the console format when stderr, where the lines go, is a terminal, JSON otherwise."""
    json_lines = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        redact,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if json_lines else _identity,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def kafka_logger(client: str) -> logging.Logger:
    """The standard-library logger a librdkafka client (``logger`` in its configuration)
    writes to: its lines then come out in the sidecar's format, not raw on stderr, and
    their repeats collapsed (``RepeatedLines``)."""
    logger = logging.getLogger(f"librdkafka.{client}")
    if not any(isinstance(f, RepeatedLines) for f in logger.filters):
        logger.addFilter(RepeatedLines())
    return logger


# Numbers vary between repeats of one line ("after 3ms", "2 identical error(s)").
_NUMBERS = re.compile(r"\d+")


class RepeatedLines(logging.Filter):
    """Collapse repeats, as the sidecar's own "Kafka unreachable" warning does: the first
    line of a kind passes; the same line (numbers aside) again within ``window`` seconds is
    only counted; the first one after the window passes with that count appended.

    An unreachable broker makes librdkafka log a connection failure many times a second
    (453 lines in 24 s); with this at most one line per kind every ``window`` seconds.
    Kinds are bounded (``max_kinds``): the oldest is forgotten first.
    """

    def __init__(
        self,
        window: float = 10.0,
        max_kinds: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._window = window
        self._max_kinds = max_kinds
        self._lock = threading.Lock()
        # kind -> (monotonic time it was last let through, repeats suppressed since)
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True  # asked for (SIDECAR_KAFKA_DEBUG): every line
        message = record.getMessage()
        kind = (record.levelno, _NUMBERS.sub("#", message))
        now = self._clock()
        with self._lock:
            last = self._seen.get(kind)
            if last is not None and now - last[0] < self._window:
                self._seen[kind] = (last[0], last[1] + 1)
                return False
            self._seen.pop(kind, None)
            self._seen[kind] = (now, 0)
            while len(self._seen) > self._max_kinds:
                del self._seen[next(iter(self._seen))]
        if last is not None and last[1]:
            record.msg = f"{message} (repeated {last[1]} times in the {now - last[0]:.0f} s before)"
            record.args = ()
        return True


def _identity(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    return event_dict
