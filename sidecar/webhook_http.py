"""The courier's HTTP/1.1 client: one keep-alive connection, one POST at a time, on h11.

A courier sends one request at a time to one URL, so it needs no pool, no redirects, no
cookies, no auth flows and no proxy support: only a connection it reuses, a deadline on
each request and a cap on what it reads back. h11 (the HTTP/1.1 state machine httpx
itself is built on) parses and frames the messages; asyncio streams carry them. Why not
a general client: docs/decisions/0101-webhook-client-on-h11.md.

TLS verifies against certifi's CA bundle, as httpx did, unless the ``SIDECAR_WEBHOOK_TLS_*``
settings name a private CA or a client certificate (``sidecar.webhook_tls``, which hands
each new connection its current context). Registration refuses URLs with credentials, so
none are ever sent.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from urllib.parse import quote, urlsplit

import certifi
import h11
import idna

_READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: its status, its ``Retry-After`` header and at most ``cap`` bytes of
    its body (``truncated`` when there was more)."""

    status: int
    retry_after: str | None
    body: bytes
    truncated: bool = False


class PostFailed(Exception):
    """No HTTP answer: the connection, TLS, the request or the deadline failed.

    The message starts with the kind of failure (``ConnectError: ...``, ``Timeout: ...``)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a POST goes: the connection and what the request line and Host header say."""

    scheme: str
    host: str
    port: int
    path: str  # the request target: path and query, ASCII
    authority: str  # the Host header, ASCII


@lru_cache(maxsize=256)
def parse_target(url: str) -> Target:
    """``url`` as this client sends to it; ``ValueError`` when it cannot. Registration
    (subscriptions.check_url) calls this too: a URL it accepts is one the courier can use.
    Non-ASCII host names go out in IDNA 2008, non-ASCII characters of the path and query
    percent-encoded, the rest as written (as httpx did)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    if parts.port == 0:  # ValueError too when it is not a port at all
        raise ValueError("port 0 is not a port to send to")
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    host = parts.hostname
    if not host.isascii():
        try:  # IDNA 2008, as httpx: "faß.de" is xn--fa-hia.de, not fass.de
            host = idna.encode(host.lower()).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"host {parts.hostname!r} is not a valid host name ({exc})") from None
    if ":" not in host and not _is_host_name(host):
        raise ValueError(
            f"host {parts.hostname!r} is not a valid host name (labels of 1 to 63 "
            "characters, 253 in all)"
        )
    authority = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        authority += f":{parts.port}"
    path = _ascii(parts.path or "/") + (f"?{_ascii(parts.query)}" if parts.query else "")
    return Target(parts.scheme, host, port, path, authority)


def _is_host_name(host: str) -> bool:
    """What a resolver takes (RFC 1035 lengths; one trailing dot allowed): the IDNA codec
    of ``getaddrinfo`` refuses an empty label or one over 63 characters."""
    name = host.removesuffix(".")
    return len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def _ascii(text: str) -> str:
    """Percent-encode what is not ASCII and leave the rest as written (registration
    refuses spaces and control characters)."""
    return text if text.isascii() else "".join(c if c.isascii() else quote(c) for c in text)


@cache
def default_tls() -> ssl.SSLContext:
    """Verify servers against certifi's CA bundle (what httpx did by default)."""
    return ssl.create_default_context(cafile=certifi.where())


