"""The batch job end to end: CLI, generated fleets, Parquet inputs, the report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sidecar.analytics import build_tables, read_events
from sidecar.analytics.events import EVENT_SCHEMA
from sidecar.analytics.generator import FleetSpec, cloud_event, write_events, write_fleet_file
from sidecar.analytics.job import main, parser
from sidecar.analytics.tables import TABLE_NAMES
from tests.support.analytics import canonical, written_rows

CHARTS = ("chart-rebalances-over-time", "chart-duration-distribution", "chart-downtime-heatmap")
OFFENDER_TABLES = ("top-groups", "top-longest", "top-partitions", "top-members")


def test_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    for option in (
        "--input",
        "--output",
        "--master",
        "--stream",
        "--trigger-seconds",
        "--timeout-seconds",
        "--window-seconds",
    ):
        assert option in usage


def test_streaming_does_not_import_the_cli() -> None:
    # job imports streaming; streaming gets refresh() from output, not from job.
    code = (
        "import sys, sidecar.analytics.streaming; sys.exit('sidecar.analytics.job' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_stream_needs_a_kafka_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--input", str(tmp_path / "x.jsonl"), "--output", str(tmp_path), "--stream"])
    assert code == 2
    assert "kafka://" in capsys.readouterr().err


def test_missing_input_is_an_error_not_a_traceback(
    no_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input, so exit 2 and one line naming the path, before any session starts."""
    missing = tmp_path / "nowhere.jsonl"
    code = main(["--input", str(missing), "--output", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err == f"error: --input {missing}: No such file or directory\n"


def bad_arguments(tmp: Path) -> list[tuple[list[str], str]]:
    """(arguments, the start of the message after ``error: ``) for arguments that are
    known to be bad before anything starts."""
    events = write_events(tmp / "events.jsonl", [])
    a_file, out = str(events), str(tmp / "out")
    files = ["--input", a_file, "--output", out]
    kafka = ["--input", "kafka://127.0.0.1:1/t", "--output", out]
    missing = str(tmp / "nowhere.jsonl")
    return [
        ([*kafka, "--stream", "--trigger-seconds", "-1"], "argument --trigger-seconds: must be"),
        ([*kafka, "--stream", "--trigger-seconds", "nan"], "argument --trigger-seconds: must be"),
        ([*kafka, "--stream", "--trigger-seconds", "0"], "argument --trigger-seconds: must be"),
        ([*kafka, "--stream", "--timeout-seconds", "inf"], "argument --timeout-seconds: must"),
        ([*kafka, "--stream", "--timeout-seconds", "-5"], "argument --timeout-seconds: must"),
        ([*kafka, "--stream", "--window-seconds", "0.5"], "argument --window-seconds: must be"),
        ([*kafka, "--stream", "--window-seconds", "nan"], "argument --window-seconds: must be"),
        ([*kafka, "--stream", "--window-seconds", "1h"], "argument --window-seconds: "),
        ([*files, "--window-seconds", "3600"], "--window-seconds applies to --stream only"),
        ([*files, "--shuffle-partitions", "-3"], "argument --shuffle-partitions: must be"),
        ([*files, "--shuffle-partitions", "0"], "argument --shuffle-partitions: must be"),
        ([*files, "--shuffle-partitions", "x"], "argument --shuffle-partitions: not a whole"),
        ([*files, "--driver-memory", "lots"], "argument --driver-memory: not a memory size"),
        ([*files, "--driver-memory", "2gb"], "argument --driver-memory: not a memory size"),
        ([*files, "--driver-memory", "1024"], "argument --driver-memory: not a memory size"),
        ([*files, "--driver-memory", "100m"], "argument --driver-memory: must be at least"),
        ([*files, "--driver-memory", "1000000t"], "--driver-memory 1000000t: more than"),
        ([*files, "--master", "local[0]"], "--master local[0]: expected local"),
        ([*files, "--starting-offsets", "soon"], "argument --starting-offsets: invalid choice"),
        ([*files, "--bogus"], "unrecognized arguments: --bogus"),
        (["--input", a_file], "the following arguments are required: --output"),
        (["--input", "", "--output", out], "argument --input/-i: empty path"),
        (["--input", a_file, "--output", ""], "argument --output/-o: empty path"),
        (["--input", missing, "--output", out], f"--input {missing}: No such file"),
        (["--input", f"{tmp}/no-*.jsonl", "--output", out], f"--input {tmp}/no-*.jsonl: no file"),
        (["--input", a_file, "--output", a_file], f"--output {a_file}: is not a directory"),
        (["--input", a_file, "--output", f"{a_file}/out"], f"--output {a_file}/out: "),
        ([*kafka, "--stream", "--checkpoint", a_file], f"--checkpoint {a_file}: is not a dir"),
        (["--input", "kafka://h/t", "--output", out], "--input kafka://h/t: 'h' is not host"),
        (["--input", "kafka://h:1/", "--output", out], "--input: expected kafka://host:port"),
        ([*kafka, "--kafka-jars", str(tmp / "jars")], f"--kafka-jars {tmp / 'jars'}: not a"),
        ([*kafka, "--kafka-jars", str(tmp)], f"--kafka-jars {tmp}: no jars in it"),
        (["convert", "--input", missing, "--output", out], f"--input {missing}: No such"),
        (["convert", "--input", a_file, "--output", str(tmp)], f"--output {tmp}: overlaps"),
        (["convert", "-i", str(tmp), "-o", f"{tmp}/p.parquet"], f"--output {tmp}/p.parquet: over"),
        (["convert", "--input", a_file, "--output", a_file], f"--output {a_file}: is not a"),
        (["convert", "--input", a_file, "-o", out, "--driver-memory", "x"], "argument --driver"),
        (["convert", "--input", a_file, "--output", out, "--no"], "unrecognized arguments"),
    ]


def test_bad_arguments_are_one_line_and_exit_2_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_session: None
) -> None:
    for arguments, message in bad_arguments(tmp_path):
        code: int | str | None
        try:
            code = main(arguments)
        except SystemExit as exit_info:  # argparse's refusals
            code = exit_info.code
        err = capsys.readouterr().err
        assert code == 2, (arguments, err)
        assert err.startswith(f"error: {message}"), (arguments, err)
        assert err.count("\n") == 1 and err.endswith("\n"), (arguments, err)


@pytest.mark.parametrize("entry", [["-m", "sidecar", "analytics"], ["-m", "sidecar.analytics"]])
def test_the_commands_refuse_bad_arguments_in_one_line_without_starting_spark(
    tmp_path: Path, entry: list[str]
) -> None:
    """As run, the cases reported: one line on stderr (a JVM would add its own lines, and
    Spark's errors are other ones), exit code 2."""
    out, missing = str(tmp_path / "out"), str(tmp_path / "nowhere.jsonl")
    a_file = str(write_events(tmp_path / "events.jsonl", []))
    reported = [
        (
            ["--stream", "--input", "kafka://127.0.0.1:1/t", "-o", out, "--trigger-seconds", "-1"],
            "argument --trigger-seconds: must be between 0.001 and 86400, not -1 (see ",
        ),
        (
            ["--input", a_file, "--output", out, "--shuffle-partitions", "-3"],
            "argument --shuffle-partitions: must be between 1 and 2147483647, not -3 (see ",
        ),
        (
            ["--input", a_file, "--output", out, "--driver-memory", "lots"],
            "argument --driver-memory: not a memory size such as 2g or 512m",
        ),
        (["--input", a_file, "--output", out, "--bogus"], "unrecognized arguments: --bogus"),
        (["--input", missing, "--output", out], f"--input {missing}: No such file or directory"),
        (["convert", "-i", missing, "-o", out], f"--input {missing}: No such file or directory"),
    ]
    for arguments, message in reported:
        done = subprocess.run(
            [sys.executable, *entry, *arguments],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (arguments, done.stderr)
        assert done.stderr.startswith(f"error: {message}"), (arguments, done.stderr)
        assert done.stderr.count("\n") == 1, (arguments, done.stderr)


def test_good_values_pass_the_checks(tmp_path: Path) -> None:
    from sidecar.analytics.arguments import check_job

    events = str(write_events(tmp_path / "events.jsonl", []))
    out, checkpoint = str(tmp_path / "new" / "out"), str(tmp_path / "checkpoint")
    args = parser().parse_args(
        [
            *("--input", events, f"{tmp_path}/*.jsonl", f"file://{events}", "--output", out),
            *("--trigger-seconds", "0.5", "--timeout-seconds", "1e3", "--driver-memory", "512M"),
            *("--shuffle-partitions", "1", "--master", "local[2, 3]", "--checkpoint", checkpoint),
        ]
    )
    check_job(args, managed=False)
    assert (args.trigger_seconds, args.timeout_seconds) == (0.5, 1000.0)
    kafka = ["-i", "kafka://127.0.0.1:1/t", "-o", out, "--stream", "--window-seconds", "86400"]
    windowed = parser().parse_args(kafka)
    check_job(windowed, managed=True)
    assert windowed.window_seconds == 86400.0
    assert (args.driver_memory, args.shuffle_partitions) == ("512M", 1)
    for master in ("local", "local[*]", "local[4]", "local-cluster[2,1,1024]", "yarn"):
        check_job(parser().parse_args(["-i", events, "-o", out, "--master", master]), False)


def test_under_spark_submit_only_the_options_are_checked_before_the_session(
    no_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under spark-submit the paths are the cluster's (hdfs:, s3a:, or a path on its
    default file system): not judged on this machine."""
    from sidecar.analytics.arguments import UsageError, check_job

    args = parser().parse_args(["-i", "nowhere.jsonl", "-o", "hdfs:///out", "--master", "x"])
    check_job(args, managed=True)
    # What no path decides is still refused there: a window for a batch run.
    batch = parser().parse_args(["-i", "x.jsonl", "-o", "hdfs:///o", "--window-seconds", "60"])
    with pytest.raises(UsageError, match="applies to --stream only"):
        check_job(batch, managed=True)
    with pytest.raises(SystemExit):
        main(["-i", "nowhere.jsonl", "-o", "o", "--shuffle-partitions", "0"], managed_session=True)
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.spark
def test_a_path_spark_finds_missing_is_bad_input_too(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under spark-submit Spark itself says a path does not exist: still exit 2."""
    missing = tmp_path / "nowhere.jsonl"
    code = main(["--input", str(missing), "--output", str(tmp_path / "o")], managed_session=True)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: [PATH_NOT_FOUND]") and err.count("\n") == 1, err


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ([], ["convert"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--help"])
        assert exit_info.value.code == 0
        assert "Exit codes: 0 done; 1 the job failed once started; 2 bad" in " ".join(
            capsys.readouterr().out.split()
        )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.jsonl"
    write_fleet_file(path, FleetSpec(groups=6, events=8000, seed=3))
    return path


@pytest.fixture(scope="module")
def job_output(spark: SparkSession, fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("out")
    assert main(["--input", str(fleet), "--output", str(output), "--master", "local[2]"]) == 0
    return output


@pytest.mark.spark
def test_job_writes_every_table_and_the_report(job_output: Path) -> None:
    for name in TABLE_NAMES:
        assert any((job_output / name).glob("*.parquet")), name
    assert (job_output / "report.html").is_file()


@pytest.mark.spark
def test_tables_describe_the_generated_fleet(
    spark: SparkSession, fleet: Path, job_output: Path
) -> None:
    generations: dict[str, set[int]] = defaultdict(set)
    identities: dict[str, set[str]] = defaultdict(set)
    ids: set[str] = set()
    lines = 0
    for line in fleet.read_text().splitlines():
        event = json.loads(line)
        lines += 1
        ids.add(event["id"])
        data = event["data"]
        identities[data["group_id"]].add(data["group_instance_id"] or data["member_id"])
        if event["type"] == "kafka.partitions.assigned":
            generations[data["group_id"]].add(data["generation_id"])

    def table(name: str) -> list[dict[str, object]]:
        return [r.asDict() for r in spark.read.parquet(str(job_output / name)).collect()]

    rebalances = table("rebalances")
    per_group: dict[str, set[int]] = defaultdict(set)
    for row in rebalances:
        per_group[str(row["group_id"])].add(int(str(row["generation_id"])))
    assert per_group == generations
    members: dict[str, set[str]] = defaultdict(set)
    for row in table("members"):
        members[str(row["group_id"])].add(str(row["member"]))
    assert members == identities
    assert all(float(str(r["duration_seconds"])) >= 0 for r in rebalances)
    assert all(r["seconds"] is None or float(str(r["seconds"])) > 0 for r in table("downtime"))
    delivery = table("delivery")
    assert sum(int(str(r["events"])) for r in delivery) == lines
    assert sum(int(str(r["duplicates"])) for r in delivery) == lines - len(ids)


# The encodings a Parquet column chunk lists when it was written with a dictionary.
DICTIONARY_ENCODINGS = frozenset({"PLAIN_DICTIONARY", "RLE_DICTIONARY"})


def parquet_columns(spark: SparkSession, directory: Path) -> dict[str, tuple[str, str, set[str]]]:
    """:func:`footer_columns` of the biggest Parquet file in ``directory``."""
    return footer_columns(spark, max(directory.glob("*.parquet"), key=lambda f: f.stat().st_size))


def footer_columns(spark: SparkSession, file: Path) -> dict[str, tuple[str, str, set[str]]]:
    """Per column of a Parquet file's first row group, from its footer (parquet-mr,
    through the session's JVM): physical type, logical type and the encodings used;
    empty for a file without a row group."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(str(file))
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    input_file = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(path, conf)
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(input_file)
    try:
        footer = reader.getFooter()
    finally:
        reader.close()
    columns: dict[str, tuple[str, str, set[str]]] = {}
    if footer.getBlocks().isEmpty():  # an empty task's file
        return columns
    for column in footer.getBlocks().get(0).getColumns():
        primitive = column.getPrimitiveType()
        logical = primitive.getLogicalTypeAnnotation()
        columns[column.getPath().toDotString()] = (
            primitive.getPrimitiveTypeName().toString(),
            "" if logical is None else logical.toString(),
            {e.toString() for e in column.getEncodings()},
        )
    return columns


@pytest.mark.spark
def test_tables_store_instants_as_microseconds_without_a_dictionary(
    spark: SparkSession, job_output: Path
) -> None:
    """Timestamps are Parquet's INT64 microseconds (not the deprecated INT96), and the
    columns whose values are mostly distinct (instants, durations) skip the
    dictionary the writer would otherwise fill and abandon; the rest keep theirs."""
    for name in ("ownership", "downtime", "rebalances"):
        columns = parquet_columns(spark, job_output / name)
        instants = {c: v for c, v in columns.items() if v[0] == "INT96" or "TIMESTAMP" in v[1]}
        assert instants, name
        for column, (physical, logical, encodings) in instants.items():
            assert physical == "INT64" and "MICROS" in logical, (name, column, physical, logical)
            assert not encodings & DICTIONARY_ENCODINGS, (name, column, encodings)
        durations = [v for v in columns.values() if v[0] == "DOUBLE"]
        assert durations and all(not v[2] & DICTIONARY_ENCODINGS for v in durations), name
        assert columns["group_id"][2] & DICTIONARY_ENCODINGS, name


@pytest.mark.spark
def test_table_writer_leaves_out_only_the_dictionary_of_instants_and_durations(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Against Spark's own writer on the same rows, few distinct values in every column
    (so Parquet keeps a dictionary wherever it is allowed one): ``table_writer`` drops it
    for the timestamp and double columns and for nothing else."""
    from sidecar.analytics.output import table_writer

    frame = (
        spark.range(2000)
        .select(
            (F.col("id") % 3).cast("string").alias("group_id"),
            F.timestamp_micros((F.col("id") % 3) * 1_000_000).alias("owned_from"),
            ((F.col("id") % 3) / 2).alias("seconds"),
            (F.col("id") % 3).alias("generation_id"),
        )
        .coalesce(1)
    )
    frame.write.mode("overwrite").parquet(str(tmp_path / "plain"))
    table_writer(frame).parquet(str(tmp_path / "table"))

    def with_dictionary(directory: Path) -> set[str]:
        columns = parquet_columns(spark, directory)
        return {
            name for name, (_, _, encodings) in columns.items() if encodings & DICTIONARY_ENCODINGS
        }

    assert with_dictionary(tmp_path / "plain") == {
        "group_id",
        "owned_from",
        "seconds",
        "generation_id",
    }
    assert with_dictionary(tmp_path / "table") == {"group_id", "generation_id"}


@pytest.mark.spark
def test_parquet_written_before_and_after_the_timestamp_change_reads_as_one(
    spark: SparkSession, fleet: Path, tmp_path: Path
) -> None:
    """A directory of converted archives (``analytics convert``) may hold files converted
    before timestamps were written as INT64 microseconds (INT96 then) next to new ones:
    it still reads as one input, with the same instants."""
    from sidecar.analytics.events import read_files, read_normalized

    raw = read_files(spark, [str(fleet)]).withColumn("time", F.col("time").try_cast("timestamp"))
    mixed = tmp_path / "archives"
    previous = str(spark.conf.get("spark.sql.parquet.outputTimestampType"))
    try:
        for setting, half in (("INT96", 0), ("TIMESTAMP_MICROS", 1)):
            spark.conf.set("spark.sql.parquet.outputTimestampType", setting)
            part = raw.where(F.abs(F.hash("id")) % 2 == half)
            part.write.mode("append").parquet(str(mixed))
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", previous)

    footers = [footer_columns(spark, f) for f in mixed.glob("*.parquet")]
    stored = {columns["time"][0] for columns in footers if columns}
    assert stored == {"INT96", "INT64"}

    def instants(inputs: list[str]) -> list[tuple[str, object]]:
        frame = read_normalized(spark, inputs).select("event_id", "time")
        return sorted((r["event_id"], r["time"]) for r in frame.collect())

    assert instants([str(mixed)]) == instants([str(fleet)])


@pytest.mark.spark
def test_convert_to_parquet_then_the_same_tables(
    spark: SparkSession, fleet: Path, job_output: Path, tmp_path: Path
) -> None:
    parquet = tmp_path / "fleet.parquet"
    converted = ["convert", "--input", str(fleet), "--output", str(parquet), "--master", "local[2]"]
    assert main(converted) == 0
    assert any(parquet.glob("*.parquet"))
    output = tmp_path / "from-parquet"
    assert main(["--input", str(parquet), "--output", str(output), "--master", "local[2]"]) == 0
    for name in TABLE_NAMES:
        assert canonical(written_rows(spark, output, name)) == canonical(
            written_rows(spark, job_output, name)
        ), name


def test_convert_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "--help"])
    assert exit_info.value.code == 0
    assert "Parquet" in capsys.readouterr().out


@pytest.mark.spark
def test_report_has_the_charts_and_offenders(job_output: Path) -> None:
    html = (job_output / "report.html").read_text(encoding="utf-8")
    for chart in CHARTS:
        match = re.search(rf'<svg id="{chart}"[^>]*>(.*?)</svg>', html, re.S)
        assert match, chart
        assert "<rect" in match.group(1), f"{chart} draws nothing"
    for table_id in OFFENDER_TABLES:
        assert f'<table id="{table_id}">' in html
        assert (
            "nothing to show" not in html.split(f'<table id="{table_id}">')[1].split("</table>")[0]
        )
    # Self-contained: no scripts, stylesheets or images fetched from anywhere.
    assert not re.search(r"<(script|link|img)\b", html)
    assert "src=" not in html


@pytest.mark.spark
def test_parquet_inputs_struct_and_json_data(spark: SparkSession, tmp_path: Path) -> None:
    events = [
        cloud_event(
            type="kafka.partitions.assigned",
            group_id="pq",
            member_id="a",
            time="2024-01-01T00:00:00.000000Z",
            sequence=1,
            generation_id=1,
            partitions=[("t", 0), ("t", 1)],
            assignment=[("t", 0), ("t", 1)],
        ),
        cloud_event(
            type="kafka.partitions.revoked",
            group_id="pq",
            member_id="a",
            time="2024-01-01T00:00:05.000000+00:00",
            sequence=2,
            generation_id=1,
            partitions=[("t", 0), ("t", 1)],
            reason="member joined",
        ),
        cloud_event(
            type="kafka.partitions.assigned",
            group_id="pq",
            member_id="a",
            time="2024-01-01T00:00:06.5Z",
            sequence=3,
            generation_id=2,
            partitions=[("t", 0)],
            assignment=[("t", 0)],
        ),
        cloud_event(
            type="kafka.partitions.assigned",
            group_id="pq",
            member_id="b",
            time="2024-01-01T00:00:07Z",
            sequence=1,
            generation_id=2,
            partitions=[("t", 1)],
            assignment=[("t", 1)],
        ),
    ]
    jsonl = write_events(tmp_path / "events.jsonl", events)
    raw = spark.read.schema(EVENT_SCHEMA).json(str(jsonl))
    # `time` as a Parquet timestamp in one form, as the RFC 3339 string in the other.
    raw.withColumn("time", F.col("time").cast("timestamp")).write.parquet(str(tmp_path / "struct"))
    raw.withColumn("data_json", F.to_json("data")).drop("data").write.parquet(
        str(tmp_path / "json")
    )

    # Both Parquet forms at once: every event arrives twice and is deduplicated.
    tables = build_tables(
        spark, read_events(spark, [str(tmp_path / "struct"), str(tmp_path / "json")])
    )
    try:
        rebalances = tables["rebalances"].orderBy("generation_id").collect()
        delivery = tables["delivery"].collect()
    finally:
        tables.release()
    assert [
        (r["generation_id"], r["duration_seconds"], r["members"], r["partitions_moved"])
        for r in rebalances
    ] == [(1, 0.0, 1, 0), (2, 2.0, 2, 1)]
    assert sum(r["duplicates"] for r in delivery) == len(events)


def test_sessions_carry_the_jobs_settings(spark: SparkSession) -> None:
    """build_session applies the static and the planner settings (the job's plans and
    its speed rely on them, docs/analytics.md)."""
    from sidecar.analytics.session import PLANNER_CONF, STATIC_CONF

    for key, value in {**STATIC_CONF, **PLANNER_CONF}.items():
        assert spark.conf.get(key) == value, key


def test_the_local_jvm_runs_the_throughput_collector(spark: SparkSession) -> None:
    """The collector flag reaches the JVM (PySpark passes builder settings to spark-submit
    before the JVM starts): its collectors are the parallel ones, not G1's."""
    from sidecar.analytics.session import (
        DRIVER_JAVA_OPTIONS,
        THROUGHPUT_COLLECTOR,
        driver_java_options,
        site_default,
    )

    wanted = driver_java_options(None, os.environ, site_default(DRIVER_JAVA_OPTIONS, os.environ))
    if wanted is None or THROUGHPUT_COLLECTOR not in wanted:
        pytest.skip("a collector is chosen in the environment or the site's defaults: it wins")
    jvm = spark.sparkContext._jvm  # the JVM's own view of its collectors
    assert jvm is not None
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {bean.getName() for bean in beans}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def test_submit_script_passes_the_static_settings_first() -> None:
    """spark-submit fixes static settings before the job's code runs, so submit.sh passes
    them, and before the operator's options so that an operator's --conf wins."""
    from sidecar.analytics.session import STATIC_CONF

    script = (Path(__file__).resolve().parents[2] / "deploy" / "spark" / "submit.sh").read_text()
    launch = script[script.index('exec "$submit"') :]
    operator_options = launch.index('"${submit_args[@]}"')
    for key, value in STATIC_CONF.items():
        passed = launch.find(f"--conf {key}={value}")
        assert 0 <= passed < operator_options, key
