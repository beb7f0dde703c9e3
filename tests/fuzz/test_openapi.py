"""Fuzz the HTTP API from its own OpenAPI document (schemathesis) against a real sidecar.

The sidecar is a real subprocess in a real group (the session's broker). Every operation
gets schema-valid and schema-violating requests (bounded: ``EXAMPLES`` per operation),
with a valid token so the requests reach the handlers. Checked on every answer: no 5xx,
the status code is documented, the content type is documented, the body matches the
documented schema, and the process is still alive and live afterwards.

Long-polls are clamped (``wait`` <= 1 s) so a generated ``wait=300`` costs no minutes;
``GET /events`` is asked for JSON history (the SSE stream never ends by design).
``POST /drain`` leaves the group, so it is fuzzed on a sidecar of its own: the tests
run in any order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sidecar.subscriptions import new_secret
from tests.support.kafka import create_topic, unique
from tests.support.receiver import Receiver
from tests.support.sidecars import Sidecar

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOKEN = "fuzz-token"
EXAMPLES = 40
CLAMPED = {"wait": 1.0, "deadline": 5.0}


def documented_status(ctx: Any, response: Any, case: Any) -> bool | None:
    """``status_code_conformance``: every status the sidecar answers is documented."""
    result: bool | None = status_code_conformance(ctx, response, case)
    return result


def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """No 500, and no 5xx the operation does not document.

    The contract has two deliberate 5xx: ``504`` from ``POST /enforce-rebalance?wait=``
    when no new generation became stable in time, ``503`` from ``POST /commit`` when
    Kafka refused the commit. Those are answers, not server errors.
    """
    documented = {str(code) for code in case.operation.responses.status_codes}
    if response.status_code == 500 or (
        response.status_code >= 500 and str(response.status_code) not in documented
    ):
        result: bool | None = not_a_server_error(ctx, response, case)
        return result
    return None


CHECKS = [
    no_server_error,
    documented_status,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@contextlib.contextmanager
def fuzz_target(kafka_bootstrap: str, data_dir: Path, name: str) -> Iterator[Sidecar]:
    """A sidecar in a real group, with a declared webhook (id ``app``) to a live receiver."""
    secret = new_secret()
    receiver = Receiver(secret).start()
    topic = create_topic(kafka_bootstrap, 2)
    sidecar = Sidecar(
        kafka_bootstrap,
        unique("fuzz"),
        topic,
        data_dir,
        token=TOKEN,
        name=name,
        webhooks=[{"url": receiver.url, "secret": secret, "mode": "async", "id": "app"}],
        extra_env={"SIDECAR_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"},
    ).start()
    try:
        sidecar.wait_stable()
        yield sidecar
    finally:
        sidecar.stop()
        receiver.stop()
        print(f"---- {name} sidecar log ----\n{sidecar.logs()[-3000:]}")


@pytest.fixture(scope="module")
def fuzzed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    """The sidecar every operation but ``POST /drain`` is fuzzed against."""
    with fuzz_target(kafka_bootstrap, tmp_path_factory.mktemp("fuzz"), "fuzzed") as sidecar:
        yield sidecar


@pytest.fixture
def to_drain(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Sidecar]:
    """A sidecar of its own for ``POST /drain``: leaving the group is final, so no other
    test shares it and the order the tests run in does not matter."""
    with fuzz_target(kafka_bootstrap, tmp_path / "drain", "drained") as sidecar:
        yield sidecar


@pytest.fixture(scope="module")
def api_schema(fuzzed: Sidecar) -> Any:
    return schemathesis.openapi.from_url(f"http://127.0.0.1:{fuzzed.port}/openapi.json")


def operations(api_schema: Any, drain: bool) -> list[Any]:
    found = [result.ok() for result in api_schema.get_all_operations()]
    return [op for op in found if (op.path == "/drain") == drain]


def fuzz(operation: Any, mode: GenerationMode, fuzzed: Sidecar) -> None:
    """Hypothesis over one operation: ``EXAMPLES`` cases, each sent and checked."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time
    )
    def run(case: Any) -> None:
        call(case, fuzzed)

    try:
        run()
    except Unsatisfiable:
        # Nothing in the operation can be made invalid (e.g. GET /metrics has no input).
        if mode is not GenerationMode.NEGATIVE:
            raise


