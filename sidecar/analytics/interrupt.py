"""Ctrl-C (SIGINT) during a run: Spark stopped, one line, exit code 130.

PySpark's own handler raises ``KeyboardInterrupt`` in the middle of the main thread's
py4j call (and its ``cancelAllJobs`` on that same busy connection fails): a traceback,
and a connection left mid-answer. Here the handler only records the request and stops
the session from another thread (its own py4j connection); the main thread's call then
fails, and the command ends with ``interrupted``. A second Ctrl-C does not wait.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from pyspark.sql import SparkSession

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
STOP_SECONDS = 60.0


def _stop(spark: SparkSession | None) -> None:
    if spark is None:
        return
    try:
        spark.sparkContext.cancelAllJobs()
    finally:
        spark.stop()


class Interrupt:
    def __init__(self) -> None:
        self.requested = False
        self._stopper: threading.Thread | None = None
        self._previous: signal.Handlers | object | None = None
        self._held = False

    def hold(self) -> None:
        """Until :meth:`install`, Ctrl-C waits (SIGINT blocked): while the session starts,
        PySpark's handler is in place, and raising then leaves py4j mid-call."""
        if threading.current_thread() is threading.main_thread():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            self._held = True

    def install(self, spark: SparkSession) -> None:
        """From now on (the session is up) Ctrl-C stops ``spark``; main thread only."""
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.requested:
                os._exit(EXIT_INTERRUPTED)
            self.requested = True
            self._stopper = threading.Thread(
                target=_stop, args=(spark,), name="interrupt", daemon=True
            )
            self._stopper.start()

        previous = signal.signal(signal.SIGINT, handler)
        if self._previous is None:
            self._previous = previous
        self._release()

    def _release(self) -> None:
        if self._held:
            self._held = False
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def uninstall(self) -> None:
        self._release()
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
            self._previous = None

    def finish(self) -> int:
        """Spark stopped (a Ctrl-C before :meth:`install` stops the active session
        here), then the one line; returns the exit code."""
        try:
            if self._stopper is None:
                _stop(SparkSession.getActiveSession())
            else:
                self._stopper.join(STOP_SECONDS)
        except Exception:  # noqa: S110 - stopping a session already going down
            pass
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
