"""Renewed TLS files (Strimzi rotates a ``KafkaUser``'s certificate): a clean restart.

librdkafka reads ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``
and ``ssl.keystore.location`` once, when the client is created: a live consumer has no way
to load new ones (a new connection still uses the old certificate, which the broker
refuses once it expired). Creating a new consumer would change the member id and bring
its own rebalance anyway, so the sidecar does what an orchestrator does best: it drains
(the member leaves the group, ``revoked`` goes to the application as on any stop), says
why in one line, and exits with ``EXIT_ROTATED`` (75, ``EX_TEMPFAIL``); the container
restarts with the new files.

The files are compared by content (a Kubernetes Secret volume replaces them through a
symbolic link swap: modification times are not to be trusted), every
``CHECK_SECONDS``; a change must be the same on two checks in a row, so a file caught
half written does not count. The secret files of ``SIDECAR_<X>_FILE`` are watched too:
their content was read at start.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from sidecar.kafka.properties import kafka_property_variable
from sidecar.secret_files import file_variables

if TYPE_CHECKING:
    from sidecar.daemon import Sidecar

log = structlog.get_logger("sidecar.rotation")

#: The exit code after a drain for renewed TLS or secret files (sysexits' EX_TEMPFAIL).
EXIT_ROTATED = 75
CHECK_SECONDS = 5.0

#: librdkafka properties that name files it reads once.
TLS_FILE_PROPERTIES = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
)


def watched_files(kafka: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, Path]:
    """``{variable: file}`` for the TLS files and the ``SIDECAR_<X>_FILE`` secrets."""
    files = {
        kafka_property_variable(name): Path(kafka[name])
        for name in TLS_FILE_PROPERTIES
        if kafka.get(name) and os.path.isfile(kafka[name])  # "probe" and directories: no
    }
    for variable in file_variables(environ):
        files[variable.upper()] = Path(environ[variable])
    return files


def fingerprint(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None  # gone for a moment (being replaced): compared like any content


def changed(files: Mapping[str, Path], known: Mapping[str, str | None]) -> dict[str, str | None]:
    return {v: now for v, p in files.items() if (now := fingerprint(p)) != known.get(v)}


async def watch(sidecar: Sidecar, environ: Mapping[str, str] | None = None) -> None:
    """Drain and stop with ``EXIT_ROTATED`` when a watched file's content changed."""
    files = watched_files(sidecar.settings.kafka, os.environ if environ is None else environ)
    if not files:
        return
    known = {variable: fingerprint(path) for variable, path in files.items()}
    pending: dict[str, str | None] = {}
    while True:
        await asyncio.sleep(CHECK_SECONDS)
        try:
            now = await asyncio.to_thread(changed, files, known)
        except Exception as exc:  # never end the watch on a surprise: log it, go on
            log.error("TLS file watch failed; trying again", error=repr(exc))
            continue
        if not now:
            pending = {}
            continue
        if now != pending:  # the first sight of this change: confirm it on the next check
            pending = now
            continue
        log.warning(
            f"renewed files: {_names(now)} changed; leaving the group and restarting to load "
            f"them (exit {EXIT_ROTATED})",
            files=[str(files[v]) for v in sorted(now)],
            code=EXIT_ROTATED,
        )
        sidecar.request_stop(EXIT_ROTATED)
        return


def _names(variables: Iterable[str]) -> str:
    return ", ".join(sorted(variables))
