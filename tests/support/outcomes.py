"""A revoke barrier's ``done`` for tests: collects the outcomes, and takes each one (as a
consumer thread still waiting does)."""

from __future__ import annotations

from sidecar.handoff import BarrierOutcome


class Outcomes(list[BarrierOutcome]):
    def __call__(self, outcome: BarrierOutcome) -> bool:
        self.append(outcome)
        return True
