"""Revoke barriers: waiting for blocking subscribers' acknowledgements, on the loop.

A revoked/lost event opens a ``RevokeBarrier`` naming the blocking subscribers that still
owe an answer; the consumer thread waits (see handoff.py) until it closes or expires. A
blocking subscriber may answer a ``revoked`` event with offsets to commit: they are
validated here (``parse_offsets``) and handed back with the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sidecar.handoff import BarrierDone, BarrierOutcome
from sidecar.model import MAX_OFFSET, MAX_PARTITION, Event, PartitionOffset, whole_number


@dataclass
class RevokeBarrier:
    """Waits for every blocking subscriber's acknowledgement of one revoked/lost event."""

    event: Event
    waiting: set[str]
    done: BarrierDone
    acknowledged: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    handed_back: list[str] = field(default_factory=list)

    def settle(self, sub_id: str, ok: bool, offsets: tuple[PartitionOffset, ...] = ()) -> bool:
        """Take one subscriber's answer; ``False`` when this barrier was not waiting for it,
        or when it was the last answer and the consumer thread had stopped waiting (the
        loop was too busy to expire the barrier in time): its offsets go nowhere."""
        if sub_id not in self.waiting:
            return False
        self.waiting.discard(sub_id)
        (self.acknowledged if ok else self.gave_up).append(sub_id)
        if ok and offsets:
            self.handed_back.append(sub_id)
        for po in offsets:
            key = (po.topic, po.partition)
            # Two subscribers handing back the same partition: the one behind wins. Every
            # subscriber has handled the records below the lower offset; committing the
            # higher one would skip, for the slower subscriber, records it never handled.
            # (A subscriber that does not answer in time hands back nothing: what the
            # others handed back is committed without it.)
            offset = po.offset or 0
            self.offsets[key] = min(self.offsets.get(key, offset), offset)
        if not self.waiting:
            return self.done(self.outcome(timed_out=False))
        return True

    def outcome(self, *, timed_out: bool) -> BarrierOutcome:
        return BarrierOutcome(
            acknowledged=tuple(self.acknowledged),
            gave_up=tuple(self.gave_up),
            waiting=tuple(sorted(self.waiting)),
            offsets=tuple(PartitionOffset(t, p, o) for (t, p), o in sorted(self.offsets.items())),
            handed_back=tuple(self.handed_back),
            timed_out=timed_out,
        )


class Barriers:
    """The open barriers, by event sequence. Loop-side only.

    ``on_abandoned(barrier, answering)`` runs when a barrier closes (its last answer, or
    its expiry) after the member thread stopped waiting for it: the offsets its
    subscribers handed back go nowhere, and each of them but ``answering`` (whose own
    answer is refused, and recorded so by its courier) must be told so."""

    def __init__(
        self, on_abandoned: Callable[[RevokeBarrier, str | None], None] = lambda b, s: None
    ) -> None:
        self._open: dict[int, RevokeBarrier] = {}
        self._on_abandoned = on_abandoned

    def open(self, event: Event, waiting: Iterable[str], done: BarrierDone) -> None:
        barrier = RevokeBarrier(event, set(waiting), done)
        if not barrier.waiting:
            done(barrier.outcome(timed_out=False))
            return
        self._open[event.sequence] = barrier

    def expire(self, event: Event) -> BarrierOutcome | None:
        """Close the event's barrier unanswered and hand its outcome on; ``None`` when it had
        closed already. Its ``waiting`` says who did not answer."""
        barrier = self._open.pop(event.sequence, None)
        if barrier is None:
            return None
        outcome = barrier.outcome(timed_out=True)
        if not barrier.done(outcome):
            self._on_abandoned(barrier, None)
        return outcome

    def settle(
        self, sub_id: str, event: Event, ok: bool, offsets: tuple[PartitionOffset, ...] = ()
    ) -> bool:
        """Hand an answer to the event's open barrier; ``False`` when none was waiting for it
        (it expired, or the sidecar restarted since the event): its offsets go nowhere."""
        barrier = self._open.get(event.sequence)
        if barrier is None:
            return False
        was_waiting = sub_id in barrier.waiting
        taken = barrier.settle(sub_id, ok, offsets)
        if not barrier.waiting:
            self._open.pop(event.sequence, None)
            if was_waiting and not taken:  # the last answer, and nobody waits any more
                self._on_abandoned(barrier, sub_id)
        return taken

    def forget(self, sub_id: str) -> None:
        """The subscription is gone: no barrier waits for it any longer."""
        for barrier in list(self._open.values()):
            self.settle(sub_id, barrier.event, ok=False)


def parse_offsets(body: bytes, owned: set[Any]) -> tuple[PartitionOffset, ...]:
    """Validate ``{"offsets": [{topic, partition, offset}]}`` against the revoked set.

    A body that is not JSON or has no ``offsets`` hands back nothing (a plain ack);
    anything malformed or naming a partition not being revoked rejects the whole list.
    """
    try:
        document = json.loads(body)
    except ValueError:
        return ()
    if not isinstance(document, dict) or "offsets" not in document:
        return ()
    items = document["offsets"]
    if not isinstance(items, list):
        raise ValueError("'offsets' must be a list")
    offsets = tuple(_offset(index, item, owned) for index, item in enumerate(items))
    seen: set[Any] = set()
    for index, po in enumerate(offsets):
        if po.tp in seen:  # as POST /commit: which one was meant?
            raise ValueError(f"offsets[{index}] names {po.topic}[{po.partition}] a second time")
        seen.add(po.tp)
    return offsets


def _offset(index: int, item: Any, owned: set[Any]) -> PartitionOffset:
    if not isinstance(item, dict) or set(item) - {"topic", "partition", "offset", "metadata"}:
        raise ValueError(f"offsets[{index}] must be {{topic, partition, offset}}")
    topic = item.get("topic")
    # Whole numbers as POST /commit takes them: never a bool (True == 1 would name
    # partition 1, or commit offset 1). Bounded: a larger offset makes confluent-kafka's
    # TopicPartition raise OverflowError in the callback.
    partition, offset = whole_number(item.get("partition")), whole_number(item.get("offset"))
    if not isinstance(topic, str) or partition is None or not 0 <= partition <= MAX_PARTITION:
        raise ValueError(
            f"offsets[{index}] needs a topic string and a partition >= 0 (at most {MAX_PARTITION})"
        )
    if offset is None or not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offsets[{index}].offset must be an integer >= 0 (at most {MAX_OFFSET})")
    po = PartitionOffset(topic, partition, offset)
    if po.tp not in owned:
        raise ValueError(f"offsets[{index}] names {topic}[{partition}], not being revoked here")
    return po
