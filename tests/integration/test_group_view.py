"""``GET /group`` against a real broker: the coordinator's view, checked against Kafka's CLI.

The group mixes a sidecar with clients that are not sidecars: a plain confluent-kafka
consumer on a thread and a Java console consumer from the broker's own jars. ``/group``
must list every one of them exactly as ``kafka-consumer-groups --describe --members
--verbose`` does.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from sidecar.handoff import Handoff
from sidecar.model import Assignment, MemberState
from sidecar.positions import PositionsView
from sidecar.settings import Settings
from sidecar.web.group import GroupView
from tests.support.java_members import consumer_groups_cli, java_consumer
from tests.support.members import PlainConsumer, plain_consumers
from tests.support.sidecars import Sidecar, wait_until

pytestmark = pytest.mark.kafka
__all__ = ["java_consumer", "plain_consumers"]  # fixtures

PARTITIONS = 6


def cli_assignment(cell: str) -> list[tuple[str, int]]:
    """``topic:0,1,2`` (several topics: one such run each) or ``-`` -> sorted pairs."""
    return sorted(
        (topic, int(n))
        for topic, numbers in re.findall(r"([A-Za-z0-9._-]+):([0-9,]+)", cell)
        for n in numbers.split(",")
        if n
    )


def view_of(group: dict[str, Any]) -> dict[str, tuple[str, str, list[tuple[str, int]]]]:
    return {
        m["member_id"]: (
            m["client_id"],
            m["host"],
            sorted((p["topic"], p["partition"]) for p in m["assignment"]),
        )
        for m in group["members"]
    }


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_lists_every_member_as_kafka_consumer_groups_does(
    protocol: str,
    kafka_bootstrap: str,
    sidecar_factory: Callable[..., Sidecar],
    topic_factory: Callable[[int], str],
    group_id: str,
    plain_consumers: list[PlainConsumer],
    java_consumer: Callable[[str, str, str, str, str], None],
) -> None:
    topic = topic_factory(PARTITIONS)
    sidecar = sidecar_factory(
        group_id, topic, protocol=protocol, strategy="range" if protocol == "classic" else None
    )
    plain = PlainConsumer(kafka_bootstrap, group_id, topic, "plain-python", protocol)
    plain.start()
    plain_consumers.append(plain)
    java_consumer(kafka_bootstrap, group_id, topic, "java-console", protocol)

    def settled() -> bool:
        group = sidecar.client.get("/group").json()
        clients = sorted(m["client_id"] for m in group.get("members", []))
        owned = sorted(p["partition"] for m in group.get("members", []) for p in m["assignment"])
        return (
            group.get("state") == "stable"
            and len(clients) == 3
            and "java-console" in clients
            and "plain-python" in clients
            and owned == list(range(PARTITIONS))
        )

    wait_until(settled, 120, "three members sharing every partition in /group")
    sidecar.wait_stable()

    # A rebalance may slip between the two reads: compare until one pair of reads agrees.
    cli: dict[str, tuple[str, str, list[tuple[str, int]]]] = {}
    ours: dict[str, tuple[str, str, list[tuple[str, int]]]] = {}
    group: dict[str, Any] = {}
    state_rows: list[dict[str, str]] = []
    for _ in range(5):
        rows = consumer_groups_cli(
            kafka_bootstrap, "--describe", "--members", "--verbose", "--group", group_id
        )
        cli = {
            r["CONSUMER-ID"]: (r["CLIENT-ID"], r["HOST"], cli_assignment(r["CURRENT-ASSIGNMENT"]))
            for r in rows
        }
        state_rows = consumer_groups_cli(
            kafka_bootstrap, "--describe", "--state", "--group", group_id
        )
        time.sleep(2.1)  # past /group's cache, so the next read is a fresh DescribeGroups
        group = sidecar.client.get("/group").json()
        ours = view_of(group)
        if ours == cli:
            break
    assert ours == cli
    assert len(ours) == 3
    assert sorted(client for client, _, _ in ours.values()) == sorted(
        ["java-console", "plain-python", "rdkafka"]
    )
    (state,) = state_rows
    assert group["state"] == state["STATE"].lower()
    assert group["partition_assignor"] == state["ASSIGNMENT-STRATEGY"]
    assert group["type"] == protocol
    assert group["coordinator"]["port"] == int(kafka_bootstrap.rsplit(":", 1)[1])

    # This sidecar's own membership is flagged, and its generation is its own.
    me = sidecar.assignment()
    mine = [m for m in group["members"] if m["this_member"]]
    assert [m["member_id"] for m in mine] == [me["member_id"]]
    assert group["member_id"] == me["member_id"]
    assert group["generation_id"] >= 1
    # The grid: every partition once, owned as the members say.
    assert [(p["topic"], p["partition"]) for p in group["partitions"]] == [
        (topic, p) for p in range(PARTITIONS)
    ]
    owner = {(p["topic"], p["partition"]): p["owner"] for p in group["partitions"]}
    for member_id, (_, _, owned) in ours.items():
        assert all(owner[tp] == member_id for tp in owned)


def test_group_is_in_the_openapi_with_its_model(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    sidecar = sidecar_factory(group_id, topic_factory(1))
    spec = sidecar.client.get("/openapi.json").json()
    answers = spec["paths"]["/group"]["get"]["responses"]
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/GroupOut")
    assert "503" in answers
    fields = spec["components"]["schemas"]["GroupOut"]["properties"]
    assert {"members", "state", "type", "partition_assignor", "generation_id"} <= set(fields)


def test_group_is_503_json_when_kafka_cannot_be_reached(tmp_path: Path) -> None:
    sidecar = Sidecar("127.0.0.1:9", "nowhere", "t", tmp_path / "s", name="unreachable")
    try:
        sidecar.start()
        response = sidecar.client.get("/group")
        assert response.status_code == 503
        assert "cannot describe group 'nowhere'" in response.json()["error"]
    finally:
        sidecar.stop()


class CountingAdmin(AdminClient):
    """A real AdminClient that records where and how often it describes groups."""

    calls: list[str]

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.calls = []

    def describe_consumer_groups(  # type: ignore[override]
        self, group_ids: list[str], **kwargs: Any
    ) -> Any:
        self.calls.append(threading.current_thread().name)
        return super().describe_consumer_groups(group_ids, **kwargs)


class Source:
    def __init__(self, settings: Settings, handoff: Handoff) -> None:
        self.settings = settings
        self.handoff = handoff
        self.positions = PositionsView(settings, lambda: handoff.snapshot)


def test_group_view_reads_off_the_loop_and_shares_one_read(
    kafka_bootstrap: str, topic_factory: Callable[[int], str], group_id: str
) -> None:
    topic = topic_factory(2)
    admins: list[CountingAdmin] = []

    def factory(config: dict[str, Any]) -> CountingAdmin:
        admins.append(CountingAdmin(config))
        return admins[-1]

    async def scenario() -> list[dict[str, Any]]:
        settings = Settings(bootstrap_servers=kafka_bootstrap, group_id=group_id, topics=(topic,))
        initial = Assignment(group_id, None, None, -1, "eager", MemberState.STARTING, (), 0)
        source = Source(settings, Handoff(asyncio.get_running_loop(), initial))
        view = GroupView(source, ttl=3600, admin_factory=factory)
        together = await asyncio.gather(*(view.describe() for _ in range(8)))
        again = await view.describe()
        return [*together, again]

    answers = asyncio.run(scenario())
    (admin,) = admins
    assert len(admin.calls) == 1  # eight concurrent requests and a later one: one read
    assert admin.calls[0] != threading.main_thread().name  # not on the event loop's thread
    assert {a["described_at"] for a in answers} == {answers[0]["described_at"]}
    assert answers[0]["members"] == []  # nobody joined this group
    assert answers[0]["state"] == "dead"
    assert [p["partition"] for p in answers[0]["partitions"]] == [0, 1]
