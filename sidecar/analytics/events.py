"""Rebalance events as Spark sees them: the CloudEvent schema, the readers, the clean-up.

Every reader returns the *raw* frame (one row per record read, duplicates included,
columns of :data:`EVENT_SCHEMA` with ``data`` as a struct); :func:`normalize` turns it
into the flat frame the table builders work on, and :func:`deduplicate` keeps one row
per event id (delivery is at-least-once, so the same event may be read several times).

Accepted inputs (see docs/analytics.md):

- JSONL: one CloudEvent JSON object per line (the journal export, or the Kafka values
  dumped to a file). Files or directories; ``.gz`` and other Hadoop codecs work.
- Parquet: the CloudEvent attributes as columns and ``data`` as a struct with the
  fields of :data:`DATA_SCHEMA` (what ``--stream`` stores under ``_events/``), or
  ``data_json``: the ``data`` object as a JSON string.
- Kafka: the fleet-journal topic; the record value is the CloudEvent JSON (UTF-8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark.sql import Column, DataFrame, SparkSession, Window, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .paths import Target, hadoop_lister, list_local, local_path, text

ASSIGNED = "kafka.partitions.assigned"
REVOKED = "kafka.partitions.revoked"
LOST = "kafka.partitions.lost"
REQUESTED = "kafka.rebalance.requested"
MEMBERSHIP_TYPES = (ASSIGNED, REVOKED, LOST)

PARTITION_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)
TOPIC_PARTITION_SCHEMA = StructType(
    [StructField("topic", StringType()), StructField("partition", IntegerType())]
)
DATA_SCHEMA = StructType(
    [
        StructField("group_id", StringType()),
        StructField("member_id", StringType()),
        StructField("group_instance_id", StringType()),
        StructField("generation_id", LongType()),
        StructField("protocol", StringType()),
        StructField("partitions", ArrayType(PARTITION_SCHEMA)),
        StructField("assignment", ArrayType(TOPIC_PARTITION_SCHEMA)),
        StructField("reason", StringType()),
    ]
)
# `time` and `sequence` stay strings here: RFC 3339 and a decimal string on the wire;
# normalize() parses them, so one bad record becomes a dropped row, not a failed job.
EVENT_SCHEMA = StructType(
    [
        StructField("specversion", StringType()),
        StructField("id", StringType()),
        StructField("source", StringType()),
        StructField("type", StringType()),
        StructField("time", StringType()),
        StructField("sequence", StringType()),
        StructField("datacontenttype", StringType()),
        StructField("data", DATA_SCHEMA),
    ]
)
RAW_COLUMNS = [f.name for f in EVENT_SCHEMA.fields]

# The flat frame every table is built from (see normalize()). `partitions` drops the
# offsets and `assignment` becomes its size: no table needs more, and the rows stay
# narrow through the shuffles.
NORMALIZED_SCHEMA = StructType(
    [
        StructField("event_id", StringType(), False),
        StructField("source", StringType()),
        StructField("type", StringType(), False),
        StructField("time", TimestampType(), False),
        StructField("sequence", LongType()),
        StructField("group_id", StringType(), False),
        StructField("member", StringType(), False),
        StructField("member_id", StringType()),
        StructField("group_instance_id", StringType()),
        StructField("generation_id", LongType(), False),
        StructField("protocol", StringType()),
        StructField("partitions", ArrayType(TOPIC_PARTITION_SCHEMA), False),
        StructField("assignment_size", IntegerType()),
        StructField("reason", StringType()),
    ]
)


@dataclass(frozen=True)
class KafkaInput:
    """A ``kafka://host:port[,host:port...]/topic`` input."""

    bootstrap_servers: str
    topic: str

    @classmethod
    def parse(cls, url: str) -> KafkaInput:
        parts = urlsplit(url)
        topic = parts.path.lstrip("/")
        if parts.scheme != "kafka" or not parts.netloc or not topic or "/" in topic:
            raise ValueError(f"expected kafka://host:port/topic, got {url!r}")
        return cls(bootstrap_servers=parts.netloc, topic=topic)

    def options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers, "subscribe": self.topic}


def is_kafka_url(value: str) -> bool:
    return value.startswith("kafka://")


