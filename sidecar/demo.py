"""``rebalance-sidecar demo``: the sidecar against librdkafka's embedded mock cluster.

No Kafka, no Java: a producer instance hosts the mock cluster (``test.mock.num.brokers``)
for as long as it lives; two topics are created by producing to them; the sidecar joins a
group on them; a few simulated peers (plain consumers, each on its own thread) join and
leave on a schedule so ``/assignment`` and ``/events`` keep changing. Demo only: the test
suite uses a real broker.

The group is cooperative (``cooperative-sticky``), not librdkafka's eager default: the
mock cluster's classic group goes straight from Stable to Joining when a member comes or
goes, and answers every OffsetCommit in Joining with ``REBALANCE_IN_PROGRESS``
(``rd_kafka_mock_cgrp_classic_check_state``); a real broker accepts the current
generation's commits until the rebalance completes. An eager member's revoke comes in that
window, so the offsets an application hands back there failed, in the demo only. A
cooperative member revokes after the group is Stable again, and the commit lands.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from sidecar.settings import Settings
from sidecar.web.group import RosterMember, use_roster

TOPICS = ("orders", "payments")
GROUP = "demo-group"
_PEER_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
#: Every member of the group the same: the mock cluster takes the leader's protocol.
STRATEGY = "cooperative-sticky"


class Peer(threading.Thread):
    """A simulated member of the group: joins, holds its partitions, leaves on request."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._servers = bootstrap
        self._leave = threading.Event()
        # Replaced (never mutated) by this thread; read by /group's fallback.
        self.membership: RosterMember | None = None
        self._owned: set[tuple[str, int]] = set()

    def _on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        # Cooperative: the partitions added, not the whole assignment.
        self._owned |= {(tp.topic, tp.partition) for tp in partitions}
        self._publish(consumer)

    def _on_revoke(self, consumer: Consumer, partitions: list[Any]) -> None:
        self._owned -= {(tp.topic, tp.partition) for tp in partitions}
        self._publish(consumer)

    def _on_lost(self, consumer: Consumer, partitions: list[Any]) -> None:
        self._owned.clear()
        self._publish(consumer)

    def _publish(self, consumer: Consumer) -> None:
        owned = tuple(sorted(self._owned))
        self.membership = RosterMember(consumer.memberid() or "?", self.name, owned)

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._servers,
                "group.id": GROUP,
                **_PEER_CONFIG,
                "partition.assignment.strategy": STRATEGY,
                "enable.auto.commit": False,
                "client.id": self.name,
                "log_level": 3,  # a peer's disconnects at the demo's end are no news
            }
        )
        consumer.subscribe(
            list(TOPICS),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        while not self._leave.is_set():
            consumer.poll(0.2)
        self.membership = None
        consumer.close()

    def leave(self) -> None:
        self._leave.set()


class Choreography(threading.Thread):
    """Peers come and go every few seconds, so the sidecar keeps rebalancing."""

    def __init__(self, bootstrap: str, peers: int, period: float = 8.0) -> None:
        super().__init__(name="demo-peers", daemon=True)
        self._servers = bootstrap
        self._target = peers
        self._period = period
        self._stop = threading.Event()
        self._peers: list[Peer] = []
        self._serial = 0

    def _spawn(self) -> None:
        self._serial += 1
        peer = Peer(self._servers, f"peer-{self._serial}")
        peer.start()
        self._peers.append(peer)

    def run(self) -> None:
        for _ in range(self._target):
            self._spawn()
        rng = random.Random(7)
        while not self._stop.wait(self._period):
            if self._peers and (len(self._peers) > self._target or rng.random() < 0.5):
                self._peers.pop(rng.randrange(len(self._peers))).leave()
            else:
                self._spawn()

    def members(self) -> list[RosterMember]:
        """The peers in the group now (the status page's ``/group`` on the mock cluster)."""
        return [m for m in (p.membership for p in list(self._peers)) if m is not None]

    def stop(self) -> None:
        self._stop.set()
        for peer in self._peers:
            peer.leave()
        for peer in self._peers:
            peer.join(timeout=5)


def start_mock_cluster() -> tuple[Producer, str]:
    """A mock cluster lives as long as the client that created it: keep the producer."""
    host = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "", "log_level": 3})
    metadata = host.list_topics(timeout=60)  # in-process, but a loaded machine is slow
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    for topic in TOPICS:  # the mock cluster creates topics on first use (4 partitions)
        host.produce(topic, b"hello")
    host.flush(60)
    return host, bootstrap


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def demo_cluster(port: int, peers: int, data_dir: Path | None) -> Iterator[Settings]:
    """The mock cluster and its peers for as long as the block runs; yields the settings
    of a sidecar that joins them (``cli`` runs it: the demo does not know the daemon).

    ``port`` 0 is a free port, picked here so the printed hints name the real one. Without
    ``data_dir`` the journal goes to a scratch directory removed at the end."""
    port = port or _free_port("127.0.0.1")
    host, bootstrap = start_mock_cluster()
    scratch = data_dir is None
    workdir = data_dir or Path(tempfile.mkdtemp(prefix="rebalance-sidecar-demo-"))
    settings = Settings(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        topics=TOPICS,
        assignment_strategy=STRATEGY,
        api_port=port,
        admin_port=-1,  # the demo's probes are on the API port; 8081 may be taken
        data_dir=workdir,
        revoke_timeout_ms=5_000,
        statistics_interval_ms=2_000,
        kafka={k: str(v) for k, v in _PEER_CONFIG.items()},
    )
    choreography = Choreography(bootstrap, peers)
    use_roster(choreography)  # the mock cluster cannot answer DescribeGroups
    choreography.start()
    base = f"http://127.0.0.1:{port}"
    print(
        f"\nrebalance-sidecar demo: mock Kafka at {bootstrap}, group {GROUP!r}, "
        f"topics {', '.join(TOPICS)}; {peers} simulated peers join and leave every few seconds.\n"
        f"  curl {base}/assignment                    # what this member owns\n"
        f"  curl '{base}/assignment?after=SEQ&wait=30' # long-poll: SEQ = the last sequence\n"
        f"  curl -N {base}/events                     # live CloudEvents (SSE)\n"
        f"  curl -X POST {base}/enforce-rebalance     # KIP-568 rebalance\n"
        f"  {base}/{' ' * 35}# the status page, in a browser\n"
        f"  {base}/docs{' ' * 31}# the API\n"
        f"The group is cooperative ({STRATEGY}): librdkafka's mock cluster refuses commits "
        "during an eager rebalance (REBALANCE_IN_PROGRESS), a real broker does not "
        "(docs/demo.md).\n"
        f"Journal: {workdir}{' (removed at the end)' if scratch else ''}. Ctrl-C stops.\n",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    try:
        yield settings
    finally:
        choreography.stop()
        host.flush(1)
        del host
        if scratch:
            shutil.rmtree(workdir, ignore_errors=True)
        print(f"demo ran {time.monotonic() - started:.0f} s", file=sys.stderr)
