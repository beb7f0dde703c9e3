"""Partition ownership and downtime, replayed per partition with window functions.

Each membership event is exploded into one row per partition it delivered: an
``acquire`` for ``assigned`` (for cooperative groups the delta, for eager ones the
whole new assignment) and a ``release`` for ``revoked`` / ``lost``. Per
``(group, topic, partition)``, ordered by time (then source and sequence), the rows
are cut into *segments*: a segment starts at an acquire and holds every row up to
the next acquire. Its owner is the acquiring member; ownership ends at the owner's
first release in the segment, or, when no release was seen (a crashed process emits
nothing), at the next acquire (``reassigned``). A partition is unowned from the
owner's release to the next acquire: that is downtime. Releases by anyone else than
the owner are stale (a zombie's late ``lost``) and ignored.

Everything is a running window or a lag/lead over one sort per partition, then a
group-by over segments: no frame looks ahead unboundedly, so cost stays linear.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .events import ASSIGNED, LOST, REVOKED, event_order

PARTITION_KEY = ["group_id", "topic", "partition"]

OWNERSHIP_COLUMNS = [
    "group_id",
    "topic",
    "partition",
    "member",
    "owned_from",
    "owned_to",
    "seconds",
    "member_id",
    "generation_id",
    "end_reason",
]
DOWNTIME_COLUMNS = [
    "group_id",
    "topic",
    "partition",
    "unowned_from",
    "unowned_to",
    "seconds",
    "cause",
    "released_by",
    "next_owner",
    "generation_id",
    "rejoin",
]


def seconds_between(start: Column, end: Column) -> Column:
    """Seconds (microsecond precision) from start to end; null when either is null."""
    return (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0)


# The event type of a partition row as a small number: the rows stay narrow through
# the sort and the windows, and the order of the release codes is the order of the
# type names (``lost`` < ``revoked``), which breaks ties between releases at the same
# instant exactly as comparing the names did.
LOST_CODE = 0
REVOKED_CODE = 1
ACQUIRE_CODE = 2


def partition_events(member_events: DataFrame) -> DataFrame:
    """One row per (membership event, partition); ``code``: acquire, or release and how."""
    code = (
        F.when(F.col("type") == ASSIGNED, F.lit(ACQUIRE_CODE))
        .when(F.col("type") == REVOKED, F.lit(REVOKED_CODE))
        .otherwise(F.lit(LOST_CODE))
        .cast("byte")
    )
    exploded = member_events.where(F.col("type").isin(ASSIGNED, REVOKED, LOST)).select(
        "group_id",
        "member",
        "member_id",
        "generation_id",
        "time",
        "source",
        "sequence",
        "event_id",
        code.alias("code"),
        "is_rejoin",
        F.explode("partitions").alias("p"),
    )
    return exploded.select(
        "group_id",
        F.col("p.topic").alias("topic"),
        F.col("p.partition").alias("partition"),
        "member",
        "member_id",
        "generation_id",
        "time",
        "source",
        "sequence",
        "event_id",
        "code",
        "is_rejoin",
    ).where(F.col("topic").isNotNull() & F.col("partition").isNotNull())


def segments(partition_rows: DataFrame) -> DataFrame:
    """One row per ownership segment of a partition (segment 0: before any acquire)."""
    ordered = Window.partitionBy(*PARTITION_KEY).orderBy(*event_order())
    running = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    is_acquire = F.col("code") == ACQUIRE_CODE
    repeat = (F.lag("code").over(ordered) == ACQUIRE_CODE) & (
        F.lag("member").over(ordered) == F.col("member")
    )
    starts = partition_rows.withColumn("is_start", is_acquire & ~F.coalesce(repeat, F.lit(False)))
    # Both running columns in one select: one window pass over the rows, not two.
    marked = starts.select(
        "*",
        F.sum(F.col("is_start").cast("long")).over(running).alias("seg_id"),
        F.last(F.when(F.col("is_start"), F.col("member")), ignorenulls=True)
        .over(running)
        .alias("seg_owner"),
    )
    owner_release = (F.col("code") != ACQUIRE_CODE) & (
        F.col("seg_owner").isNull() | (F.col("member") == F.col("seg_owner"))
    )

    def at_start(column: str) -> Column:
        return F.max(F.when(F.col("is_start"), F.col(column)))

    grouped = marked.groupBy(*PARTITION_KEY, "seg_id").agg(
        F.max("seg_owner").alias("owner"),
        F.min(F.when(F.col("is_start"), F.col("time"))).alias("start"),
        at_start("member_id").alias("start_member_id"),
        at_start("generation_id").alias("start_generation"),
        F.coalesce(at_start("is_rejoin"), F.lit(False)).alias("start_rejoin"),
        F.min(
            F.when(
                owner_release,
                F.struct(
                    F.col("time").alias("time"),
                    F.col("code").alias("code"),
                    F.col("member").alias("member"),
                ),
            )
        ).alias("release"),
    )
    by_segment = Window.partitionBy(*PARTITION_KEY).orderBy("seg_id")
    previous_holder = F.lag(F.coalesce(F.col("owner"), F.col("release.member"))).over(by_segment)
    return (
        grouped.withColumn("next_start", F.lead("start").over(by_segment))
        .withColumn("next_owner", F.lead("owner").over(by_segment))
        .withColumn("next_generation", F.lead("start_generation").over(by_segment))
        .withColumn("next_rejoin", F.lead("start_rejoin").over(by_segment))
        .withColumn(
            "moved",
            (F.col("seg_id") > 0) & F.coalesce(previous_holder != F.col("owner"), F.lit(False)),
        )
    )


def _end_reason(release_code: Column) -> Column:
    return F.when(release_code == REVOKED_CODE, "revoked").when(release_code == LOST_CODE, "lost")


def ownership(segs: DataFrame) -> DataFrame:
    """``ownership``: one interval per owner and segment; ``owned_to`` null = still owned.

    ``owned_from`` is null for an owner whose acquire predates the input (only its
    release was seen).
    """
    owned = segs.where(F.col("seg_id") > 0).select(
        *PARTITION_KEY,
        F.col("owner").alias("member"),
        F.col("start").alias("owned_from"),
        F.coalesce(F.col("release.time"), F.col("next_start")).alias("owned_to"),
        F.col("start_member_id").alias("member_id"),
        F.col("start_generation").alias("generation_id"),
        F.when(F.col("release").isNotNull(), _end_reason(F.col("release.code")))
        .when(F.col("next_start").isNotNull(), F.lit("reassigned"))
        .alias("end_reason"),
    )
    before_input = segs.where((F.col("seg_id") == 0) & F.col("release").isNotNull()).select(
        *PARTITION_KEY,
        F.col("release.member").alias("member"),
        F.lit(None).cast("timestamp").alias("owned_from"),
        F.col("release.time").alias("owned_to"),
        F.lit(None).cast("string").alias("member_id"),
        F.lit(None).cast("long").alias("generation_id"),
        _end_reason(F.col("release.code")).alias("end_reason"),
    )
    return (
        owned.unionByName(before_input)
        .withColumn("seconds", seconds_between(F.col("owned_from"), F.col("owned_to")))
        .select(*OWNERSHIP_COLUMNS)
    )


def downtime(segs: DataFrame) -> DataFrame:
    """``downtime``: from the owner's release to the next acquire (null = still unowned).

    ``generation_id`` is the generation of the acquire that ended it; ``rejoin`` marks
    the gap of a static member's restart (back with its own partitions, no rebalance).
    """
    released = segs.where(F.col("release").isNotNull())
    return released.select(
        *PARTITION_KEY,
        F.col("release.time").alias("unowned_from"),
        F.col("next_start").alias("unowned_to"),
        seconds_between(F.col("release.time"), F.col("next_start")).alias("seconds"),
        _end_reason(F.col("release.code")).alias("cause"),
        F.col("release.member").alias("released_by"),
        F.col("next_owner"),
        F.col("next_generation").alias("generation_id"),
        F.coalesce(F.col("next_rejoin"), F.lit(False)).alias("rejoin"),
    ).where(F.col("unowned_to").isNull() | (F.col("unowned_to") > F.col("unowned_from")))


def moves_per_generation(segs: DataFrame) -> DataFrame:
    """Per group and generation: partitions assigned and partitions that changed owner."""
    acquired = segs.where((F.col("seg_id") > 0) & ~F.col("start_rejoin"))
    return acquired.groupBy("group_id", F.col("start_generation").alias("generation_id")).agg(
        F.count(F.lit(1)).alias("partitions_assigned"),
        F.sum(F.col("moved").cast("long")).alias("partitions_moved"),
    )


def downtime_per_generation(down: DataFrame) -> DataFrame:
    """Partition-seconds of downtime ended by each generation's rebalance."""
    return (
        down.where(F.col("seconds").isNotNull() & ~F.col("rejoin"))
        .groupBy("group_id", "generation_id")
        .agg(F.sum("seconds").alias("downtime_partition_seconds"))
    )
