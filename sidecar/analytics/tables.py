"""The fleet tables: rebalances, ownership, downtime, members, summary, delivery.

:func:`build_tables` is the whole batch computation, a function of the events frame
only, so the batch job, the streaming job and the tests share it. Semantics (see
docs/analytics.md for the long form):

- A rebalance of generation G ends at the last ``assigned`` of generation G and
  starts at the first ``revoked``/``lost`` of a member leaving generation G-1, or the
  ``kafka.rebalance.requested`` made in G-1, or else at the first ``assigned`` of G.
- Every member that emitted ``assigned`` in G took part in it, even with an empty
  delta (cooperative members keep what they own and say so with an empty list).
- A static member (``group_instance_id``) that restarts within its session gets its
  old assignment back in the *same* generation under a new ``member_id``: that is a
  rejoin, not a rebalance, and neither its revoke nor its assign counts for one.
- Events with ``generation_id`` -1 (unknown) still count for ownership, downtime and
  members, but cannot be placed in a rebalance.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from . import ownership as own
from .events import (
    ASSIGNED,
    LOST,
    MEMBERSHIP_TYPES,
    REQUESTED,
    REVOKED,
    event_order,
    mark_duplicates,
    normalize,
)

TABLE_NAMES = ("rebalances", "ownership", "downtime", "members", "summary", "delivery")

REBALANCE_COLUMNS = [
    "group_id",
    "generation_id",
    "started_at",
    "ended_at",
    "duration_seconds",
    "members",
    "partitions_moved",
    "protocol",
    "reason",
    "trigger",
    "partitions_assigned",
    "members_joined",
    "members_left",
    "downtime_partition_seconds",
]
MEMBER_COLUMNS = [
    "group_id",
    "member",
    "joins",
    "leaves",
    "lost",
    "first_seen",
    "last_seen",
    "static",
    "rebalances",
    "session_seconds",
    "active",
]
SUMMARY_COLUMNS = [
    "group_id",
    "hour",
    "rebalances",
    "p50_seconds",
    "p95_seconds",
    "max_seconds",
    "downtime_partition_seconds",
    "partitions_moved",
]
DELIVERY_COLUMNS = [
    "group_id",
    "source",
    "events",
    "duplicates",
    "first_sequence",
    "last_sequence",
    "missing_sequences",
]


class FleetTables(dict[str, DataFrame]):
    """The tables by name; :meth:`release` drops the intermediate results it cached."""

    def __init__(self, tables: dict[str, DataFrame], cached: list[DataFrame]) -> None:
        super().__init__(tables)
        self._cached = cached

    def release(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached = []


def flag_member_events(marked: DataFrame) -> DataFrame:
    """Every event, with each member's history folded into its membership events.

    ``marked`` is the output of :func:`~.events.mark_duplicates`. Rows with ``replay``
    true are the unique membership events; only they carry the flags below (null or
    false elsewhere), computed with lag/lead over the member's other ``replay`` rows:

    - ``is_rejoin``: a static member's restart inside one generation;
    - ``is_repeat``: a second assign of one process in one generation (KIP-848);
    - ``session_start``: first event of a process (new ``member_id``, or after lost);
    - ``is_leave``: a revoke that ends a process with an empty assignment;
    - ``session_started_at``: when the current process's first event happened.

    Duplicates and enforce requests stay in (as ``replay`` false) for the delivery
    table and rebalance starts, so this one frame serves every table. Partitioning
    the window by ``replay`` as well reuses the shuffle of ``mark_duplicates``.
    """
    member = Window.partitionBy("group_id", "member", "replay").orderBy(*event_order())
    running = member.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    prev_type = F.lag("type").over(member)
    prev_member_id = F.lag("member_id").over(member)
    prev_generation = F.lag("generation_id").over(member)
    next_type = F.lead("type").over(member)
    next_member_id = F.lead("member_id").over(member)
    next_generation = F.lead("generation_id").over(member)
    same_process_before = prev_member_id.eqNullSafe(F.col("member_id"))
    same_process_after = next_member_id.eqNullSafe(F.col("member_id"))
    known_generation = F.col("generation_id") >= 0
    rejoin_assign = (
        (F.col("type") == ASSIGNED)
        & known_generation
        & prev_type.isNotNull()
        & (prev_generation == F.col("generation_id"))
        & ~same_process_before
    )
    rejoin_revoke = (
        (F.col("type") == REVOKED)
        & known_generation
        & (next_type == ASSIGNED)
        & (next_generation == F.col("generation_id"))
        & ~same_process_after
    )
    # KIP-848: a member that joined with nothing is told so, and told again when its
    # partitions come in the same member epoch: one rebalance, not two.
    repeat_assign = (
        (F.col("type") == ASSIGNED)
        & known_generation
        & (prev_type == ASSIGNED)
        & (prev_generation == F.col("generation_id"))
        & same_process_before
    )
    empty_assignment = F.coalesce(F.col("assignment_size"), F.lit(0)) == 0
    replay = F.col("replay")
    flagged = (
        marked.withColumn("replay", F.col("type").isin(*MEMBERSHIP_TYPES) & ~F.col("is_dup"))
        .withColumn("is_rejoin", replay & F.coalesce(rejoin_assign | rejoin_revoke, F.lit(False)))
        .withColumn("is_repeat", replay & F.coalesce(repeat_assign, F.lit(False)))
        .withColumn(
            "session_start",
            replay & (prev_type.isNull() | ~same_process_before | (prev_type == LOST)),
        )
        .withColumn(
            "is_leave",
            replay
            & (F.col("type") == REVOKED)
            & empty_assignment
            & (next_type.isNull() | ~same_process_after),
        )
    )
    return flagged.withColumn(
        "session_started_at",
        F.when(
            replay,
            F.last(F.when(F.col("session_start"), F.col("time")), ignorenulls=True).over(running),
        ),
    )


def replayed(flagged: DataFrame) -> DataFrame:
    """The unique membership events of :func:`flag_member_events`."""
    return flagged.where(F.col("replay"))


def _generations(flagged: DataFrame) -> DataFrame:
    """Per group and generation: when its assigns ended, who took part."""
    assigned = replayed(flagged).where(
        (F.col("type") == ASSIGNED) & ~F.col("is_rejoin") & (F.col("generation_id") >= 0)
    )
    return assigned.groupBy("group_id", "generation_id").agg(
        F.min("time").alias("first_assigned_at"),
        F.max("time").alias("ended_at"),
        F.countDistinct("member").alias("members"),
        F.array_sort(F.collect_set("member")).alias("member_set"),
        F.max("protocol").alias("protocol"),
        F.min(F.when(F.col("reason").isNotNull(), F.struct("time", "reason"))).alias(
            "assign_reason"
        ),
    )


def _starts(flagged: DataFrame, gens: DataFrame) -> DataFrame:
    """Events that open a rebalance, with the generation of the rebalance they open.

    Known generation G-1: the rebalance of G. Unknown (-1, e.g. a member that noticed
    its loss after the client had already reset its generation): the first rebalance
    of the group that ends at or after the event.
    """
    leaving = replayed(flagged).where(F.col("type").isin(REVOKED, LOST) & ~F.col("is_rejoin"))
    requested = flagged.where((F.col("type") == REQUESTED) & ~F.col("is_dup"))
    columns = ["group_id", "generation_id", "time", "type", "reason"]
    candidates = leaving.select(*columns).unionByName(requested.select(*columns))
    known = candidates.where(F.col("generation_id") >= 0).withColumn(
        "generation_id", F.col("generation_id") + 1
    )
    ends = gens.select(
        "group_id",
        F.col("generation_id").alias("next_generation"),
        F.col("ended_at").alias("time"),
        F.lit(None).cast("string").alias("type"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(0).alias("rank"),
    )
    unknown = (
        candidates.where(F.col("generation_id") < 0)
        .drop("generation_id")
        .withColumn("next_generation", F.lit(None).cast("long"))
        .withColumn("rank", F.lit(1))
    )
    # Newest first, a rebalance's end before an event at the same instant: the last
    # end seen before an event is the first one at or after it.
    backwards = (
        Window.partitionBy("group_id")
        .orderBy(F.desc("time"), "rank")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    placed = (
        unknown.unionByName(ends)
        .withColumn("generation_id", F.last("next_generation", ignorenulls=True).over(backwards))
        .where((F.col("rank") == 1) & F.col("generation_id").isNotNull())
        .select(*columns)
    )
    return known.unionByName(placed)


def rebalances(flagged: DataFrame, segs: DataFrame, down: DataFrame) -> DataFrame:
    gens = _generations(flagged)
    starts = _starts(flagged, gens).alias("s")
    # A start only counts when it came before the end (a zombie's late `lost` does not).
    opened = (
        starts.join(
            gens.select("group_id", "generation_id", "ended_at").alias("g"),
            ["group_id", "generation_id"],
        )
        .where(F.col("s.time") <= F.col("g.ended_at"))
        .groupBy("group_id", "generation_id")
        .agg(
            F.min("time").alias("first_start"),
            F.max((F.col("type") == REQUESTED).cast("int")).alias("has_requested"),
            F.max((F.col("type") == LOST).cast("int")).alias("has_lost"),
            F.max((F.col("type") == REVOKED).cast("int")).alias("has_revoked"),
            # The enforce request's reason wins; else the earliest reason given.
            F.min(
                F.when(
                    F.col("reason").isNotNull(),
                    F.struct(
                        (F.col("type") != REQUESTED).cast("int").alias("rank"),
                        F.col("time").alias("time"),
                        F.col("reason").alias("reason"),
                    ),
                )
            ).alias("start_reason"),
        )
    )
    per_group = Window.partitionBy("group_id").orderBy("generation_id")
    previous = F.lag("member_set").over(per_group)
    joined = F.size(F.array_except(F.col("member_set"), F.coalesce(previous, F.array())))
    left = F.size(F.array_except(F.coalesce(previous, F.array()), F.col("member_set")))
    table = (
        gens.join(opened, ["group_id", "generation_id"], "left")
        .join(own.moves_per_generation(segs), ["group_id", "generation_id"], "left")
        .join(own.downtime_per_generation(down), ["group_id", "generation_id"], "left")
        .withColumn("members_joined", joined)
        .withColumn("members_left", left)
    )
    started = F.least(F.col("first_start"), F.col("first_assigned_at"))
    trigger = (
        F.when(F.col("has_requested") == 1, "requested")
        .when(F.col("has_lost") == 1, "lost")
        .when(F.col("members_left") > 0, "member_left")
        .when(F.col("members_joined") > 0, "member_joined")
        .when(F.col("has_revoked") == 1, "revocation")
        .otherwise("unknown")
    )
    return table.select(
        "group_id",
        "generation_id",
        started.alias("started_at"),
        "ended_at",
        own.seconds_between(started, F.col("ended_at")).alias("duration_seconds"),
        "members",
        F.coalesce(F.col("partitions_moved"), F.lit(0)).alias("partitions_moved"),
        "protocol",
        F.coalesce(F.col("start_reason.reason"), F.col("assign_reason.reason")).alias("reason"),
        trigger.alias("trigger"),
        F.coalesce(F.col("partitions_assigned"), F.lit(0)).alias("partitions_assigned"),
        "members_joined",
        "members_left",
        F.coalesce(F.col("downtime_partition_seconds"), F.lit(0.0)).alias(
            "downtime_partition_seconds"
        ),
    )


def members(flagged: DataFrame) -> DataFrame:
    closing = F.col("is_leave") | (F.col("type") == LOST)
    session_seconds = own.seconds_between(F.col("session_started_at"), F.col("time"))
    last_event = F.max(F.struct(*event_order(), closing.alias("closing")))
    # One assign per member and generation (a second one in the same generation is
    # a rejoin, or a KIP-848 repeat), so counting assigns counts the rebalances the
    # member took part in.
    took_part = (
        (F.col("type") == ASSIGNED)
        & ~F.col("is_rejoin")
        & ~F.col("is_repeat")
        & (F.col("generation_id") >= 0)
    )
    return (
        replayed(flagged)
        .groupBy("group_id", "member")
        .agg(
            F.sum(F.col("session_start").cast("long")).alias("joins"),
            F.sum(F.col("is_leave").cast("long")).alias("leaves"),
            F.sum((F.col("type") == LOST).cast("long")).alias("lost"),
            F.min("time").alias("first_seen"),
            F.max("time").alias("last_seen"),
            F.max(F.col("group_instance_id").isNotNull()).alias("static"),
            F.sum(took_part.cast("long")).alias("rebalances"),
            F.coalesce(F.sum(F.when(closing, session_seconds)), F.lit(0.0)).alias(
                "session_seconds"
            ),
            (~last_event["closing"]).alias("active"),
        )
        .select(*MEMBER_COLUMNS)
    )


def summary(rebalance_table: DataFrame, down: DataFrame) -> DataFrame:
    per_hour = rebalance_table.groupBy(
        "group_id", F.date_trunc("hour", F.col("started_at")).alias("hour")
    ).agg(
        F.count(F.lit(1)).alias("rebalances"),
        F.percentile("duration_seconds", 0.5).alias("p50_seconds"),
        F.percentile("duration_seconds", 0.95).alias("p95_seconds"),
        F.max("duration_seconds").alias("max_seconds"),
        F.sum("partitions_moved").alias("partitions_moved"),
    )
    down_per_hour = (
        down.where(F.col("seconds").isNotNull())
        .groupBy("group_id", F.date_trunc("hour", F.col("unowned_from")).alias("hour"))
        .agg(F.sum("seconds").alias("downtime_partition_seconds"))
    )
    return (
        per_hour.join(down_per_hour, ["group_id", "hour"], "full_outer")
        .fillna({"rebalances": 0, "partitions_moved": 0, "downtime_partition_seconds": 0.0})
        .select(*SUMMARY_COLUMNS)
    )


def delivery(marked: DataFrame) -> DataFrame:
    """Per source: records read, duplicates (redeliveries), gaps in ``sequence``.

    Gaps are sequence numbers of that sidecar's journal that never reached the input;
    event types not produced to the fleet journal show up as gaps too.
    """
    unique = ~F.col("is_dup")
    return marked.groupBy("group_id", "source").agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.col("is_dup").cast("long")).alias("duplicates"),
        F.min("sequence").alias("first_sequence"),
        F.max("sequence").alias("last_sequence"),
        (
            F.max("sequence")
            - F.min("sequence")
            + 1
            - F.count(F.when(unique & F.col("sequence").isNotNull(), F.lit(1)))
        ).alias("missing_sequences"),
    )


def build_tables(spark: SparkSession, events: DataFrame) -> FleetTables:
    """All tables from raw (:data:`~.events.EVENT_SCHEMA`) or normalized events.

    Duplicates are removed here; the frames are lazy. Call ``release()`` on the
    result once written to drop the intermediate results it caches.
    """
    del spark  # the frames carry their session; kept for a uniform entry point
    normalized = events if "event_id" in events.columns else normalize(events)
    # The one shuffle: every window and group-by below is per group (per member, per
    # partition, per generation, per source of a group), so hash-partitioning the
    # events by group once satisfies all of them; Spark then only sorts within
    # partitions (see session.LOCAL_DEFAULTS / submit.sh for the co-partitioned
    # joins). The exploded per-partition rows, the biggest frame, never move.
    by_group = normalized.repartition("group_id")
    flagged = flag_member_events(mark_duplicates(by_group)).persist(StorageLevel.MEMORY_AND_DISK)
    # Per partition, the membership events move once more, by group again and before
    # they are exploded (a fifth of the rows that the exploded per-partition rows
    # would be); the per-partition windows then need no shuffle of their own.
    segs = own.segments(own.partition_events(replayed(flagged))).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    down = own.downtime(segs)
    rebalance_table = (
        rebalances(flagged, segs, down)
        .select(*REBALANCE_COLUMNS)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    tables = {
        "rebalances": rebalance_table,
        "ownership": own.ownership(segs),
        "downtime": down.select(*own.DOWNTIME_COLUMNS),
        "members": members(flagged),
        "summary": summary(rebalance_table, down),
        "delivery": delivery(flagged).select(*DELIVERY_COLUMNS),
    }
    return FleetTables(tables, [flagged, segs, rebalance_table])
