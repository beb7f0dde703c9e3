"""What ``demo`` checks before it prints its banner: the ``SIDECAR_*`` environment and the
HTTP port.

The demo runs its own group and topics on librdkafka's mock cluster, so it uses one
setting of the environment only: ``SIDECAR_API_PORT``, the port when ``--port`` is not
given (``--port`` wins). Every other known ``SIDECAR_*`` variable is ignored, and the
demo says which; an unknown one is a typo (``SIDECAR_BOOTSTRAP_SERVER``) and refused with
a suggestion, as ``run`` does: the user meant to join a cluster, not to watch the demo.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Mapping
from typing import TextIO

from sidecar.settings import ENV_PREFIX, InvalidSettings
from sidecar.settings_sources import unknown_variables

DEFAULT_PORT = 8080
PORT_VARIABLE = f"{ENV_PREFIX}API_PORT"
#: The host the demo listens on (the settings' default ``SIDECAR_API_HOST``).
DEMO_HOST = "127.0.0.1"


def check_demo_environment(
    environ: Mapping[str, str], port: int | None, out: TextIO | None = None
) -> int:
    """The demo's HTTP port (``port`` from ``--port``, else ``SIDECAR_API_PORT``, else
    8080). ``InvalidSettings`` for an unknown ``SIDECAR_*`` name or a bad port; one line
    on ``out`` (stderr) naming the known variables the demo ignores."""
    unknown = unknown_variables(environ)
    if unknown:
        raise InvalidSettings(
            "demo: "
            + "; ".join(line.replace(" is ignored", "") for line in unknown)
            + " (the demo runs its own group and topics; `rebalance-sidecar run` joins a "
            "cluster: scripts/run.sh runs it when SIDECAR_BOOTSTRAP_SERVERS is set)"
        )
    given = {key.upper(): value for key, value in environ.items()}
    # Unknown names were refused above: these are known ones (or Kafka properties).
    ignored = sorted(n for n in given if n.startswith(ENV_PREFIX) and n != PORT_VARIABLE)
    if port is None and PORT_VARIABLE in given:
        port = _port_of(given[PORT_VARIABLE])
    if ignored:
        print(
            "rebalance-sidecar demo: ignoring "
            + ", ".join(ignored)
            + " (the demo runs its own group and topics on a mock cluster; it uses "
            f"{PORT_VARIABLE} or --port only)",
            file=out or sys.stderr,
            flush=True,
        )
    return DEFAULT_PORT if port is None else port


def _port_of(value: str) -> int:
    try:
        port = int(value.strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise InvalidSettings(f"invalid setting {PORT_VARIABLE}: {value!r} is not a port (0-65535)")
    return port


def check_port_free(port: int, option: str, host: str = DEMO_HOST) -> None:
    """``InvalidSettings`` naming ``option`` when ``port`` cannot be listened on (another
    process has it). 0 is any free port: nothing to check."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the listener will: a port left in TIME_WAIT by a previous run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError as exc:
            why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise InvalidSettings(
                f"demo: cannot listen on {host}:{port} ({why}); choose another with {option} "
                "(--port 0: any free port)"
            ) from None
