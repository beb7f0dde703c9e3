"""``report.html``: one self-contained page of charts and top-offender tables.

Only small aggregates are collected to the driver (per-bucket counts, top-N rows), so
the report costs a few quick queries over the written tables whatever the fleet size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from .charts import bar_chart, format_number, heatmap
from .paths import Target, local_path, text, write_text

SERIES_SHOWN = 8  # groups drawn one by one in the time chart; the rest is "other"
HEATMAP_ROWS = 20
HEATMAP_COLUMNS = 64
TOP = 10
# Upper bounds (seconds) of the duration histogram buckets.
DURATION_EDGES = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Time-chart bucket sizes to choose from (seconds), the first giving <= 60 buckets.
BUCKETS = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)


@dataclass(frozen=True)
class Headline:
    events: int
    duplicates: int
    groups: int
    members: int
    rebalances: int
    downtime_seconds: float
    unowned_now: int
    first: datetime | None
    last: datetime | None


@dataclass(frozen=True)
class PartitionDowntime:
    """One partition's downtime, summed over its intervals (``seconds`` None: all open)."""

    group_id: str
    topic: str
    partition: int
    seconds: float | None
    intervals: int
    longest: float | None
    open: int


def partition_downtime(downtime: DataFrame) -> list[PartitionDowntime]:
    """The downtime table per partition: one pass over the biggest table the report reads.

    A few thousand rows (groups x partitions), so the headline, the heatmap and the
    top partitions are all drawn from this one collect.
    """
    rows = (
        downtime.groupBy("group_id", "topic", "partition")
        .agg(
            F.sum("seconds").alias("seconds"),
            F.count(F.lit(1)).alias("intervals"),
            F.max("seconds").alias("longest"),
            F.sum(F.col("unowned_to").isNull().cast("int")).alias("open"),
        )
        .collect()
    )
    return [
        PartitionDowntime(
            group_id=r["group_id"],
            topic=r["topic"],
            partition=r["partition"],
            seconds=r["seconds"],
            intervals=r["intervals"],
            longest=r["longest"],
            open=r["open"],
        )
        for r in rows
    ]


def _headline(tables: Mapping[str, DataFrame], partitions: Sequence[PartitionDowntime]) -> Headline:
    delivery = (
        tables["delivery"]
        .agg(
            F.coalesce(F.sum("events"), F.lit(0)).alias("events"),
            F.coalesce(F.sum("duplicates"), F.lit(0)).alias("duplicates"),
        )
        .first()
    )
    reb = (
        tables["rebalances"]
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.countDistinct("group_id").alias("groups"),
            F.min("started_at").alias("first"),
            F.max("ended_at").alias("last"),
        )
        .first()
    )
    members = (
        tables["members"]
        .agg(F.count(F.lit(1)).alias("n"), F.countDistinct("group_id").alias("groups"))
        .first()
    )
    if delivery is None or reb is None or members is None:
        raise RuntimeError("an aggregate without a grouping returned no row")
    return Headline(
        events=int(delivery["events"]),
        duplicates=int(delivery["duplicates"]),
        groups=max(int(reb["groups"]), int(members["groups"])),
        members=int(members["n"]),
        rebalances=int(reb["n"]),
        downtime_seconds=sum(p.seconds or 0.0 for p in partitions),
        unowned_now=sum(p.open for p in partitions),
        first=reb["first"],
        last=reb["last"],
    )


def _bucket_seconds(first: datetime | None, last: datetime | None) -> int:
    if first is None or last is None:
        return BUCKETS[0]
    span = (last - first).total_seconds()
    for size in BUCKETS:
        if span / size <= 60:
            return size
    return BUCKETS[-1]