class WebhookClient:
    """POSTs to webhook URLs over one reused connection. Loop-side only, never shared:
    each courier has its own (a request in flight owns the connection)."""

    def __init__(
        self,
        *,
        tls: ssl.SSLContext | None = None,
        tls_source: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        """``tls``: one context for every https connection; ``tls_source``: asked for the
        context at each new one (``webhook_tls.WebhookTLS.context``, which reloads files
        that changed). Neither: certifi's bundle."""
        self._tls = tls
        self._tls_source = tls_source
        self._key: tuple[str, str, int] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._h11: h11.Connection | None = None
        self.is_closed = False

    async def post(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        *,
        timeout: float,
        cap: int,
    ) -> Answer:
        """POST ``body``; the answer, or ``PostFailed``. Reads at most ``cap`` bytes of the
        answer's body. ``timeout`` bounds the whole exchange, connecting included."""
        if self.is_closed:
            raise PostFailed("ClientClosed: the client was closed")
        try:
            target = parse_target(url)
        except ValueError as exc:
            raise PostFailed(f"InvalidURL: {exc}") from None
        try:
            async with asyncio.timeout(timeout):
                await self._connect(target)
                return await self._exchange(target, body, headers, cap)
        except PostFailed:
            self._drop()
            raise
        except TimeoutError:
            self._drop()
            raise PostFailed(f"Timeout: no answer within {timeout:g} s") from None
        except (OSError, h11.ProtocolError, asyncio.IncompleteReadError) as exc:
            self._drop()
            raise PostFailed(f"{_kind(exc)}: {exc or type(exc).__name__}") from None
        except BaseException:
            self._drop()  # cancelled mid-exchange: the connection's state is unknown
            raise

    def close(self) -> None:
        self.is_closed = True
        self._drop()

    async def _connect(self, target: Target) -> None:
        """Have a connection to ``target``: the kept-alive one when it is still idle."""
        key = (target.scheme, target.host, target.port)
        if self._key == key and self._idle():
            return
        self._drop()
        tls = None
        if target.scheme == "https":
            tls = self._tls_source() if self._tls_source else self._tls or default_tls()
        try:
            self._reader, self._writer = await asyncio.open_connection(
                target.host,
                target.port,
                ssl=tls,
                server_hostname=target.host if tls else None,
                happy_eyeballs_delay=0.25,  # as anyio (httpx) did: IPv4 soon if IPv6 hangs
            )
        except ssl.SSLError as exc:
            raise PostFailed(f"TLSError: {exc}") from None
        except OSError as exc:
            raise PostFailed(f"ConnectError: {exc}") from None
        except UnicodeError as exc:  # the resolver's IDNA codec refused the name
            raise PostFailed(f"ConnectError: host {target.host!r}: {exc}") from None
        self._key = key
        self._h11 = h11.Connection(h11.CLIENT)

    def _idle(self) -> bool:
        """Is the kept-alive connection usable: open, and nothing came on it since the last
        answer? A server that closed it (an idle timeout), or sent something unasked (a
        408 before closing), is found here, before anything is sent: nothing is sent twice
        and nothing stale is read as the answer. asyncio's reader has no public peek, so
        this reads CPython's own fields (absent elsewhere: the connection counts as idle)."""
        reader, writer = self._reader, self._writer
        if reader is None or writer is None or writer.is_closing():
            return False
        return not getattr(reader, "_eof", False) and not getattr(reader, "_buffer", b"")

    async def _exchange(
        self, target: Target, body: bytes, headers: dict[str, str], cap: int
    ) -> Answer:
        conn, reader, writer = self._h11, self._reader, self._writer
        assert conn is not None and reader is not None and writer is not None
        request = [
            ("host", target.authority),
            *headers.items(),
            ("content-length", str(len(body))),
        ]
        writer.write(
            conn.send(h11.Request(method="POST", target=target.path, headers=request))
            + conn.send(h11.Data(data=body))
            + conn.send(h11.EndOfMessage())
        )
        status, retry_after = 0, None
        chunks: list[bytes] = []
        size, truncated, answered = 0, False, False
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(_READ_CHUNK)
                if not data and not answered:
                    raise PostFailed("RemoteProtocolError: the server closed the connection "
                                     "without an answer")  # fmt: skip
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                answered = True
                status = event.status_code
                for name, value in event.headers:
                    if name == b"retry-after":
                        retry_after = value.decode("latin-1")
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > cap:
                    truncated = True
                    break
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise PostFailed("RemoteProtocolError: the server closed the connection")
            # h11.InformationalResponse (1xx): wait for the final answer
        if truncated or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            self._drop()  # not reusable: unread body, or "Connection: close"
        else:
            conn.start_next_cycle()
        return Answer(status, retry_after, b"".join(chunks), truncated)

    def _drop(self) -> None:
        """Forget the connection at once: abort, never a graceful close. A graceful close
        waits for the send buffer to drain (a server that stopped reading never lets it)
        and, over TLS, for the server's close_notify (up to 30 s): past the deadline, and
        after an answer that already came. httpcore closed the same way."""
        writer, self._writer, self._reader, self._h11 = self._writer, None, None, None
        if writer is not None:
            writer.transport.abort()


def _kind(exc: BaseException) -> str:
    if isinstance(exc, h11.ProtocolError | asyncio.IncompleteReadError):
        return "RemoteProtocolError"
    if isinstance(exc, ssl.SSLError):
        return "TLSError"
    return "NetworkError"
