"""The analytics command line's handling of paths, outputs, interrupts and memory:
URIs kept whole, outputs never replaced by mistake, Ctrl-C, container memory limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.arguments import check_convert, check_job
from sidecar.analytics.generator import FleetSpec, write_events, write_fleet_file
from sidecar.analytics.job import convert_parser, main, parser
from sidecar.analytics.paths import child, local_path
from sidecar.analytics.tables import TABLE_NAMES

URIS = ("s3a://bucket/events", "hdfs://nn:8020/rebalances/out", "gs://b/x/")


def test_uris_reach_the_job_whole_and_are_not_checked_here(tmp_path: Path) -> None:
    """pathlib folded ``s3a://bucket/x`` into ``s3a:/bucket/x`` on the way to Spark; a
    URI is not looked for on this machine (it is the cluster's)."""
    events = str(write_events(tmp_path / "events.jsonl", []))
    for uri in URIS:
        args = parser().parse_args(["-i", uri, events, "-o", uri, "--checkpoint", f"{uri}/c"])
        assert (args.input, args.output, args.checkpoint) == ([uri, events], uri, f"{uri}/c")
        check_job(args, managed=False)
        converted = convert_parser().parse_args(["-i", events, "-o", uri])
        assert converted.output == uri
        check_convert(converted, managed=False)
    args = parser().parse_args(["-i", "s3a://bucket/events", "-o", "s3a://bucket/out"])
    assert args.output == "s3a://bucket/out"


def test_paths_joined_and_told_local_as_hadoop_does() -> None:
    assert child("s3a://bucket/out", "report.html") == "s3a://bucket/out/report.html"
    assert child("hdfs://nn/out/", "members") == "hdfs://nn/out/members"
    assert child(Path("out"), "members") == Path("out/members")
    assert local_path("s3a://bucket/x") is None
    assert local_path("hdfs:///x") is None
    assert local_path("file:///tmp/x") == Path("/tmp/x")
    assert local_path("out/a:b") == Path("out/a:b")
    assert local_path("out") == Path("out")


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small-fleet") / "fleet.jsonl"
    write_fleet_file(path, FleetSpec(groups=2, events=400, seed=5))
    return path


@pytest.mark.spark
def test_file_uris_end_to_end(
    spark: SparkSession, small_fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """convert and the job with file:// inputs and outputs: the Parquet written is read
    as Parquet, and every table and the report land where the URI says (the report went
    to ./file:/... under the working directory, the Parquet input was read as JSON)."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    parquet, out = tmp_path / "fleet.parquet", tmp_path / "out"
    converted = ["convert", "-i", f"file://{small_fleet}", "-o", f"file://{parquet}"]
    assert main([*converted, "--master", "local[2]"]) == 0
    assert any(parquet.glob("*.parquet"))
    job = ["-i", f"file://{parquet}", "-o", f"file://{out}", "--master", "local[2]"]
    assert main(job) == 0
    assert (out / "report.html").is_file()
    for name in TABLE_NAMES:
        assert any((out / name).glob("*.parquet")), name
    assert list(work.iterdir()) == []
    from_jsonl = tmp_path / "from-jsonl"
    assert main(["-i", str(small_fleet), "-o", str(from_jsonl), "--master", "local[2]"]) == 0
    rebalances = spark.read.parquet(str(out / "rebalances")).count()
    assert rebalances > 0
    assert rebalances == spark.read.parquet(str(from_jsonl / "rebalances")).count()


@pytest.mark.spark
def test_a_report_to_a_uri_is_written_through_hadoop(spark: SparkSession, tmp_path: Path) -> None:
    """What a report to s3a:// or hdfs:// goes through (here on Hadoop's local file
    system): written whole, replacing an older one."""
    from sidecar.analytics.paths import write_text

    target = tmp_path / "out" / "report.html"
    for content in ("first", "second <html>é"):
        write_text(spark, f"file://{target}", content)
        assert target.read_text(encoding="utf-8") == content
    assert {p.name for p in target.parent.iterdir() if not p.name.startswith(".")} == {
        "report.html"
    }
