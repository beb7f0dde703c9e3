"""Structured Streaming: keep the tables current while sidecars produce to the topic.

The rebalance tables are not append-only (a rebalance's end moves while its assigns
arrive; an ownership interval closes long after it opened), so the stream does not
try to maintain them incrementally. Each micro-batch (``foreachBatch``):

1. appends the batch's events, as Parquet in the raw CloudEvent form, to
   ``OUTPUT/_events/`` (the durable copy of everything read so far);
2. rebuilds every table from ``_events`` with the same :func:`build_tables` as the
   batch job (duplicates, including a batch replayed after a failure, drop out there);
3. overwrites the tables and ``report.html``.

Limits: each trigger costs a full recompute over the history, so the trigger interval
must exceed the batch time for the accumulated events (seconds for millions of events
on one machine; size ``--trigger-seconds`` accordingly). A stream that runs for good
needs ``--window-seconds``: the tables are then built from the events of that last
stretch of event time (up to the newest event read), so building them costs what one
window's events cost, not what the whole history costs. Reading ``_events`` (which
still keeps everything, with ``time`` as text) stays a scan of all of it: that part
still grows with the history, far more slowly (docs/analytics.md has the figures). Readers of the
output may see a table while it is being overwritten; read them between batches or from
a copy. The Kafka offsets live in the checkpoint, so a restart resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from .events import KafkaInput, kafka_value_to_raw, read_normalized
from .output import refresh
from .paths import Target, child, text

EVENTS_DIR = "_events"
CHECKPOINT_DIR = "_checkpoint"


@dataclass(frozen=True)
class StreamOptions:
    inputs: Sequence[str]
    output: Target  # a local path, or any URI Spark writes to
    trigger_seconds: float = 30.0
    checkpoint: Target | None = None
    starting_offsets: str = "earliest"
    report: bool = True
    # The tables cover only the events at most this long (event time) before the newest
    # event read; ``None``: everything read.
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        window = self.window_seconds
        if window is not None and not (math.isfinite(window) and window > 0):
            raise ValueError(f"window_seconds must be a positive number of seconds, not {window}")


@dataclass(frozen=True)
class BatchLag:
    """How far one micro-batch's tables trailed its input."""

    batch_id: int
    records: int
    oldest_record: datetime  # Kafka timestamp of the batch's oldest record
    tables_written: datetime  # when the batch's tables and report were in place

    @property
    def lag_seconds(self) -> float:
        """From the oldest record's arrival in Kafka to the tables that include it."""
        return (self.tables_written - self.oldest_record).total_seconds()


class TableRefresher:
    """The ``foreachBatch`` function; counts the micro-batches that carried events."""

    def __init__(self, spark: SparkSession, options: StreamOptions) -> None:
        self.spark = spark
        self.options = options
        self.events_dir = child(text(options.output), EVENTS_DIR)
        self.batches = 0
        self.rebalances = 0
        self.lags: list[BatchLag] = []

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # The same read of the batch that said whether it is empty gives its oldest
        # record (the Kafka timestamp), from which the tables' lag is measured.
        seen = batch.agg(F.count(F.lit(1)).alias("n"), F.min("timestamp").alias("oldest")).first()
        if seen is None or not seen["n"]:
            return
        raw = kafka_value_to_raw(batch).where("id IS NOT NULL")
        raw.write.mode("append").parquet(self.events_dir)
        history = read_normalized(self.spark, [self.events_dir])
        if self.options.window_seconds is not None:
            history = within_window(history, self.options.window_seconds)
        self.rebalances = refresh(
            self.spark, history, self.options.output, report=self.options.report
        )
        self.batches += 1
        oldest: datetime = seen["oldest"]
        self.lags.append(
            BatchLag(
                batch_id=batch_id,
                records=int(seen["n"]),
                oldest_record=oldest.astimezone(UTC),
                tables_written=datetime.now(UTC),
            )
        )


#: How far ahead of this machine's clock an event may be and still place the window's
#: edge (clock skew between hosts); one further ahead is a wrong clock, not the newest.
FUTURE_TOLERANCE_SECONDS = 3600.0


def within_window(events: DataFrame, seconds: float, now: datetime | None = None) -> DataFrame:
    """The normalized ``events`` at most ``seconds`` of event time before the newest.

    Measured from the newest event, not the clock: the same events give the same tables
    whenever they are rebuilt (a restart, a replayed batch, an archive streamed again
    years later). An event that arrives later than the window is long stays in
    ``_events`` and out of the tables. A group whose earlier events fell out of the
    window starts where it enters it, as a history read from a topic whose retention
    deleted the beginning does. One clock is trusted after all, this machine's (``now``):
    the edge is never placed after it, and an event more than
    ``FUTURE_TOLERANCE_SECONDS`` ahead of it does not count as the newest; otherwise a
    single host with a clock ahead would move the edge past every other event and empty
    the tables (for good, a clock years ahead). Such an event is in the tables, as any
    event past the edge. Events all in the past (an archive) are not affected.
    """
    # Microseconds since the epoch: exact, and no local time zone on the way.
    micros = F.unix_micros(F.col("time"))
    now_micros = round((now or datetime.now(UTC)).timestamp() * 1_000_000)
    ceiling = now_micros + round(FUTURE_TOLERANCE_SECONDS * 1_000_000)
    found = events.where(micros <= F.lit(ceiling)).agg(F.max(micros).alias("newest")).first()
    if found is None or found["newest"] is None:
        return events
    newest = min(int(found["newest"]), now_micros)
    return events.where(micros >= F.lit(newest - round(seconds * 1_000_000)))


def kafka_stream(spark: SparkSession, inputs: Sequence[str], starting_offsets: str) -> DataFrame:
    frames: list[DataFrame] = []
    for url in inputs:
        source = KafkaInput.parse(url)
        reader = spark.readStream.format("kafka")
        for key, value in source.options().items():
            reader = reader.option(key, value)
        frames.append(
            reader.option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", "false")
            .load()
        )
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def start_stream(
    spark: SparkSession, options: StreamOptions
) -> tuple[StreamingQuery, TableRefresher]:
    """Start the query; the caller owns it (``processAllAvailable()``, ``stop()``)."""
    refresher = TableRefresher(spark, options)
    checkpoint = (
        text(options.checkpoint)
        if options.checkpoint is not None
        else child(text(options.output), CHECKPOINT_DIR)
    )
    query = (
        kafka_stream(spark, options.inputs, options.starting_offsets)
        .writeStream.foreachBatch(refresher)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{options.trigger_seconds} seconds")
        .queryName("rebalance-analytics")
        .start()
    )
    return query, refresher


def run_stream(
    spark: SparkSession, options: StreamOptions, *, timeout_seconds: float | None
) -> int:
    """Run until ``timeout_seconds`` (or forever); returns the batches processed.

    Whatever ends the wait early stops the query and is raised: from the command line a
    Ctrl-C stops the session from another thread (:mod:`.interrupt`), and the failing
    wait ends the command with ``interrupted``, exit 130; called from Python (a notebook)
    PySpark's own handler raises ``KeyboardInterrupt`` here, and the caller gets it, not a
    return as if the timeout had passed. Either way the checkpoint holds the batches
    committed so far, and a rerun with it resumes from there."""
    query, refresher = start_stream(spark, options)
    try:
        if timeout_seconds is None:
            query.awaitTermination()
        else:
            query.awaitTermination(max(1, math.ceil(timeout_seconds)))
    except BaseException:
        # The session may be going down already; the error raised says what happened.
        with contextlib.suppress(Exception):
            query.stop()
        raise
    query.stop()
    return refresher.batches
