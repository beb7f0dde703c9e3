"""The status page at ``/`` in a real headless Chromium, against a real broker.

The group holds a sidecar and a plain confluent-kafka consumer; the sidecar has a token,
a healthy blocking webhook and one that always answers 500. The page must show the
partitions this sidecar owns, put an enforced rebalance on its timeline without a reload,
and show the failing webhook as failing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.journal import FILE_NAME
from sidecar.subscriptions import new_secret
from tests.support.browser import chromium
from tests.support.members import PlainConsumer, plain_consumers
from tests.support.receiver import Receiver, accept
from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka
__all__ = ["plain_consumers"]  # a fixture

PARTITIONS = 4
TOKEN = "page-test-token"
MINE = ".cell[data-mine='true']"


def always_500(event: dict[str, object]) -> tuple[int, object, float]:
    return 500, {"error": "this receiver always fails"}, 0.0


def test_status_page_shows_the_group_live(
    kafka_bootstrap: str,
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    plain_consumers: list[PlainConsumer],
) -> None:
    topic = topic_factory(PARTITIONS)
    good_secret, bad_secret = new_secret(), new_secret()
    good = Receiver(good_secret, accept).start()
    bad = Receiver(bad_secret, always_500).start()
    try:
        sidecar = sidecar_factory(
            group_id,
            topic,
            token=TOKEN,
            extra_env={
                "SIDECAR_WEBHOOK_BACKOFF_INITIAL_MS": "200",
                "SIDECAR_WEBHOOK_BACKOFF_MAX_MS": "1000",
            },
            webhooks=[
                {"url": good.url, "secret": good_secret, "mode": "blocking"},
                {"url": bad.url, "secret": bad_secret, "mode": "async"},
            ],
        )
        plain = PlainConsumer(kafka_bootstrap, group_id, topic, "plain-python")
        plain.start()
        plain_consumers.append(plain)
        wait_until(
            lambda: (
                sidecar.assignment()["state"] == "stable"
                and 0 < len(sidecar.partitions()) < PARTITIONS
            ),
            90,
            "the sidecar stable with a share of the partitions",
        )
        hooks = {h["url"]: h["id"] for h in sidecar.client.get("/webhooks").json()}

        with chromium() as page:
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{sidecar.port}/")
            page.evaluate("window.__sameDocument = true")

            # The grid: every partition of the group, this sidecar's highlighted.
            page.wait_for_function(
                f"""expected => {{
                    const mine = [...document.querySelectorAll("{MINE}")]
                        .map(c => c.dataset.topic + "/" + c.dataset.partition).sort();
                    const all = document.querySelectorAll(".cell[data-owner]:not([data-owner=''])");
                    return all.length === {PARTITIONS} && mine.join() === expected.join();
                }}""",
                arg=sorted(f"{t}/{p}" for t, p in sidecar.partitions()),
            )
            assert page.locator("#members tbody tr").count() == 2
            assert "plain-python" in page.locator("#members").inner_text()
            assert page.locator("#member-state").get_attribute("data-state") == "stable"
            before = sidecar.assignment()["generation_id"]
            assert page.locator("#member-generation").inner_text() == str(before)

            # Enforce without the token: refused, and the page says why.
            page.click("#enforce")
            page.wait_for_function(
                "() => document.querySelector('#action-result').textContent"
                ".includes('token is required')"
            )
            # With the token: the rebalance reaches the timeline over SSE, no reload.
            page.fill("#token", TOKEN)
            page.fill("#reason", "from the page test")
            page.click("#enforce")
            page.wait_for_function(
                "() => document.querySelector('#action-result').textContent"
                ".startsWith('Rebalance requested')"
            )
            page.wait_for_function(
                """before => [...document.querySelectorAll(
                        "#timeline li.event[data-type='kafka.partitions.assigned']")]
                    .some(li => Number(li.dataset.generation) > before)""",
                arg=before,
            )
            assert (
                page.locator("#timeline li.event[data-type='kafka.rebalance.requested']").count()
                + page.locator("#timeline li.event[data-type='kafka.partitions.revoked']").count()
                >= 1
            )
            assert page.evaluate("window.__sameDocument") is True
            after = int(page.locator("#member-generation").inner_text())
            assert after > before

            # Webhook health: the 500 one is failing, the other healthy.
            page.wait_for_selector(
                f"#webhooks tr[data-webhook-id='{hooks[bad.url]}'][data-health='failing']"
            )
            page.wait_for_selector(
                f"#webhooks tr[data-webhook-id='{hooks[good.url]}'][data-health='healthy']"
            )
            failing_row = page.locator(f"#webhooks tr[data-webhook-id='{hooks[bad.url]}']")
            assert "500" in failing_row.inner_text()
            assert int(failing_row.locator("td.num").first.inner_text()) >= 1

            # Drain from the page (two clicks): the member leaves and the page shows it.
            page.click("#drain")
            page.click("#drain")
            page.wait_for_function(
                "() => document.querySelector('#member-state').dataset.state === 'stopped'"
            )
            assert "Drained" in page.locator("#action-result").inner_text()
            assert page.evaluate("window.__sameDocument") is True
    finally:
        good.stop()
        bad.stop()


def test_status_page_says_when_the_coordinator_cannot_be_asked(tmp_path: Path) -> None:
    sidecar = Sidecar("127.0.0.1:9", "nowhere", "t", tmp_path / "s", name="unreachable")
    try:
        sidecar.start()
        with chromium() as page:
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{sidecar.port}/")
            error = page.locator("#group-error")
            error.wait_for(state="visible")
            assert "cannot describe group 'nowhere'" in error.inner_text()
            assert "this member's assignment only" in error.inner_text()
            assert page.locator("#group-id").inner_text() == "nowhere"
            assert page.locator("#webhooks-empty").is_visible()
    finally:
        sidecar.stop()


def test_the_page_starts_over_when_the_sidecar_comes_back_with_another_journal(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    """The page's event stream resumes with the last sequence it saw. A sidecar back with
    another journal (an emptied data directory: numbering restarted) answers that resume
    with 409, and the browser closes the stream for good: the page said "reconnecting…"
    for ever. It reloads instead, and is live on the new journal."""
    topic = topic_factory(PARTITIONS)
    sidecar = sidecar_factory(group_id, topic)
    wait_until(lambda: sidecar.assignment()["state"] == "stable", 90, "the sidecar stable")
    for _ in range(3):  # a few more events, so the page's last sequence is well ahead
        answer = sidecar.client.post("/enforce-rebalance", params={"wait": 30})
        assert answer.status_code == 200, answer.text
    seen = int(sidecar.assignment()["sequence"])
    assert seen >= 7
    with chromium() as page:
        page.set_default_timeout(60_000)
        page.goto(f"http://127.0.0.1:{sidecar.port}/")
        page.wait_for_function("() => document.querySelector('#live').textContent === 'live'")
        page.evaluate("window.__sameDocument = true")

        assert sidecar.terminate(timeout=30) == 0
        for name in (FILE_NAME, f"{FILE_NAME}-wal", f"{FILE_NAME}-shm"):
            (sidecar.data_dir / name).unlink(missing_ok=True)
        sidecar.start()
        wait_until(lambda: sidecar.assignment()["state"] == "stable", 90, "stable again")
        assert int(sidecar.assignment()["sequence"]) < seen  # another journal

        page.wait_for_function(
            "() => window.__sameDocument === undefined"
            " && document.querySelector('#live').textContent === 'live'"
        )
        assert page.locator("#timeline li.event").count() >= 1


def test_the_page_backs_off_while_the_sidecar_serves_no_more_streams(
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
) -> None:
    """At ``SIDECAR_EVENT_STREAMS_MAX`` the page's stream is a 503, which closes it for
    good; the page reloads to start over, waiting twice as long each time (it reloaded
    every 2 s), and is live once a place is free, its back-off forgotten."""
    topic = topic_factory(PARTITIONS)
    sidecar = sidecar_factory(group_id, topic, extra_env={"SIDECAR_EVENT_STREAMS_MAX": "1"})
    wait_until(lambda: sidecar.assignment()["state"] == "stable", 90, "the sidecar stable")
    held = socket.create_connection(("127.0.0.1", sidecar.port), timeout=30)
    try:
        held.sendall(
            b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
        )
        assert held.recv(65536).startswith(b"HTTP/1.1 200")
        with chromium() as page:
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{sidecar.port}/")
            delay = "() => Number(sessionStorage.getItem('rebalance-sidecar.reloadDelay'))"
            page.wait_for_function(f"() => ({delay})() >= 8000")  # 2, 4, then 8 s
            assert page.locator("#live").text_content() == "reconnecting…"
            held.close()
            page.wait_for_function("() => document.querySelector('#live').textContent === 'live'")
            assert page.evaluate(delay) == 0
    finally:
        held.close()