def call(case: Any, fuzzed: Sidecar) -> None:
    for name, bound in CLAMPED.items():
        value = (case.query or {}).get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
            case.query[name] = bound
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if case.path == "/events":
        headers["Accept"] = "application/json"
    case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)
    alive(fuzzed)


def alive(sidecar: Sidecar) -> None:
    assert sidecar.running, f"the sidecar exited:\n{sidecar.logs()}"
    assert sidecar.client.get("/healthz").status_code == 200


@pytest.mark.parametrize("mode", list(GenerationMode), ids=str)
def test_every_operation(mode: GenerationMode, api_schema: Any, fuzzed: Sidecar) -> None:
    tested = operations(api_schema, drain=False)
    assert len(tested) >= 10  # the whole API, not an empty schema
    for operation in tested:
        fuzz(operation, mode, fuzzed)


# -- headers and query strings beyond the schema -------------------------------------------

_HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=40,
)
# Digits of every script, signs, exponents, huge numbers: what int() or SQLite may choke on.
_NUMBERISH = st.one_of(
    st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=25),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["1e3", "0x10", " 7", "7 ", "+1", "-0", "nan", "inf", "1_000", "²", ""]),
    _HEADER_TEXT,
)
_HEADER_NAMES = st.sampled_from(
    [
        "Last-Event-ID",
        "Accept",
        "Content-Type",
        "Authorization",
        "Origin",
        "Sec-Fetch-Site",
        "X-Drain-Token",
        "Host",
    ]
)
_QUERY_NAMES = st.sampled_from(["after", "wait", "limit", "deadline", "reason", "x"])
_PATHS = [
    ("GET", "/assignment"),
    ("GET", "/events"),
    ("GET", "/webhooks"),
    ("GET", "/webhooks/app"),
    ("GET", "/webhooks/app/deliveries"),
    ("POST", "/commit"),
    ("POST", "/enforce-rebalance"),
    ("POST", "/webhooks"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]


@given(
    target=st.sampled_from(_PATHS),
    headers=st.dictionaries(_HEADER_NAMES, st.one_of(_NUMBERISH, _HEADER_TEXT), max_size=4),
    query=st.dictionaries(_QUERY_NAMES, _NUMBERISH, max_size=3),
)
@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)
def test_any_header_or_query_string_gets_an_answer_not_a_500(
    fuzzed: Sidecar, target: tuple[str, str], headers: dict[str, str], query: dict[str, str]
) -> None:
    method, path = target
    sent = [(k.encode(), v.strip().encode()) for k, v in headers.items()]  # UTF-8 bytes
    if path == "/events" and "Accept" not in headers:
        sent.append((b"Accept", b"application/json"))  # the stream never ends by design
    if "wait" in query or "deadline" in query:
        query = {k: v for k, v in query.items() if k not in ("wait", "deadline")}
    try:
        response = fuzzed.client.request(
            method, path, headers=sent, params=query, timeout=httpx.Timeout(10, read=3)
        )
    except httpx.ReadTimeout:
        return  # an SSE stream that was asked for: open and idle, as it should be
    assert response.status_code < 500 or response.status_code == 503, (
        method,
        path,
        headers,
        query,
        response.status_code,
        response.text[:300],
    )
    if response.status_code >= 400:
        body = response.json()
        assert "error" in body or path == "/readyz", response.text[:300]


def test_drain(to_drain: Sidecar) -> None:
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{to_drain.port}/openapi.json")
    for mode in GenerationMode:
        for operation in operations(schema, drain=True):
            fuzz(operation, mode, to_drain)
    survived(to_drain)


def test_the_sidecar_survived_and_logged_no_exception(fuzzed: Sidecar) -> None:
    survived(fuzzed)


def survived(sidecar: Sidecar) -> None:
    alive(sidecar)
    log = Path(sidecar.log_path).read_text()
    assert "Traceback" not in log
    assert '"exception"' not in log


def test_an_undecodable_body_gets_a_documented_status(fuzzed: Sidecar) -> None:
    documented = httpx.get(f"http://127.0.0.1:{fuzzed.port}/openapi.json").json()
    statuses = set(documented["paths"]["/commit"]["post"]["responses"])
    response = fuzzed.client.post(
        "/commit",
        content=b"\xff\xfe{",
        headers={"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    assert 400 <= response.status_code < 500
    assert str(response.status_code) in statuses, (response.status_code, sorted(statuses))
