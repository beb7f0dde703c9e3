"""The HTTP API in process: a real uvicorn server, the daemon's own wiring, no broker.

The member thread is replaced by a scripted one that takes commands from the real handoff
and answers them with a chosen error: the failure paths a real member produces only at
the wrong moment (busy in a revoke barrier, fenced by a newer generation).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from starlette.types import Message, Receive, Scope, Send
from structlog.testing import capture_logs

from sidecar import api as api_module
from sidecar.api import MAX_BODY_BYTES, create_admin_app, create_app
from sidecar.commands import Commit
from sidecar.components import Components, build_components
from sidecar.errors import (
    BadRequest,
    DeadlinePassed,
    KafkaRefused,
    MemberBusy,
    MemberGone,
    SidecarError,
    StaleGeneration,
    StartupError,
    StatusError,
    http_body,
    http_status,
)
from sidecar.feed import Feed
from sidecar.handoff import Handoff
from sidecar.journal import Journal
from sidecar.model import Assignment, MemberState, TopicPartition
from sidecar.probes import Lifecycle, Probes
from sidecar.settings import Settings, WebhookSpec
from sidecar.subscriptions import Registry, new_secret
from sidecar.web import events as events_web
from sidecar.web.assignment import AssignmentFastPath


class InProcess:
    """A ``Runtime`` over ``build_components``: what ``daemon.Sidecar`` offers the API."""

    def __init__(self, parts: Components) -> None:
        self.parts = parts
        self.lifecycle = Lifecycle.RUNNING
        self.probes = Probes(
            parts.settings, lambda: self.lifecycle, lambda: self.handoff.snapshot, lambda: None
        )
        self.settings: Settings = parts.settings
        self.handoff: Handoff = parts.handoff
        self.registry: Registry = parts.registry
        self.journal: Journal = parts.journal
        self.feed: Feed = parts.feed
        self.metrics_registry: CollectorRegistry = parts.metrics_registry
        self.positions = parts.positions
        self.drained = 0
        self.deadlines: list[float] = []

    @property
    def stopping(self) -> bool:
        return self.lifecycle.stopping

    async def drain(self, deadline: float) -> Assignment | None:
        self.drained += 1
        self.deadlines.append(deadline)
        return None


class ScriptedMember:
    """Takes commands off the real handoff, as the member thread does, and fails them."""

    def __init__(self, handoff: Handoff, error: Exception) -> None:
        self.commands: list[Any] = []
        self._handoff = handoff
        self._error = error
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.01):
            for pending in self._handoff.take_commands():
                self.commands.append(pending.command)
                pending.future.set_exception(self._error)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.01)
    port = sock.getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        await task
        sock.close()


Scenario = Callable[[InProcess, httpx.AsyncClient], Coroutine[Any, Any, None]]


def run(tmp_path: Path, scenario: Scenario, admin: bool = False, **settings: Any) -> None:
    async def main() -> None:
        parts = build_components(
            Settings(
                bootstrap_servers="127.0.0.1:9",
                group_id="orders",
                topics=("orders",),
                data_dir=tmp_path,
                **settings,
            )
        )
        runtime = InProcess(parts)
        app = create_admin_app(runtime) if admin else create_app(runtime, command_timeout=0.3)
        try:
            async with serving(app) as client:
                await scenario(runtime, client)
        finally:
            await parts.close()

    asyncio.run(main())


COMMIT = {"offsets": [{"topic": "orders", "partition": 0, "offset": 5}]}


def test_a_busy_member_is_a_503_with_retry_after_never_a_500(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        # Nobody takes commands: the member thread is held (e.g. by a revoke barrier).
        for path, body in (("/commit", COMMIT), ("/enforce-rebalance", {"reason": "now"})):
            answer = await client.post(path, json=body)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["retry-after"] == "1"
            assert "did not take the command" in answer.json()["error"]

    run(tmp_path, scenario)


def test_commit_names_its_generation_and_a_stale_one_is_409(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        member = ScriptedMember(runtime.handoff, StaleGeneration(requested=3, current=4))
        try:
            answer = await client.post("/commit", json={**COMMIT, "generation_id": 3})
        finally:
            member.stop()
        assert answer.status_code == 409, answer.text
        assert answer.json()["generation_id"] == 4
        assert "generation 3 is stale" in answer.json()["error"]
        (command,) = member.commands
        assert isinstance(command, Commit) and command.generation_id == 3
        ahead = str(StaleGeneration(requested=12, current=7))
        assert ahead == "generation 12 is not the member's: the member is at 7"
        invalid = await client.post("/commit", json={**COMMIT, "generation_id": "seven"})
        assert invalid.status_code == 422

    run(tmp_path, scenario)


@pytest.mark.parametrize(
    ("error", "status", "retry_after"),
    [
        (KafkaRefused("Kafka refused it: fenced by a newer instance"), 503, "1"),
        (MemberGone("the group member stopped: journal append failed: disk I/O error"), 409, None),
    ],
)
def test_a_command_the_member_could_not_run_is_its_domain_status(
    tmp_path: Path, error: SidecarError, status: int, retry_after: str | None
) -> None:
    """The domain errors the member thread answers a command with when Kafka refused it or
    the journal failed (``GroupMember._command_error``, tested on a real broker in
    ``tests/integration/test_member_edges.py``) reach the HTTP caller as their status,
    ``Retry-After`` and message."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        member = ScriptedMember(runtime.handoff, error)
        try:
            answer = await client.post("/enforce-rebalance", json={"reason": "now"})
        finally:
            member.stop()
        assert answer.status_code == status, answer.text
        assert answer.json() == {"error": error.message}
        assert answer.headers.get("retry-after") == retry_after

    run(tmp_path, scenario)


