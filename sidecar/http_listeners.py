"""The daemon's two HTTP listeners: their sockets, bound before anything else starts (a
port in use is a one-line exit 2, not a half-started sidecar), and the uvicorn server each
one runs (``sidecar.daemon`` starts and stops them).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn

from sidecar.errors import StartupError
from sidecar.settings import Settings


class HttpServer(uvicorn.Server):
    """uvicorn, minus its signal handling (the daemon owns SIGTERM/SIGINT) and minus its ten
    wake-ups a second to look at ``should_exit``: an idle sidecar ticks once a second (the
    resolution of the Date header), and ``request_exit`` wakes it at once."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_requested: asyncio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def request_exit(self) -> None:
        self.should_exit = True
        if self._exit_requested is not None:
            self._exit_requested.set()

    async def main_loop(self) -> None:
        self._exit_requested = asyncio.Event()
        while not await self.on_tick(0):  # counter 0: the Date header is refreshed each tick
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_requested.wait(), 1.0)


@dataclass(slots=True)
class BoundListener:
    name: str
    sock: socket.socket
    server: HttpServer | None = None
    task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])


def url(host: str, port: int | None) -> str:
    if ":" in host:  # IPv6, its zone's "%" escaped as URLs write it (RFC 6874)
        return f"http://[{host.replace('%', '%25')}]:{port}"
    return f"http://{host}:{port}"


def bind_listeners(settings: Settings) -> list[BoundListener]:
    """Bind the control API, then the admin listener (unless ``SIDECAR_ADMIN_PORT=-1``)."""
    listeners = [BoundListener("api", bind(settings.api_host, settings.api_port, "API"))]
    if settings.admin_port >= 0:
        try:
            admin = bind(settings.admin_host, settings.admin_port, "ADMIN")
        except StartupError:
            listeners[0].sock.close()
            raise
        listeners.append(BoundListener("admin", admin))
    return listeners


def bind(host: str, port: int, setting: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on sockets that say they are TCP,
    # and without it every response waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6 and host.strip("[]") == "::":
        # Every address, IPv4 too, whatever the host's net.ipv6.bindv6only says: ``::``
        # serves single-stack IPv6 and dual-stack pods (the kubelet probes the pod IP).
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind((host, port))
    except (OSError, TypeError, UnicodeError) as exc:
        # TypeError, UnicodeError: a name the resolver cannot even encode (IDNA refuses a
        # zero-width space or a soft hyphen, invisible in a copied value: shown escaped).
        sock.close()
        shown = host if host.isprintable() else repr(host)
        reason = exc.strerror if isinstance(exc, OSError) else "not a host name or address"
        raise StartupError(
            f"cannot listen on {shown}:{port} (SIDECAR_{setting}_HOST/SIDECAR_{setting}_PORT): "
            f"{reason}"
        ) from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock
