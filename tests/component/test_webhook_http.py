"""The courier's HTTP client against real sockets: reuse, stale connections, caps, deadlines,
broken servers and TLS (a certificate made by openssl for 127.0.0.1)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sidecar.webhook_http import PostFailed, WebhookClient, parse_target

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]
HEADERS = {"content-type": "application/json", "webhook-id": "msg_1"}


class Server:
    """A raw HTTP server whose every connection runs ``handler``; it counts connections
    and keeps the requests it read."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/hook?x=1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        request = (head, await reader.readexactly(length))
        self.requests.append(request)
        return request


async def answer_forever(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
    while True:
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()


def deafen(writer: asyncio.StreamWriter) -> None:
    """The server reads nothing more: not a request, not a TLS close_notify."""
    transport = writer.transport
    assert isinstance(transport, asyncio.ReadTransport)
    transport.pause_reading()


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(main())  # type: ignore[arg-type]


def test_posts_reuse_one_connection_and_send_the_request_as_given() -> None:
    async def main() -> None:
        async with Server(answer_forever) as server:
            client = WebhookClient()
            for _ in range(3):
                answer = await client.post(server.url, b'{"a":1}', HEADERS, timeout=5, cap=100)
                assert (answer.status, answer.body, answer.truncated) == (200, b"ok", False)
            client.close()
            assert server.connections == 1
            head, body = server.requests[0]
            assert head.startswith(b"POST /hook?x=1 HTTP/1.1\r\n")
            assert b"webhook-id: msg_1" in head and b"content-length: 7" in head
            assert f"host: 127.0.0.1:{server.url.split(':')[2].split('/')[0]}".encode() in head
            assert body == b'{"a":1}'

    run(main)


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_a_duplicate() -> None:
    """Servers close idle keep-alive connections: the next POST must not fail for it, and
    the request must reach the server exactly once."""

    async def once_then_close(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # keep-alive implied, then closed anyway
        await w.drain()

    async def main() -> None:
        async with Server(once_then_close) as server:
            client = WebhookClient()
            assert (await client.post(server.url, b"1", HEADERS, timeout=5, cap=10)).status == 204
            await asyncio.sleep(0.1)  # the server's close reaches us
            assert (await client.post(server.url, b"2", HEADERS, timeout=5, cap=10)).status == 204
            client.close()
            assert [body for _, body in server.requests] == [b"1", b"2"]
            assert server.connections == 2

    run(main)


def test_nothing_is_sent_twice_when_the_server_fails_after_reading_the_request() -> None:
    """The server read the POST (it may have acted on it), then died: a failure for the
    courier to retry with its policy, never a quiet second copy from the client."""

    async def dies_on_second(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await w.drain()
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\n")  # half a status line, then gone

    async def main() -> None:
        async with Server(dies_on_second) as server:
            client = WebhookClient()
            assert (await client.post(server.url, b"1", HEADERS, timeout=5, cap=10)).status == 204
            with pytest.raises(PostFailed, match=r"^RemoteProtocolError: "):
                await client.post(server.url, b"2", HEADERS, timeout=5, cap=10)
            client.close()
            assert [body for _, body in server.requests] == [b"1", b"2"]

    run(main)


def test_what_a_server_says_unasked_on_an_idle_connection_is_not_the_next_answer() -> None:
    async def times_out_idle(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\n\r\n")
        await w.drain()

    async def main() -> None:
        async with Server(times_out_idle) as server:
            client = WebhookClient()
            assert (await client.post(server.url, b"1", HEADERS, timeout=5, cap=10)).status == 200
            await asyncio.sleep(0.3)
            assert (await client.post(server.url, b"2", HEADERS, timeout=5, cap=10)).status == 200
            client.close()
            assert server.connections == 2

    run(main)


def test_a_cancelled_post_of_a_body_nobody_reads_ends_at_once() -> None:
    """Courier.stop() cancels mid-POST: the connection is aborted, not drained (a graceful
    close waited for a send buffer the server never empties)."""

    async def never_reads(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await asyncio.sleep(30)

    async def main() -> None:
        async with Server(never_reads) as server:
            client = WebhookClient()
            task = asyncio.create_task(
                client.post(server.url, b"x" * (16 << 20), HEADERS, timeout=60, cap=10)
            )
            await asyncio.sleep(0.5)
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=5)
            assert done, "the cancelled POST was still closing its connection after 5 s"

    run(main)


def test_connection_close_and_a_capped_body_make_a_new_connection_next_time() -> None:
    async def closes_or_floods(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        while True:
            _, body = await s.read_request(r)
            if body == b"close":
                w.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye")
            else:
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000)
            await w.drain()

    async def main() -> None:
        async with Server(closes_or_floods) as server:
            client = WebhookClient()
            bye = await client.post(server.url, b"close", HEADERS, timeout=5, cap=100)
            assert bye.body == b"bye"
            big = await client.post(server.url, b"big", HEADERS, timeout=5, cap=1000)
            assert big.truncated and len(big.body) <= 1000 and big.status == 200
            again = await client.post(server.url, b"close", HEADERS, timeout=5, cap=100)
            assert again.body == b"bye"
            client.close()
            assert server.connections == 3

    run(main)


def test_retry_after_chunked_bodies_and_interim_answers_are_read() -> None:
    async def interim(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        w.write(
            b"HTTP/1.1 102 Processing\r\n\r\n"
            b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\n"
            b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        await w.drain()
        await asyncio.sleep(1)

    async def main() -> None:
        async with Server(interim) as server:
            client = WebhookClient()
            answer = await client.post(server.url, b"{}", HEADERS, timeout=5, cap=100)
            client.close()
            assert (answer.status, answer.retry_after, answer.body) == (503, "7", b"abcde")

    run(main)


def test_the_deadline_bounds_a_server_that_never_answers() -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        await asyncio.sleep(30)

    async def main() -> None:
        async with Server(silent) as server:
            client = WebhookClient()
            started = time.monotonic()
            with pytest.raises(PostFailed, match=r"^Timeout: no answer within 0.3 s"):
                await client.post(server.url, b"{}", HEADERS, timeout=0.3, cap=100)
            assert time.monotonic() - started < 10  # bounded, not hung (generous: shared CI)
            client.close()

    run(main)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (b"garbage\r\n\r\n", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", "RemoteProtocolError"),
    ],
    ids=["not HTTP", "closed mid-body"],
)
def test_a_broken_answer_is_a_failure_and_is_not_sent_again(reply: bytes, kind: str) -> None:
    async def broken(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        await s.read_request(r)
        w.write(reply)
        await w.drain()

    async def main() -> None:
        async with Server(broken) as server:
            client = WebhookClient()
            with pytest.raises(PostFailed, match=f"^{kind}: "):
                await client.post(server.url, b"{}", HEADERS, timeout=5, cap=100)
            client.close()
            assert len(server.requests) == 1  # the server had it: the courier decides

    run(main)


def test_nothing_listening_is_a_connect_error_and_a_closed_client_refuses() -> None:
    async def main() -> None:
        client = WebhookClient()
        with pytest.raises(PostFailed, match=r"^ConnectError: "):
            await client.post("http://127.0.0.1:9/hook", b"{}", HEADERS, timeout=5, cap=10)
        with pytest.raises(PostFailed, match=r"^InvalidURL: "):
            await client.post("http://127.0.0.1:99999/", b"{}", HEADERS, timeout=5, cap=10)
        client.close()
        assert client.is_closed
        with pytest.raises(PostFailed, match=r"^ClientClosed: "):
            await client.post("http://127.0.0.1:9/hook", b"{}", HEADERS, timeout=5, cap=10)

    run(main)


def test_non_ascii_hosts_and_paths_go_out_encoded() -> None:
    async def main() -> None:
        async with Server(answer_forever) as server:
            client = WebhookClient()
            await client.post(server.url.replace("/hook", "/h\u00e9ok"), b"{}", HEADERS,
                              timeout=5, cap=10)  # fmt: skip
            client.close()
            assert server.requests[0][0].startswith(b"POST /h%C3%A9ok?x=1 HTTP/1.1\r\n")
        target = parse_target("https://b\u00fccher.example/x?q=[1]|{2}")
        assert (target.authority, target.port) == ("xn--bcher-kva.example", 443)
        assert target.path == "/x?q=[1]|{2}"  # ASCII goes as written
        assert parse_target("http://[::1]:8080/").authority == "[::1]:8080"
        assert parse_target("http://fa\u00df.de/").host == "xn--fa-hia.de"  # IDNA 2008
        for refused in ("http://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/",
                        "http://127.0.0.1:0/"):  # fmt: skip
            with pytest.raises(ValueError, match=r"not a valid host name|port 0"):
                parse_target(refused)

    run(main)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_verifies_the_server_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def main() -> None:
        async with Server(answer_forever, tls=served) as server:
            untrusting = WebhookClient()  # certifi's bundle: a self-signed server is refused
            with pytest.raises(PostFailed, match=r"^TLSError: .*CERTIFICATE_VERIFY_FAILED"):
                await untrusting.post(server.url, b"{}", HEADERS, timeout=5, cap=10)
            untrusting.close()
            assert server.requests == []
            trusting = WebhookClient(tls=ssl.create_default_context(cafile=str(cert)))
            answer = await trusting.post(server.url, b"{}", HEADERS, timeout=5, cap=10)
            trusting.close()
            assert (answer.status, answer.body) == (200, b"ok")

    run(main)


def test_an_https_server_that_never_answers_fails_at_the_deadline(
    certificate: tuple[Path, Path],
) -> None:
    """Dropping a TLS connection never waits for the server's close_notify (asyncio's
    graceful shutdown waits up to 30 s): the deadline is the deadline."""
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def deaf(r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server) -> None:
        deafen(w)
        await asyncio.sleep(60)

    async def main() -> None:
        async with Server(deaf, tls=served) as server:
            client = WebhookClient(tls=ssl.create_default_context(cafile=str(cert)))
            started = time.monotonic()
            with pytest.raises(PostFailed, match=r"^Timeout: "):
                await client.post(server.url, b"{}", HEADERS, timeout=0.5, cap=10)
            assert time.monotonic() - started < 10, "the drop waited for the TLS shutdown"
            client.close()

    run(main)


def test_an_answer_that_came_is_kept_when_the_tls_server_then_stops_reading(
    certificate: tuple[Path, Path],
) -> None:
    """``Connection: close`` after a 200: dropping the connection must not wait for the
    server's close_notify inside the deadline and turn the 200 into a timeout (a resend
    of an acknowledged event)."""
    cert, key = certificate
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)

    async def answers_then_deaf(
        r: asyncio.StreamReader, w: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        deafen(w)
        await asyncio.sleep(60)

    async def main() -> None:
        async with Server(answers_then_deaf, tls=served) as server:
            client = WebhookClient(tls=ssl.create_default_context(cafile=str(cert)))
            answer = await client.post(server.url, b"{}", HEADERS, timeout=1, cap=10)
            client.close()
            assert (answer.status, answer.body) == (200, b"ok")

    run(main)