BROWSER_REQUESTS: list[dict[str, Any]] = [
    {"content": b"offsets=1", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    {"content": b'{"offsets": []}', "headers": {"Content-Type": "text/plain"}},
    {"content": b"--x--", "headers": {"Content-Type": "multipart/form-data; boundary=x"}},
    {"json": COMMIT, "headers": {"Origin": "http://evil.example"}},
    {"json": COMMIT, "headers": {"Origin": "null"}},
    {"json": COMMIT, "headers": {"Sec-Fetch-Site": "cross-site"}},
    {"headers": {"Sec-Fetch-Site": "same-site"}},
]


@pytest.mark.parametrize("request_", BROWSER_REQUESTS)
def test_without_a_token_cross_site_browser_requests_cannot_mutate(
    request_: dict[str, Any], tmp_path: Path
) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        member = ScriptedMember(runtime.handoff, StaleGeneration(1, 2))
        try:
            for method, path in (
                ("POST", "/commit"),
                ("POST", "/enforce-rebalance"),
                ("POST", "/webhooks"),
                ("POST", "/drain"),
                ("DELETE", "/webhooks/any"),
            ):
                answer = await client.request(method, path, **request_)
                assert answer.status_code == 403, (method, path, answer.text)
                assert "refused" in answer.json()["error"]
            # What curl or an SDK sends still reaches the member.
            plain = await client.post("/commit", json=COMMIT)
            assert plain.status_code == 409, plain.text
            same = await client.post(
                "/commit", json=COMMIT, headers={"Sec-Fetch-Site": "same-origin"}
            )
            assert same.status_code == 409, same.text
        finally:
            member.stop()
        assert len(member.commands) == 2

    run(tmp_path, scenario)


def test_openapi_declares_the_bearer_scheme_on_mutations_only(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        spec = (await client.get("/openapi.json")).json()
        assert spec["components"]["securitySchemes"]["bearer"] == {
            "type": "http",
            "scheme": "bearer",
            "description": "`SIDECAR_API_TOKEN`, required by POST and DELETE when configured.",
        }
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                secured = {"bearer": []} in operation.get("security", [])
                assert secured == (method in ("post", "delete")), (method, path)
                if secured:
                    assert {"401", "403"} <= set(operation["responses"]), (method, path)

    run(tmp_path, scenario)


def test_plain_get_assignment_sends_the_documented_routes_bytes_for_the_current_snapshot(
    tmp_path: Path,
) -> None:
    # ``?after=0&wait=0`` answers at once and goes through the FastAPI route; the plain
    # GET is the fast path's. Everything but the Date header must be the same bytes.
    async def both(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        return await client.get("/assignment"), await client.get("/assignment?after=0&wait=0")

    def wire(response: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"date"]
        return response.status_code, headers, response.content

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        plain, routed = await both(client)
        assert wire(plain) == wire(routed)
        assert plain.headers["content-type"] == "application/json"
        assert plain.json() == runtime.handoff.snapshot.as_dict()

        # A new snapshot is served by the very next request, encoded as the route does,
        # escapes included.
        changed = dataclasses.replace(
            runtime.handoff.snapshot,
            sequence=runtime.handoff.snapshot.sequence + 1,
            state=MemberState.STABLE,
            partitions=(TopicPartition("orders", 0), TopicPartition("zählung \u2028", 3)),
            error='broker "é" down\n\x00\x7f \U0001f600 </script>',
        )
        runtime.handoff.publish(changed)
        plain, routed = await both(client)
        assert wire(plain) == wire(routed)
        assert plain.json()["sequence"] == changed.sequence
        assert plain.json()["error"] == changed.error

        # With a body it is the route's request, under the same body limit as before.
        too_large = await client.request("GET", "/assignment", content=b"x" * (MAX_BODY_BYTES + 1))
        assert too_large.status_code == 413, too_large.text

    run(tmp_path, scenario)


def test_the_fast_path_takes_only_a_plain_get_of_the_assignment(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        passed: list[str] = []

        async def route(scope: Scope, receive: Receive, send: Send) -> None:
            passed.append(f"{scope['method']} {scope['path']}?{scope['query_string'].decode()}")

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        def request(method: str, path: str, query: bytes = b"", **headers: str) -> Scope:
            return {
                "type": "http",
                "method": method,
                "path": path,
                "query_string": query,
                "root_path": "",
                "headers": [(b"host", b"127.0.0.1")]
                + [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
            }

        installed: list[object] = [m.cls for m in create_app(runtime).user_middleware]
        assert AssignmentFastPath in installed
        fast = AssignmentFastPath(route, runtime)
        await fast(request("GET", "/assignment"), receive, send)
        assert passed == []
        assert sent[0]["status"] == 200
        assert sent[1]["body"] == (await client.get("/assignment?wait=0")).content
        for scope in (
            request("GET", "/assignment", b"after=1&wait=2"),
            request("GET", "/assignment", b"after=x"),
            request("GET", "/assignment", content_length="0"),
            request("GET", "/assignment", transfer_encoding="chunked"),
            request("HEAD", "/assignment"),
            request("POST", "/assignment"),
            request("GET", "/assignment/"),
            request("GET", "/events"),
        ):
            await fast(scope, receive, send)
        assert len(passed) == 8, passed

    run(tmp_path, scenario)


def test_the_admin_app_has_probes_metrics_drain_and_nothing_else(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        for path in ("/livez", "/healthz", "/startupz", "/metrics"):
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/readyz")).status_code == 503  # never joined
        for path in ("/assignment", "/openapi.json", "/docs", "/events", "/webhooks"):
            assert (await client.get(path)).status_code == 404, path
        runtime.lifecycle = Lifecycle.STOPPING
        stopping = await client.get("/readyz")
        assert (stopping.status_code, stopping.json()["reason"]) == (503, "stopping")
        assert (await client.get("/livez")).status_code == 200

    run(tmp_path, scenario, admin=True)


def test_head_is_get_without_the_body_but_where_get_acts(tmp_path: Path) -> None:
    """HEAD (RFC 9110: supported wherever GET is) gets GET's status and headers and no
    body, an event stream's included, which ends with its head; a route that also takes
    POST keeps HEAD a 405, so HEAD /drain never drains (the admin listener's GET /drain
    is the kubelet's preStop hook)."""

    async def api(runtime: InProcess, client: httpx.AsyncClient) -> None:
        for path in ("/assignment", "/livez", "/readyz", "/metrics", "/webhooks", "/", "/docs"):
            get, head = await client.get(path), await client.head(path)
            assert head.status_code == get.status_code, path
            assert head.content == b"", path
            assert head.headers["content-type"] == get.headers["content-type"], path
            if path != "/metrics":  # its length changes from one scrape to the next
                assert head.headers["content-length"] == get.headers["content-length"], path
        stream = await asyncio.wait_for(client.head("/events"), 10)
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        bad = await client.get("/events?after=x")
        assert (await client.head("/events?after=x")).status_code == bad.status_code == 400
        for path in ("/commit", "/enforce-rebalance", "/drain"):
            assert (await client.head(path)).status_code == 405, path
        assert (await client.get("/livez")).status_code == 200  # the connection serves on
        # Allow names every method the path takes: Starlette named the first route's only
        # (DELETE /webhooks was told "GET" where POST is served too).
        webhook = await client.post("/webhooks", json={"url": "http://127.0.0.1:9/x"})
        one = f"/webhooks/{webhook.json()['id']}"
        for method, path, allow in (
            ("DELETE", "/webhooks", "GET, HEAD, POST"),
            ("PUT", one, "DELETE, GET, HEAD"),
            ("POST", "/assignment", "GET, HEAD"),
            ("HEAD", "/commit", "POST"),
            ("GET", "/enforce-rebalance", "POST"),
        ):
            refused = await client.request(method, path)
            assert refused.status_code == 405, (method, path)
            assert refused.headers["allow"] == allow, (method, path)

    async def admin(runtime: InProcess, client: httpx.AsyncClient) -> None:
        assert (await client.head("/livez")).status_code == 200
        with capture_logs() as logged:
            refused = await client.head("/drain")
            assert refused.status_code == 405
            assert refused.headers["allow"] == "GET, POST"
            assert runtime.drained == 0
            # 504 here: this runtime's drain never leaves the group.
            assert (await client.get("/drain")).status_code == 504
            assert runtime.drained == 1
        # Every drain that failed is in the log (the kubelet reports nothing of it).
        failed = [(e["event"].split(":")[0], e["status"]) for e in logged if "drain" in e["event"]]
        assert failed == [("drain refused", 405), ("drain not finished", 504)]
        # ?deadline= as on the control API's drain: a hook's path may carry it; a bad one
        # was ignored (and the drain ran with the default), now it is a 400 and no drain.
        for bad, says in (("abc", "valid number"), ("nan", "finite"), ("-1", "greater than")):
            with capture_logs() as logged:
                refused = await client.get(f"/drain?deadline={bad}")
            assert refused.status_code == 400, (bad, refused.text)
            assert says in refused.json()["error"], (bad, refused.text)
            # The kubelet says nothing of a hook's answer: the log says no drain happened.
            (line,) = [e for e in logged if e["event"].startswith("drain refused")]
            assert line["log_level"] == "error" and line["status"] == 400
            assert says in line["error"]
        assert runtime.drained == 1
        await client.get("/drain?deadline=60")
        assert runtime.deadlines == [runtime.settings.drain_timeout_ms / 1000, 60.0]

    run(tmp_path / "api", api)
    run(tmp_path / "admin", admin, admin=True)


def test_ready_without_group_is_ready_before_joining(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert "ready_without_group" in ready.json()["reason"]

    run(tmp_path, scenario, admin=True, ready_without_group=True)


def test_every_domain_error_maps_to_a_deliberate_status() -> None:
    def subclasses(kind: type[SidecarError]) -> list[type[SidecarError]]:
        found = []
        for sub in kind.__subclasses__():
            found += [sub, *subclasses(sub)]
        return found

    unmapped = [
        kind.__name__
        for kind in subclasses(SidecarError)
        if kind not in (StartupError, StatusError) and http_status(kind.__new__(kind)) == 500
    ]
    assert unmapped == []
    assert http_status(BadRequest("x")) == 400
    assert http_status(MemberBusy("x")) == 503
    assert http_status(KafkaRefused("x")) == 503
    assert http_status(DeadlinePassed("x")) == 504


def test_the_old_homes_of_the_errors_still_export_them() -> None:
    from sidecar import api, commands, daemon, errors, handoff, subscriptions

    legacy = api.ApiError(404, "no such thing", hint="look elsewhere")
    assert http_status(legacy) == 404
    assert http_body(legacy) == {"error": "no such thing", "hint": "look elsewhere"}

    assert handoff.MemberGone is errors.MemberGone and handoff.MemberBusy is errors.MemberBusy
    assert commands.NotOwned is errors.NotOwned and commands.CommitFailed is errors.CommitFailed
    assert commands.StaleGeneration is errors.StaleGeneration
    assert commands.NotInGroup is errors.NotInGroup
    assert subscriptions.InvalidSubscription is errors.InvalidSubscription
    assert daemon.StartupError is errors.StartupError


def test_a_malformed_query_string_or_header_is_400_and_a_bad_body_422(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        for path, query in (
            ("/assignment", "after=%C2%B2"),  # "²": a digit to str.isdigit(), not to int()
            ("/assignment", f"after={2**63}"),  # past SQLite's INTEGER
            ("/assignment", "wait=soon"),
            ("/events", "after=-1"),
            ("/events", "limit=%D9%A1"),  # ARABIC-INDIC DIGIT ONE
            ("/webhooks/app/deliveries", "limit=0"),
        ):
            answer = await client.get(f"{path}?{query}", headers={"Accept": "application/json"})
            assert answer.status_code == 400, (path, query, answer.text)
            assert answer.json()["error"].startswith("invalid request")
        # Not a number at all: said so, not "less than or equal to 300".
        for method, path in (
            ("GET", "/assignment?after=1&wait=nan"),
            ("POST", "/enforce-rebalance?wait=nan"),
            ("POST", "/drain?deadline=nan"),
            ("POST", "/drain?deadline=inf"),
        ):
            answer = await client.request(method, path)
            assert answer.status_code == 400, (path, answer.text)
            assert "finite number" in answer.json()["error"], (path, answer.text)
        assert runtime.drained == 0
        event_id = await client.get(
            "/events", headers={"Last-Event-ID": "-5", "Accept": "application/json"}
        )
        assert event_id.status_code == 400
        body = await client.post("/commit", json={"offsets": []})
        assert body.status_code == 422

    run(tmp_path, scenario)


def test_the_json_history_is_chosen_by_a_media_type_in_any_case(tmp_path: Path) -> None:
    """Media types are case-insensitive (RFC 9110): ``Accept: APPLICATION/JSON`` got an
    endless event stream instead of the history, the client hanging on it."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        for accept in ("APPLICATION/JSON", "Application/Json; q=1"):
            answer = await asyncio.wait_for(
                client.get("/events?after=0", headers={"Accept": accept}), 10
            )
            assert answer.headers["content-type"] == "application/json", accept
            assert isinstance(answer.json(), list)

    run(tmp_path, scenario)


def test_a_json_body_sent_as_another_content_type_is_a_422_that_says_so(tmp_path: Path) -> None:
    """``curl -d`` sends ``application/x-www-form-urlencoded``: FastAPI then hands the JSON
    to the model as bytes, and the 422 said only "Input should be a valid dictionary" (the
    README's own registration example, with a token, got that)."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        token = {"Authorization": "Bearer s3cret"}
        webhook = b'{"url": "http://127.0.0.1:8081/rebalance", "mode": "blocking"}'
        for path, body, content_type in (
            ("/webhooks", webhook, "application/x-www-form-urlencoded"),
            ("/commit", json.dumps(COMMIT).encode(), "text/plain; charset=utf-8"),
            ("/enforce-rebalance", b'{"reason": "deploy"}', "application/xml"),
        ):
            answer = await client.post(
                path, content=body, headers={**token, "Content-Type": content_type}
            )
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["error"] == (
                "invalid request: the body is read as JSON only with Content-Type: "
                f"application/json, not {content_type!r}"
            )
        assert runtime.registry.list() == []
        # The same body as JSON is taken.
        created = await client.post(
            "/webhooks", content=webhook, headers={**token, "Content-Type": "application/json"}
        )
        assert created.status_code == 201, created.text

    run(tmp_path, scenario, api_token=SecretStr("s3cret"))


def test_a_resume_past_the_newest_event_is_409_not_a_silent_stall(tmp_path: Path) -> None:
    """A client that read a journal since replaced (an emptied data dir: numbering
    restarted) resumed with a ``Last-Event-ID`` past every event: the stream skipped each
    new event as already seen, for ever, without a word."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        newest = runtime.journal.last_sequence()
        ahead = await client.get(
            "/events", headers={"Last-Event-ID": str(newest + 5), "Accept": "text/event-stream"}
        )
        assert ahead.status_code == 409, ahead.text
        assert (
            f"Last-Event-ID {newest + 5} is past the newest event ({newest})"
            in (ahead.json()["error"])
        )
        history = await client.get(
            "/events",
            headers={"Last-Event-ID": str(newest + 5), "Accept": "application/json"},
        )
        assert history.status_code == 409
        # ``?after=`` is the same resume point, as a query (the status page's stream and
        # a history poller use it): the same silent stall, the same answer.
        for accept in ("text/event-stream", "application/json"):
            query = await client.get(f"/events?after={newest + 5}", headers={"Accept": accept})
            assert query.status_code == 409, (accept, query.text)
            assert (
                f"after {newest + 5} is past the newest event ({newest})" in (query.json()["error"])
            )
        # At the newest event exactly is no resume past it: history is empty, not refused.
        caught_up = await client.get(
            f"/events?after={newest}", headers={"Accept": "application/json"}
        )
        assert caught_up.status_code == 200 and caught_up.json() == []

    run(tmp_path, scenario)


def test_without_a_token_a_rebound_dns_name_is_refused(tmp_path: Path) -> None:
    """DNS rebinding: a page on ``evil.example:PORT`` rebound to 127.0.0.1 is same-origin to
    itself and may send JSON, but its requests carry its own name as ``Host``."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        host = f"evil.example:{client.base_url.port}"
        rebound = {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
        answer = await client.post(
            "/webhooks", json={"url": "http://evil.example/collect"}, headers=rebound
        )
        assert answer.status_code == 403, answer.text
        assert "Host" in answer.json()["error"]
        assert runtime.registry.list() == []
        # Every name the listener accepts as loopback to bind (settings), so a client
        # writing the address it was given is served: 127.1 and 2130706433 were refused.
        for name in ("localhost", "LocalHost", "127.0.0.1", "[::1]", "127.1", "2130706433"):
            loopback = {"Host": f"{name}:{client.base_url.port}"}
            webhook = {"url": "http://127.0.0.1:9/hook", "mode": "async"}
            answer = await client.post("/webhooks", json=webhook, headers=loopback)
            assert answer.status_code == 201, (name, answer.text)
        for name in ("10.1", "127.0.0.1 evil", "[::ffff:10.0.0.1]", "localhost.evil.example"):
            elsewhere = {"Host": f"{name}:{client.base_url.port}"}
            webhook = {"url": "http://127.0.0.1:9/other", "mode": "async"}
            answer = await client.post("/webhooks", json=webhook, headers=elsewhere)
            assert answer.status_code == 403, (name, answer.text)

    run(tmp_path, scenario)


def test_a_malformed_origin_is_refused_not_a_500(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        for path, body in (("/webhooks", {"url": "http://127.0.0.1:9/x"}), ("/commit", COMMIT)):
            answer = await client.post(path, json=body, headers={"Origin": "http://["})
            assert answer.status_code == 403, (path, answer.status_code, answer.text)
            assert answer.json()["error"]

    run(tmp_path, scenario)


def test_a_malformed_origin_on_the_admin_drain_is_refused_not_a_500(tmp_path: Path) -> None:
    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        answer = await client.get("/drain", headers={"Origin": "http://["})
        assert answer.status_code == 403, answer.text

    run(tmp_path, scenario, admin=True)


def test_a_command_taken_but_not_finished_is_a_504_never_said_not_run(tmp_path: Path) -> None:
    """The member took the commit and is still running it when the caller's deadline passes:
    telling the caller "it was not run" would be false (it may still commit)."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        taken: list[Any] = []
        done = threading.Event()

        def hold() -> None:  # takes every command, answers none of them
            while not done.wait(0.01):
                taken.extend(runtime.handoff.take_commands())

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        try:
            answer = await client.post("/commit", json=COMMIT)
        finally:
            done.set()
            holder.join(5)
        assert taken, "the member did not take the command"
        assert answer.status_code == 504, answer.text
        assert "not run" not in answer.json()["error"]
        assert "still running" in answer.json()["error"]

    run(tmp_path, scenario)


def test_a_journal_the_api_cannot_write_is_a_503_not_a_500(tmp_path: Path) -> None:
    """The disk under the journal fails (here: SQLite refuses writes, as on a read-only
    or failed volume): a webhook registration is a 503 that says so, with Retry-After;
    nothing half-registered; reads still answer."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        db = runtime.journal._db
        runtime.journal._db = sqlite3.connect(
            f"file:{runtime.journal.path}?mode=ro", uri=True, isolation_level=None
        )
        try:
            answer = await client.post("/webhooks", json={"url": "http://127.0.0.1:9/hook"})
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["error"].startswith("the journal failed: ")
            assert "readonly database" in answer.json()["error"]
            listed = await client.get("/webhooks")
            assert listed.status_code == 200 and listed.json() == []
        finally:
            runtime.journal._db.close()
            runtime.journal._db = db

    run(tmp_path, scenario)


def test_an_event_stream_whose_journal_fails_ends_cleanly(tmp_path: Path) -> None:
    """Mid-stream the response has started: no status can say the journal failed, so the
    stream ends (one log line; the client resumes from ``Last-Event-ID``), rather than
    an exception escaping into the server."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        db = runtime.journal._db
        # A database without the journal's tables: every read is an OperationalError.
        runtime.journal._db = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
        try:
            listener = runtime.feed.open()
            frames = [frame async for frame in events_web._stream(runtime, 0, [], listener)]
            runtime.feed.close(listener)
        finally:
            runtime.journal._db.close()
            runtime.journal._db = db
        assert frames == []

    run(tmp_path, scenario)


@contextlib.contextmanager
def _journal_not_a_database(runtime: InProcess, tmp_path: Path) -> Iterator[None]:
    """The API's journal reads a file that is not a database (SQLITE_NOTADB) meanwhile."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not an SQLite database file, not at all" * 100)
    db = runtime.journal._db
    runtime.journal._db = sqlite3.connect(garbage, isolation_level=None)
    try:
        yield
    finally:
        runtime.journal._db.close()
        runtime.journal._db = db


def test_a_journal_that_cannot_be_read_is_a_503_for_events_before_any_stream(
    tmp_path: Path,
) -> None:
    """The history is read before the response starts: a journal SQLite cannot read
    (here a file that is not a database: SQLITE_NOTADB) is a 503 for the JSON history and
    for an SSE stream alike, not an empty stream the client would reconnect to forever."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        with _journal_not_a_database(runtime, tmp_path):
            for headers in (
                {"Accept": "application/json"},
                {"Accept": "text/event-stream", "Last-Event-ID": "0"},
            ):
                answer = await client.get("/events", headers=headers)
                assert answer.status_code == 503, (headers, answer.text)
                assert answer.json()["error"].startswith("the journal failed: ")

    run(tmp_path, scenario)


def test_metrics_still_answer_while_the_journal_cannot_be_read(tmp_path: Path) -> None:
    """A scrape while the journal's storage fails (here a file that is not a database:
    SQLITE_NOTADB) still answers 200 with every other metric, the journal's pending
    events left out (absent, for an ``absent()`` alert), not a 503 that hides all of
    them at the moment they matter; once the journal reads again, the series is back."""

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        with _journal_not_a_database(runtime, tmp_path):
            answer = await client.get("/metrics")
        assert answer.status_code == 200, answer.text
        assert "rebalance_sidecar_member_state" in answer.text
        assert "rebalance_sidecar_journal_pending_events" not in answer.text
        assert "rebalance_sidecar_journal_used_bytes" not in answer.text
        again = await client.get("/metrics")
        assert "rebalance_sidecar_journal_pending_events 0.0" in again.text
        assert "rebalance_sidecar_journal_used_bytes " in again.text

    run(tmp_path, scenario)


def test_only_storage_failures_of_sqlite_are_the_journals_503(tmp_path: Path) -> None:
    from sidecar.journal import storage_failed

    path = tmp_path / "a.db"
    sqlite3.connect(path, isolation_level=None).execute("CREATE TABLE t (x)").connection.close()
    readonly = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as written:
            readonly.execute("INSERT INTO t VALUES (1)")
        assert storage_failed(written.value)  # SQLITE_READONLY: the volume, a 503
        with pytest.raises(sqlite3.OperationalError) as misused:
            readonly.execute("SELECT * FROM nothing_here")
        assert not storage_failed(misused.value)  # SQLITE_ERROR: a bug, stays a 500
    finally:
        readonly.close()


def test_webhooks_past_the_limit_are_refused_until_one_is_deleted(tmp_path: Path) -> None:
    """An application that registers a webhook on every start and never deletes (a crash
    loop) added a courier, a connection and a retention hold each time, without end."""
    hook = {"url": "http://127.0.0.1:9/hook", "mode": "async"}

    def declared(count: int) -> list[WebhookSpec]:
        secret = SecretStr(new_secret())
        return [
            WebhookSpec(url=f"http://127.0.0.1:9/declared-{i}", mode="async", secret=secret)
            for i in range(count)
        ]

    async def scenario(runtime: InProcess, client: httpx.AsyncClient) -> None:
        runtime.registry.declare(declared(1))
        first = await client.post("/webhooks", json=hook)
        assert first.status_code == 201, first.text
        refused = await client.post("/webhooks", json=hook)
        assert refused.status_code == 409, refused.text
        assert "there are 2 webhooks already" in refused.json()["error"]
        assert "SIDECAR_WEBHOOK_MAX_COUNT" in refused.json()["error"]
        assert len((await client.get("/webhooks")).json()) == 2  # nothing half-created
        # Declared webhooks count, but settings are the operator's: never refused.
        assert len(runtime.registry.declare(declared(2))) == 2
        assert (await client.delete(f"/webhooks/{first.json()['id']}")).status_code == 204
        assert (await client.post("/webhooks", json=hook)).status_code == 409  # 2 declared
        runtime.registry.declare(declared(1))
        assert (await client.post("/webhooks", json=hook)).status_code == 201
        # Full again. A bad URL is still a 422 (what is wrong with it), not the limit.
        bad = await client.post("/webhooks", json={**hook, "url": "ftp://127.0.0.1/x"})
        assert bad.status_code == 422, bad.text
        # One disabled by a 410 delivers nothing and holds nothing: it does not count.
        (api_hook,) = [s for s in runtime.registry.list() if s.origin == "api"]
        runtime.journal.disable(api_hook.id, "410 Gone from the app")
        assert (await client.post("/webhooks", json=hook)).status_code == 201

    run(tmp_path, scenario, webhook_max_count=2)


def test_a_router_with_a_prefix_is_refused_rather_than_served_head_wrongly() -> None:
    """HEAD matching uses the routers' own routes, whose paths do not carry a prefix."""
    with pytest.raises(ValueError, match="prefix"):
        api_module.get_only_routes([APIRouter(prefix="/v1")])


def test_whole_numbers_in_bodies_are_json_schema_integers_and_exact() -> None:
    """5.0 is 5 (JSON Schema's integer); true, "5" and a float too large to be exact are
    refused; and the OpenAPI keeps generation_id's bounds as minimum and maximum (on the
    optional field they came out as "ge"/"le", which no JSON Schema client reads)."""
    from pydantic import ValidationError

    from sidecar.schemas import CommitIn, OffsetIn

    one = {"topic": "t", "partition": 0}
    assert OffsetIn.model_validate({**one, "offset": 5.0}).offset == 5
    for bad, says in (
        (True, "not a boolean"),
        ("5", "not a boolean or a string"),
        (9007199254740993.0, "without a fraction or an exponent"),
        (1e17, "without a fraction or an exponent"),
        (5.5, "fractional part"),
    ):
        with pytest.raises(ValidationError, match=says):
            OffsetIn.model_validate({**one, "offset": bad})
    body = {"offsets": [{**one, "offset": 1}]}
    assert CommitIn.model_validate({**body, "generation_id": 7.0}).generation_id == 7
    with pytest.raises(ValidationError):
        CommitIn.model_validate({**body, "generation_id": -2})
    schema = CommitIn.model_json_schema()
    (number, _null) = schema["properties"]["generation_id"]["anyOf"]
    assert (number["minimum"], number["maximum"]) == (-1, 2**31 - 1)
    assert "ge" not in number and "le" not in number
