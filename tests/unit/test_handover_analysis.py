"""How the handover benchmark counts: effects in the store, split-state windows, pauses."""

from __future__ import annotations

from pathlib import Path

from bench.handover.analysis import count

T = "t"


def write(directory: Path, app: str, lines: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{app}.log").write_text("".join(line + "\n" for line in lines))


def p(partition: int, offset: int, app: str, ms: int) -> str:
    return f"P\t{T}\t{partition}\t{offset}\t{app}\t{ms * 1000}"


def f(partition: int, app: str, ms: int, position: int, reason: str = "revoke") -> str:
    return f"F\t{T}\t{partition}\t{app}\t{ms * 1000}\t{reason}\t{position}"


def lost(partition: int, app: str, ms: int) -> str:
    return f"L\t{T}\t{partition}\t{app}\t{ms * 1000}"


def test_a_clean_handover(tmp_path: Path) -> None:
    write(tmp_path, "a#1", [p(0, 0, "a#1", 0), p(0, 1, "a#1", 10), f(0, "a#1", 20, 2)])
    write(tmp_path, "b#1", [p(0, 2, "b#1", 50), p(0, 3, "b#1", 60), f(0, "b#1", 70, 4, "commit")])
    counts = count(tmp_path, {(T, 0): (0, 4)}, [("enforce", 0.005, 0.1)])
    assert (counts.produced, counts.gaps, counts.duplicates) == (4, 0, 0)
    (handover,) = counts.handovers
    assert (handover.old, handover.new) == ("a#1", "b#1")
    assert round(handover.split_window or 0, 3) == -0.03  # a flushed 30 ms before b's first
    assert round(handover.pause, 3) == 0.04
    assert [round(x, 3) for x in counts.step_pauses] == [0.04]


def test_a_late_flush_opens_a_split_window(tmp_path: Path) -> None:
    write(tmp_path, "a#1", [p(0, 0, "a#1", 0), f(0, "a#1", 500, 1, "commit")])
    write(tmp_path, "b#1", [p(0, 1, "b#1", 100), f(0, "b#1", 600, 2, "commit")])
    counts = count(tmp_path, {(T, 0): (0, 2)})
    assert counts.gaps == counts.duplicates == 0
    assert [round(w, 3) for w in counts.split_windows] == [0.4]


def test_unflushed_work_is_not_an_effect(tmp_path: Path) -> None:
    # a processed 0..2 but flushed only 0..1, then dropped its state (lost); b redid 1..2,
    # c processed 2 again after b had flushed it: one duplicate.
    write(
        tmp_path,
        "a#1",
        [p(0, 0, "a#1", 0), f(0, "a#1", 5, 1, "commit"), p(0, 1, "a#1", 10), lost(0, "a#1", 20)],
    )
    write(tmp_path, "b#1", [p(0, 1, "b#1", 30), p(0, 2, "b#1", 40), f(0, "b#1", 50, 3)])
    write(tmp_path, "c#1", [p(0, 2, "c#1", 60), f(0, "c#1", 70, 3)])
    counts = count(tmp_path, {(T, 0): (0, 4)})
    assert counts.gaps == 1  # offset 3: never processed
    assert counts.duplicates == 1  # offset 2: in b's and c's flushes
    assert counts.redone == 1  # a's processing of 1
    first = counts.handovers[0]
    assert (first.old, first.new, first.flush_old) == ("a#1", "b#1", None)  # dropped: lost
    assert counts.state_lost == 1
