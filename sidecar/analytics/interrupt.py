"""Ctrl-C (SIGINT) during a run: Spark stopped, one line, exit code 130.

PySpark's own handler raises ``KeyboardInterrupt`` in the middle of the main thread's
py4j call (and its ``cancelAllJobs`` on that same busy connection fails): a traceback,
and a connection left mid-answer. Here the handler only records the request and stops
the session from another thread (its own py4j connection); the main thread's call then
fails, and the command ends with ``interrupted``. A second Ctrl-C does not wait.

While the session starts (the JVM, maybe a package download: it can take minutes), a
Ctrl-C is noted, not raised (raising would leave py4j mid-call): the run stops as soon as
the session is up; a second one exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType

from pyspark.sql import SparkSession

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
STOP_SECONDS = 60.0


def _stop(spark: SparkSession | None) -> None:
    """Streaming queries first (a query's own thread outlives ``spark.stop()``, and the
    main thread's ``awaitTermination`` with it), then the jobs, then the session."""
    if spark is None:
        return
    try:
        for query in spark.streams.active:
            with contextlib.suppress(Exception):
                query.stop()
        spark.sparkContext.cancelAllJobs()
    finally:
        spark.stop()


def _stop_quietly(spark: SparkSession) -> None:
    """:func:`_stop` on the stopper thread: a session already going down may raise; the
    command's one line says what happened, a thread's traceback would not."""
    with contextlib.suppress(Exception):
        _stop(spark)


class Interrupt:
    def __init__(self) -> None:
        self.requested = False
        self._stopper: threading.Thread | None = None
        self._previous: signal.Handlers | object | None = None
        self._watcher: threading.Thread | None = None
        self._started = threading.Event()

    def hold(self) -> None:
        """Until :meth:`install` (the session starts): a Ctrl-C is noted and acted on once
        the session is up; a second one exits at once. Main thread only.

        SIGINT is blocked meanwhile (PySpark puts its own handler in place as the context
        starts, and raising then leaves py4j mid-call), and a watcher thread takes it
        with ``sigtimedwait``: blocked, it is not lost. Threads started from now on
        inherit the block, so no other thread gets it either."""
        if threading.current_thread() is not threading.main_thread():
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self._watcher = threading.Thread(target=self._watch, name="interrupt-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._started.is_set():
            if signal.sigtimedwait({signal.SIGINT}, 0.1) is None:
                continue
            if self.requested:
                os._exit(EXIT_INTERRUPTED)
            self.requested = True
            print(
                "interrupted: stopping once Spark is up (Ctrl-C again to exit now)",
                file=sys.stderr,
                flush=True,
            )

    def _release(self) -> None:
        """The session is up (or never will be): the watcher ends, SIGINT is unblocked."""
        if self._watcher is None:
            return
        self._started.set()
        self._watcher.join()
        self._watcher = None
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def install(self, spark: SparkSession) -> None:
        """From now on (the session is up) Ctrl-C stops ``spark``; main thread only."""
        if threading.current_thread() is not threading.main_thread():
            return

        def stop_spark() -> None:
            self._stopper = threading.Thread(
                target=_stop_quietly, args=(spark,), name="interrupt", daemon=True
            )
            self._stopper.start()

        def handler(signum: int, frame: FrameType | None) -> None:
            # Requested already (here, or noted while the session started): a second
            # Ctrl-C, even one still pending when the watcher handed over.
            if self.requested:
                os._exit(EXIT_INTERRUPTED)
            self.requested = True
            stop_spark()

        previous = signal.signal(signal.SIGINT, handler)
        if self._previous is None:
            self._previous = previous
        self._release()  # a Ctrl-C from now on reaches ``handler``
        if self.requested and self._stopper is None:  # while the session started
            stop_spark()

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
