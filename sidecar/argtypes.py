"""argparse ``type``s shared by the command lines (no heavy imports: the analytics CLI
and the sidecar's own both use them)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def bounded_int(low: int, high: int | None) -> Callable[[str], int]:
    """A whole number in ``low..high`` (``high`` None: no bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, not {text}")
        return value

    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """A number in ``low..high`` (so never NaN nor infinite)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {text}")
        return value

    return parse
