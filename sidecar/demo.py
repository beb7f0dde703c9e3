"""``rebalance-sidecar demo``: the sidecar against librdkafka's embedded mock cluster.

No Kafka, no Java: a producer instance hosts the mock cluster (``test.mock.num.brokers``)
for as long as it lives; two topics are created by producing to them; the sidecar joins a
group on them; a few simulated peers (plain consumers, each on its own thread) join and
leave on a schedule so ``/assignment`` and ``/events`` keep changing. Demo only: the test
suite uses a real broker.
"""

from __future__ import annotations

import contextlib
import random
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


class Peer(threading.Thread):
    """A simulated member of the group: joins, holds its partitions, leaves on request."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._servers = bootstrap
        self._leave = threading.Event()
        # Replaced (never mutated) by this thread; read by /group's fallback.
        self.membership: RosterMember | None = None

    def _on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        owned = tuple(sorted((tp.topic, tp.partition) for tp in partitions))
        self.membership = RosterMember(consumer.memberid() or "?", self.name, owned)

    def _on_revoke(self, consumer: Consumer, partitions: list[Any]) -> None:
        self.membership = RosterMember(consumer.memberid() or "?", self.name, ())

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._servers,
                "group.id": GROUP,
                **_PEER_CONFIG,
                "enable.auto.commit": False,
                "client.id": self.name,
            }
        )
        consumer.subscribe(
            list(TOPICS),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
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
    metadata = host.list_topics(timeout=10)
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    for topic in TOPICS:  # the mock cluster creates topics on first use (4 partitions)
        host.produce(topic, b"hello")
    host.flush(10)
    return host, bootstrap


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def demo_cluster(port: int, peers: int, data_dir: Path | None) -> Iterator[Settings]:
    """The mock cluster and its peers for as long as the block runs; yields the settings
    of a sidecar that joins them (``cli`` runs it: the demo does not know the daemon).

    ``port`` 0 is a free port, picked here so the printed hints name the real one."""
    port = port or _free_port("127.0.0.1")
    host, bootstrap = start_mock_cluster()
    workdir = data_dir or Path(tempfile.mkdtemp(prefix="rebalance-sidecar-demo-"))
    settings = Settings(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        topics=TOPICS,
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
        f"  open {base}/                              # the status page\n"
        f"  open {base}/docs                          # the API\n"
        f"Journal: {workdir}. Ctrl-C stops.\n",
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
        print(f"demo ran {time.monotonic() - started:.0f} s", file=sys.stderr)