def _duration_label(seconds: int) -> str:
    for unit, length in (("week", 7 * 86400), ("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= length and seconds % length == 0:
            count = seconds // length
            return unit if count == 1 and unit in ("week", "day") else f"{count} {unit}"
    return f"{seconds} s"


def _bucket_label(moment: datetime, size: int) -> str:
    if size >= 86400:
        return moment.strftime("%Y-%m-%d")
    return moment.strftime("%m-%d %H:%M")


def rebalances_over_time(rebalances: DataFrame, headline: Headline) -> str:
    size = _bucket_seconds(headline.first, headline.last)
    bucket = F.timestamp_seconds(F.floor(F.unix_seconds(F.col("started_at")) / size) * size).alias(
        "bucket"
    )
    top_groups = [
        r["group_id"]
        for r in rebalances.groupBy("group_id")
        .count()
        .orderBy(F.desc("count"), "group_id")
        .limit(SERIES_SHOWN)
        .collect()
    ]
    label = F.when(F.col("group_id").isin(top_groups), F.col("group_id")).otherwise("other")
    rows = rebalances.groupBy(bucket, label.alias("series")).count().collect()
    buckets = sorted({r["bucket"] for r in rows})
    names = list(top_groups) + (["other"] if any(r["series"] == "other" for r in rows) else [])
    index = {b: i for i, b in enumerate(buckets)}
    counts = {name: [0.0] * len(buckets) for name in names}
    for r in rows:
        counts[r["series"]][index[r["bucket"]]] += r["count"]
    return bar_chart(
        "chart-rebalances-over-time",
        "Rebalances over time per group",
        [_bucket_label(b, size) for b in buckets],
        [(name, counts[name]) for name in names],
        stacked=True,
        y_label=f"rebalances per {_duration_label(size)}",
    )


def duration_distribution(rebalances: DataFrame) -> str:
    bucket = F.lit(len(DURATION_EDGES))
    for i, edge in reversed(list(enumerate(DURATION_EDGES))):
        bucket = F.when(F.col("duration_seconds") <= edge, F.lit(i)).otherwise(bucket)
    rows = (
        rebalances.groupBy(
            bucket.alias("bucket"), F.coalesce("protocol", F.lit("unknown")).alias("protocol")
        )
        .count()
        .collect()
    )
    labels = [f"≤{format_number(e)}s" for e in DURATION_EDGES] + [
        f">{format_number(DURATION_EDGES[-1])}s"
    ]
    protocols = sorted({r["protocol"] for r in rows})
    counts = {p: [0.0] * len(labels) for p in protocols}
    for r in rows:
        counts[r["protocol"]][r["bucket"]] += r["count"]
    return bar_chart(
        "chart-duration-distribution",
        "Rebalance duration distribution",
        labels,
        [(p, counts[p]) for p in protocols],
        stacked=False,
        y_label="rebalances",
    )


def downtime_heatmap(partitions: Sequence[PartitionDowntime]) -> str:
    closed = [p for p in partitions if p.seconds is not None]
    totals: dict[tuple[str, str], float] = {}
    for p in closed:
        totals[(p.group_id, p.topic)] = totals.get((p.group_id, p.topic), 0.0) + (p.seconds or 0)
    keys = sorted(totals, key=lambda k: (-totals[k], k))[:HEATMAP_ROWS]
    if not keys:
        return heatmap("chart-downtime-heatmap", "Downtime by partition", [], [], [], unit="s")
    wanted = set(keys)
    cells = [p for p in closed if (p.group_id, p.topic) in wanted]
    width = max(p.partition for p in cells) + 1
    per_column = max(1, -(-width // HEATMAP_COLUMNS))  # partitions per column
    columns = [
        str(c * per_column) if per_column == 1 else f"{c * per_column}-{(c + 1) * per_column - 1}"
        for c in range(-(-width // per_column))
    ]
    values = [[0.0] * len(columns) for _ in keys]
    row_of = {k: i for i, k in enumerate(keys)}
    for p in cells:
        values[row_of[(p.group_id, p.topic)]][p.partition // per_column] += p.seconds or 0.0
    names = [g if t.startswith(g) else f"{g} · {t}" for g, t in keys]
    return heatmap(
        "chart-downtime-heatmap",
        "Partition downtime heatmap",
        names,
        columns,
        values,
        unit="seconds unowned",
    )


def _table(table_id: str, title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, float):
            return format_number(round(value, 2))
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S")
        return str(value)

    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = (
        "".join(
            "<tr>" + "".join(f"<td>{escape(cell(v))}</td>" for v in row) + "</tr>" for row in rows
        )
        or f'<tr><td colspan="{len(headers)}">nothing to show</td></tr>'
    )
    return (
        f'<section class="offenders"><h3>{escape(title)}</h3><table id="{table_id}">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )


def _values(rows: list[Row], columns: Sequence[str]) -> list[list[Any]]:
    return [[r[c] for c in columns] for r in rows]


def offenders(tables: Mapping[str, DataFrame], downtime: Sequence[PartitionDowntime]) -> str:
    reb, members = tables["rebalances"], tables["members"]
    groups = (
        reb.groupBy("group_id")
        .agg(
            F.count(F.lit(1)).alias("rebalances"),
            F.max("protocol").alias("protocol"),
            F.percentile("duration_seconds", 0.95).alias("p95_seconds"),
            F.max("duration_seconds").alias("max_seconds"),
            F.sum("partitions_moved").alias("partitions_moved"),
            F.sum("downtime_partition_seconds").alias("downtime_s"),
        )
        .orderBy(F.desc("rebalances"), F.desc("downtime_s"), "group_id")
        .limit(TOP)
        .collect()
    )
    longest = reb.orderBy(F.desc("duration_seconds"), "group_id").limit(TOP).collect()
    worst = sorted(downtime, key=lambda p: (-(p.seconds or 0.0), p.group_id, p.topic, p.partition))[
        :TOP
    ]
    partitions = [
        [p.group_id, p.topic, p.partition, p.seconds or 0.0, p.intervals, p.longest, p.open > 0]
        for p in worst
    ]
    churn = (
        members.orderBy(F.desc(F.col("joins") + F.col("lost")), "group_id", "member")
        .limit(TOP)
        .collect()
    )
    group_cols = [
        "group_id",
        "protocol",
        "rebalances",
        "p95_seconds",
        "max_seconds",
        "partitions_moved",
        "downtime_s",
    ]
    longest_cols = [
        "group_id",
        "generation_id",
        "started_at",
        "duration_seconds",
        "members",
        "partitions_moved",
        "trigger",
        "reason",
    ]
    member_cols = ["group_id", "member", "joins", "leaves", "lost", "static", "active"]
    return "".join(
        [
            _table(
                "top-groups",
                "Groups with the most rebalances",
                [
                    "group",
                    "protocol",
                    "rebalances",
                    "p95 s",
                    "max s",
                    "partitions moved",
                    "downtime partition-s",
                ],
                _values(groups, group_cols),
            ),
            _table(
                "top-longest",
                "Longest rebalances",
                [
                    "group",
                    "generation",
                    "started",
                    "seconds",
                    "members",
                    "moved",
                    "trigger",
                    "reason",
                ],
                _values(longest, longest_cols),
            ),
            _table(
                "top-partitions",
                "Partitions with the most downtime",
                ["group", "topic", "partition", "seconds", "intervals", "longest s", "unowned now"],
                partitions,
            ),
            _table(
                "top-members",
                "Members with the most churn",
                ["group", "member", "joins", "leaves", "lost", "static", "active"],
                _values(churn, member_cols),
            ),
        ]
    )


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
max-width:960px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
h3{font-size:15px;margin:18px 0 6px}.sub{color:#666;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#f5f6f8;border-radius:6px;
padding:8px 12px;min-width:120px}.card b{display:block;font-size:20px}
figure{margin:8px 0 20px}figcaption{color:#555;font-size:13px}
svg .grid{stroke:#e3e3e3}svg .tick{font-size:10px;fill:#555}svg .axis{font-size:11px;fill:#333}
svg .legend{font-size:11px;fill:#333}table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:left}th{background:#f5f6f8}
"""


def render_html(tables: Mapping[str, DataFrame]) -> str:
    return _render(tables)[0]


def _render(tables: Mapping[str, DataFrame]) -> tuple[str, Headline]:
    downtime = partition_downtime(tables["downtime"])
    headline = _headline(tables, downtime)
    cards = [
        ("events", format_number(headline.events)),
        ("duplicates", format_number(headline.duplicates)),
        ("groups", format_number(headline.groups)),
        ("members", format_number(headline.members)),
        ("rebalances", format_number(headline.rebalances)),
        ("downtime partition-s", format_number(round(headline.downtime_seconds, 1))),
        ("partitions unowned now", format_number(headline.unowned_now)),
    ]
    span = (
        f"{headline.first:%Y-%m-%d %H:%M} to {headline.last:%Y-%m-%d %H:%M} UTC"
        if headline.first and headline.last
        else "no rebalances"
    )
    figures = [
        (
            rebalances_over_time(tables["rebalances"], headline),
            "Stacked per group; the busiest groups are drawn one by one.",
        ),
        (
            duration_distribution(tables["rebalances"]),
            "From the first revoke/lost (or enforce request) to the last assign of the generation.",
        ),
        (
            downtime_heatmap(downtime),
            "Seconds each partition had no owner, summed; eager groups stop the world, "
            "cooperative ones should stay pale.",
        ),
    ]
    titles = ("Rebalances over time", "Duration distribution", "Downtime by partition")
    body = [
        f'<h1>Fleet rebalance report</h1><p class="sub">{escape(span)}</p>',
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{escape(v)}</b>{escape(k)}</div>' for k, v in cards)
        + "</div>",
    ]
    for title, (svg, caption) in zip(titles, figures, strict=True):
        body.append(
            f"<h2>{escape(title)}</h2><figure>{svg}"
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    body.append("<h2>Top offenders</h2>" + offenders(tables, downtime))
    html = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>Fleet rebalance report</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
    return html, headline


def render_report(tables: Mapping[str, DataFrame], target: Target) -> Headline:
    """Write the report to ``target`` (a local path: atomically, readers never see half a
    page; any other URI through Hadoop, see :func:`.paths.write_text`).

    Returns the headline figures (the caller reports the rebalance count from it).
    """
    html, headline = _render(tables)
    path = local_path(target)
    if path is None:
        write_text(next(iter(tables.values())).sparkSession, text(target), html)
        return headline
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".html.partial")
    partial.write_text(html, encoding="utf-8")
    partial.replace(path)
    return headline
