"""Every fail stop goes through one object, once."""

from __future__ import annotations

from sidecar.fail_stop import FailStop


def test_a_fail_stop_runs_its_steps_once_then_stops() -> None:
    calls: list[str] = []
    stop = FailStop(lambda reason: calls.append(f"stop:{reason}"))
    stop.on_stop(lambda reason: calls.append(f"listener:{reason}"))
    stop.on_stop(lambda reason: calls.append(f"member:{reason}"))
    stop.now("disk full")
    stop.now("again")
    assert calls == ["listener:disk full", "member:disk full", "stop:disk full"]
    assert stop.reason == "disk full" and stop.stopped


def test_a_command_s_fail_stop_waits_for_its_batch() -> None:
    calls: list[str] = []
    stop = FailStop(calls.append)
    stop.after_batch("journal append failed")
    assert stop.reason == "journal append failed" and not stop.stopped and calls == []
    stop.after_batch("a second one")
    stop.batch_done()
    assert calls == ["journal append failed"] and stop.stopped