def read_files(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Raw events from JSONL and/or Parquet files or directories."""
    frames = _file_frames(spark, paths, keep_time=False)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _file_frames(spark: SparkSession, paths: Sequence[str], *, keep_time: bool) -> list[DataFrame]:
    if not paths:
        raise ValueError("no input paths")
    parquet = [p for p in paths if _looks_like_parquet(spark, p)]
    jsonl = [p for p in paths if p not in parquet]
    frames: list[DataFrame] = []
    if jsonl:
        frames.append(spark.read.schema(EVENT_SCHEMA).option("mode", "PERMISSIVE").json(jsonl))
    # One read per Parquet input: their schemas may differ (``data`` or ``data_json``,
    # ``time`` as a string or a timestamp); each is brought to the raw form alone.
    frames.extend(parquet_to_raw(spark.read.parquet(p), keep_time=keep_time) for p in parquet)
    return frames


def _looks_like_parquet(spark: SparkSession, given: str) -> bool:
    """A Parquet file (by its name) or a directory of them; a local path is looked at
    here, any other URI through Hadoop (``s3a://bucket/events.parquet/``)."""
    lister = list_local if local_path(given) is not None else hadoop_lister(spark)
    entries = lister(given)
    if entries is None:
        return given.rstrip("/").endswith(".parquet")
    files = [(name, is_dir) for name, is_dir in entries if not name.startswith(("_", "."))]
    return any(name.endswith(".parquet") for name, _ in files) or any(
        is_dir and "=" in name for name, is_dir in files
    )


def _data_struct(frame: DataFrame) -> Column:
    """``data`` on :data:`DATA_SCHEMA`, field by field.

    A field already of the right type is taken as it is (the fast path: what
    ``--stream`` and ``analytics convert`` write); any other goes through JSON, so a
    struct with other field order or extra nested fields still lands right. Missing
    fields are null.
    """
    data_type = frame.schema["data"].dataType
    assert isinstance(data_type, StructType)  # parquet_to_raw checked
    present = {f.name: f.dataType for f in data_type.fields}
    fields: list[Column] = []
    for target in DATA_SCHEMA.fields:
        source = F.col("data")[target.name]
        if target.name not in present:
            value = F.lit(None).cast(target.dataType)
        elif present[target.name] == target.dataType:
            value = source
        elif isinstance(target.dataType, ArrayType | StructType):
            wrapper = StructType([StructField("v", target.dataType)])
            value = F.from_json(F.to_json(F.struct(source.alias("v"))), wrapper)["v"]
        else:
            value = source.cast(target.dataType)
        fields.append(value.alias(target.name))
    return F.when(F.col("data").isNotNull(), F.struct(*fields))


def parquet_to_raw(frame: DataFrame, *, keep_time: bool = False) -> DataFrame:
    """Bring a Parquet frame to :data:`EVENT_SCHEMA` (``data`` struct or ``data_json``).

    ``keep_time``: leave a timestamp ``time`` as it is (for :func:`read_normalized`,
    which parses ``time`` per input anyway) instead of formatting it as RFC 3339.
    """
    columns = set(frame.columns)
    if "data" in columns and isinstance(frame.schema["data"].dataType, StructType):
        data = _data_struct(frame)
    elif "data_json" in columns:
        data = F.from_json(F.col("data_json"), DATA_SCHEMA)
    else:
        raise ValueError("Parquet events need a `data` struct column or a `data_json` column")

    def text(name: str) -> Column:
        return F.col(name).cast("string") if name in columns else F.lit(None).cast("string")

    time = F.col("time")
    is_timestamp = "time" in columns and isinstance(frame.schema["time"].dataType, TimestampType)
    if is_timestamp and not keep_time:
        time = F.date_format(time, "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").cast("string")
    elif not is_timestamp:
        time = text("time")
    return frame.select(
        *(text(name) for name in ("specversion", "id", "source", "type")),
        time.alias("time"),
        *(text(name) for name in ("sequence", "datacontenttype")),
        data.alias("data"),
    )


def read_normalized(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Normalized events (:data:`NORMALIZED_SCHEMA`) from any mix of inputs.

    The job's reader: each input is normalized on its own before the union, so a
    Parquet ``time`` stored as a timestamp is used as it is (no round trip through
    text), and only the columns the tables need are read.
    """
    kafka = [KafkaInput.parse(i) for i in inputs if is_kafka_url(i)]
    files = [i for i in inputs if not is_kafka_url(i)]
    frames = [normalize(read_kafka(spark, k)) for k in kafka]
    if files:
        frames.extend(normalize(f) for f in _file_frames(spark, files, keep_time=True))
    if not frames:
        raise ValueError("no inputs")
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def write_parquet_events(spark: SparkSession, inputs: Sequence[str], output: Target) -> None:
    """``analytics convert``: JSONL archives to Parquet, the job's fast input.

    The raw CloudEvent form, with ``data`` as a struct of :data:`DATA_SCHEMA` (read
    without any conversion) and ``time`` parsed once into a timestamp (an unparseable
    time becomes null, and the job drops that record as it would have).
    """
    raw = read_files(spark, inputs)
    raw.withColumn("time", F.col("time").try_cast(TimestampType())).write.mode("overwrite").parquet(
        text(output)
    )


def kafka_value_to_raw(frame: DataFrame) -> DataFrame:
    """Raw events from a Kafka source frame (``value`` binary = CloudEvent JSON)."""
    parsed = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
    return frame.select(parsed.alias("event")).select("event.*")


def read_kafka(spark: SparkSession, source: KafkaInput) -> DataFrame:
    """Raw events: everything currently in the topic (a batch read)."""
    reader = spark.read.format("kafka")
    for key, value in source.options().items():
        reader = reader.option(key, value)
    frame = (
        reader.option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
        .load()
    )
    return kafka_value_to_raw(frame)


def read_events(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Raw events from any mix of files and ``kafka://`` topics."""
    kafka = [KafkaInput.parse(i) for i in inputs if is_kafka_url(i)]
    files = [i for i in inputs if not is_kafka_url(i)]
    frames = [read_kafka(spark, k) for k in kafka]
    if files:
        frames.append(read_files(spark, files))
    if not frames:
        raise ValueError("no inputs")
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _source_part(index: int) -> Column:
    # source = kafka://<group>/<member>; element 3 of split("/") is the group.
    return F.element_at(F.split(F.col("source"), "/"), index)


def normalize(raw: DataFrame) -> DataFrame:
    """Flatten raw events into :data:`NORMALIZED_SCHEMA`; drop unusable records.

    A record is kept when it has an id, a known type, a parseable time and a group
    (``data.group_id``, or the group in ``source``). The member identity is
    ``group_instance_id`` when set (static membership survives restarts), else
    ``member_id``, else the member part of ``source``.
    """
    data = F.col("data")
    group_id = F.coalesce(data["group_id"], _source_part(3))
    instance = F.when(data["group_instance_id"] != "", data["group_instance_id"])
    member_id = F.when(data["member_id"] != "", data["member_id"])
    member = F.coalesce(instance, member_id, _source_part(4))
    frame = raw.select(
        F.col("id").alias("event_id"),
        F.col("source"),
        F.col("type"),
        F.col("time").try_cast(TimestampType()).alias("time"),
        F.col("sequence").try_cast(LongType()).alias("sequence"),
        group_id.alias("group_id"),
        member.alias("member"),
        member_id.alias("member_id"),
        instance.alias("group_instance_id"),
        F.coalesce(data["generation_id"], F.lit(-1)).cast(LongType()).alias("generation_id"),
        F.lower(data["protocol"]).alias("protocol"),
        F.transform(
            F.coalesce(data["partitions"], F.array().cast(ArrayType(PARTITION_SCHEMA))),
            lambda p: F.struct(p["topic"].alias("topic"), p["partition"].alias("partition")),
        ).alias("partitions"),
        F.when(data["assignment"].isNotNull(), F.size(data["assignment"])).alias("assignment_size"),
        data["reason"].alias("reason"),
    )
    return frame.where(
        F.col("event_id").isNotNull()
        & F.col("time").isNotNull()
        & F.col("group_id").isNotNull()
        & F.col("member").isNotNull()
        & F.col("type").isin(*MEMBERSHIP_TYPES, REQUESTED)
    )


def member_window() -> WindowSpec:
    """Each member's events in replay order (see :func:`event_order`)."""
    return Window.partitionBy("group_id", "member").orderBy(*event_order())


def mark_duplicates(events: DataFrame) -> DataFrame:
    """Add ``is_dup``: true on every copy of an event id after the first.

    A redelivered event carries the same id and content, so its copies sort next to
    each other in the member's replay order: a ``lag`` finds them, in the same
    shuffle and sort the member history needs anyway (no extra pass over the rows).
    """
    previous = F.lag("event_id").over(member_window())
    return events.withColumn("is_dup", F.coalesce(previous == F.col("event_id"), F.lit(False)))


def deduplicate(events: DataFrame) -> DataFrame:
    """One row per event id (for callers outside the table builders)."""
    return mark_duplicates(events).where(~F.col("is_dup")).drop("is_dup")


def event_order() -> list[Column]:
    """Replay order: time, then source and sequence for ties, then id (duplicates)."""
    return [F.col("time"), F.col("source"), F.col("sequence"), F.col("event_id")]
