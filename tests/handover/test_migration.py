"""A rolling migration of a live group from the classic protocol to KIP-848 and back.

Records are produced continuously while a fleet of reference apps, each with its
rebalance-sidecar, is restarted one member at a time under the other group protocol
(``SIDECAR_GROUP_PROTOCOL``): classic to ``consumer``, then back. The broker converts the
group online (``group.consumer.migration.policy``, ``bidirectional`` by default since
Kafka 4.0): the first KIP-848 member turns the classic group into a consumer group whose
classic members keep their protocol, and the last KIP-848 member to leave turns it back.
Counted from what the apps record, as in ``test_handover.py``: every record's effect
reached the store exactly once, and every old owner flushed before the new owner started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from bench.handover.members import GO_APP
from bench.handover.run import run_handover
from tests.support.handover import assert_clean_handovers

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEPS = ["to_consumer", "to_consumer", "to_classic", "to_classic"]


def contenders() -> list[str]:
    if not GO_APP.exists():
        pytest.fail(f"{GO_APP} is missing: build it with scripts/build-go-app.sh")
    return ["python", "go"]


def _migration_policy(admin: AdminClient) -> str:
    brokers = admin.list_topics(timeout=10).brokers
    resource = ConfigResource("BROKER", str(next(iter(brokers))))
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return str(configs["group.consumer.migration.policy"].value)


@pytest.mark.timeout(420)
def test_a_rolling_migration_to_kip848_and_back_loses_nothing_and_counts_nothing_twice(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    policy = _migration_policy(admin)
    if policy.lower() != "bidirectional":
        pytest.fail(f"the broker's group.consumer.migration.policy is {policy}, not bidirectional")
    types: dict[str, list[str]] = {}

    def group_types(step: str, groups: list[str]) -> None:
        for group, future in admin.describe_consumer_groups(groups).items():
            kind = future.result(timeout=30).type
            types.setdefault(group, []).append(f"{step}:{ConsumerGroupType(kind).name}")

    results = run_handover(
        kafka_bootstrap,
        tmp_path,
        contenders(),
        steps=STEPS,
        members=2,
        rate=200.0,
        step_seconds=5.0,
        footprint_seconds=1.0,
        say=print,
        after_step=group_types,
    )
    for group, seen in types.items():
        # Mixed after one member, KIP-848 after both, converted back at the end.
        assert seen[0].endswith("CONSUMER") and seen[1].endswith("CONSUMER"), (group, seen)
        assert seen[3].endswith("CLASSIC"), (group, seen)
    assert_clean_handovers(results)
