"""How the member thread runs a batch of commands taken from the handoff.

Between polls every command runs; inside a revoke barrier only what may run inside a
rebalance callback (``runs_in_barrier``). A command that calls for a fail stop (its
journal append failed) gets it once every command of its batch is answered, the ones
after it without running (``MemberGone``), through the member's one ``FailStop``.

Member thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sidecar.app_commits import ANSWERED_LATER, command_error
from sidecar.commands import Commit, EnforceRebalance
from sidecar.errors import MemberGone
from sidecar.fail_stop import FailStop
from sidecar.handoff import Command, PendingCommand


def runs_in_barrier(command: Command[Any], *, closing: bool) -> bool:
    """Inside a revoke barrier: commits (the app commits from its revoke handler), and
    enforces (its handler may ask for a rebalance: it joins the one under way, as Java's
    ``enforceRebalance()`` from ``onPartitionsRevoked``), else the handler and its own
    barrier would wait for each other until the revoke timeout.

    Anything else must not run inside a rebalance callback: a leave closes the consumer.
    It stays queued for the next turn of the poll loop, and its caller's deadline can
    still withdraw it (``MemberBusy``: never run). So does an enforce while the consumer
    closes (a drain's revoke): there is no rebalance to join.
    """
    if isinstance(command, EnforceRebalance):
        return not closing
    return isinstance(command, Commit)


def run_batch(
    batch: list[PendingCommand],
    execute: Callable[[PendingCommand], Any],
    fail_stop: FailStop,
    log: Any,
) -> None:
    """Run ``batch`` with ``execute``; answer each caller (``ANSWERED_LATER``: a commit
    whose caller Kafka's answer tells), then the fail stop a command called for."""
    for pending in batch:
        _run_one(pending, execute, fail_stop, log)
    fail_stop.batch_done()


def _run_one(
    pending: PendingCommand, execute: Callable[[PendingCommand], Any], fail_stop: FailStop, log: Any
) -> None:
    failed = fail_stop.reason
    if failed is not None:
        # Failing stop: nothing more runs (a queued commit must not commit, a second
        # enforce must not "join" a rebalance that will never come).
        if not pending.future.done():
            pending.future.set_exception(MemberGone(f"the group member stopped: {failed}"))
        return
    try:
        result = execute(pending)
    except Exception as exc:
        error, stop_because = command_error(pending.command, exc, log)
        if stop_because is not None:
            fail_stop.after_batch(stop_because)
        if not pending.future.done():
            pending.future.set_exception(error)
    else:
        if result is not ANSWERED_LATER and not pending.future.done():
            pending.future.set_result(result)
