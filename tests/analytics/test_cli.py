"""The analytics command line's handling of paths, outputs, interrupts and memory:
URIs kept whole, outputs never replaced by mistake, Ctrl-C, container memory limits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sidecar.analytics.arguments import check_convert, check_job
from sidecar.analytics.generator import FleetSpec, write_events, write_fleet_file
from sidecar.analytics.job import convert_parser, main, parser
from sidecar.analytics.paths import child, local_path
from sidecar.analytics.tables import TABLE_NAMES
from tests.analytics.interrupting import interrupt_when

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
    assert local_path("file:/tmp/x") == Path("/tmp/x")  # as Hadoop qualifies a path
    # `#` and `?` are part of a local path (urlsplit cut the path short there)
    assert local_path("file:/tmp/a#b/out") == Path("/tmp/a#b/out")
    assert local_path("file:///tmp/why?/out") == Path("/tmp/why?/out")
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


def parquet_dataset(where: Path, *, partitioned: bool = False) -> Path:
    """The files Spark leaves for a Parquet dataset (names only)."""
    where.mkdir(parents=True)
    for name in ("_SUCCESS", "._SUCCESS.crc"):
        (where / name).touch()
    part = where / "k=1" if partitioned else where
    part.mkdir(exist_ok=True)
    for name in ("part-00000-a.snappy.parquet", ".part-00000-a.snappy.parquet.crc"):
        (part / name).touch()
    return where


def unrelated(where: Path) -> Path:
    """A directory of someone's files (a home directory, say)."""
    (where / "notes").mkdir(parents=True)
    (where / "notes" / "todo.txt").write_text("keep me")
    (where / ".profile").write_text("keep me")
    return where


def refusal(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(arguments)
    err = capsys.readouterr().err
    assert code == 2, (arguments, err)
    assert err.count("\n") == 1, err
    return err


def test_an_output_that_holds_other_files_is_refused_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_session: None
) -> None:
    """convert replaced whatever directory --output named (``--output ~`` emptied the home
    directory); the job replaced any ``summary``, ``members``... in it. Refused, one
    line, exit 2, nothing touched, unless --overwrite."""
    events = str(write_events(tmp_path / "events.jsonl", []))
    home = unrelated(tmp_path / "home")
    err = refusal(["convert", "-i", events, "-o", str(home)], capsys)
    assert err.startswith(f"error: --output {home}: not empty and not a Parquet dataset")
    assert "--overwrite" in err
    err = refusal(["-i", events, "-o", str(home)], capsys)
    assert err.startswith(f"error: --output {home}: not empty and not an earlier output")
    partition_of_notes = parquet_dataset(tmp_path / "almost", partitioned=True)
    (partition_of_notes / "k=1" / "notes.txt").touch()
    refusal(["convert", "-i", events, "-o", str(partition_of_notes)], capsys)
    shadowed = tmp_path / "shadowed"
    (shadowed / "summary").mkdir(parents=True)
    (shadowed / "summary" / "q3.xlsx").touch()
    refusal(["-i", events, "-o", str(shadowed)], capsys)
    assert (home / "notes" / "todo.txt").read_text() == "keep me"
    assert (home / ".profile").is_file()


def test_outputs_that_may_be_replaced(tmp_path: Path) -> None:
    events = str(write_events(tmp_path / "events.jsonl", []))
    (tmp_path / "empty").mkdir()
    earlier_job = tmp_path / "earlier-job"
    for name in TABLE_NAMES:
        parquet_dataset(earlier_job / name)
    parquet_dataset(earlier_job / "_events")
    (earlier_job / "_checkpoint" / "offsets").mkdir(parents=True)
    (earlier_job / "_checkpoint" / "offsets" / "0").touch()
    (earlier_job / "report.html").touch()
    converted = [
        tmp_path / "missing",
        tmp_path / "empty",
        parquet_dataset(tmp_path / "plain"),
        parquet_dataset(tmp_path / "partitioned", partitioned=True),
    ]
    (converted[2] / "_temporary" / "0").mkdir(parents=True)  # a failed write's leftovers
    for output in converted:
        check_convert(convert_parser().parse_args(["-i", events, "-o", str(output)]), False)
    for output in (tmp_path / "missing", tmp_path / "empty", earlier_job):
        check_job(parser().parse_args(["-i", events, "-o", str(output)]), False)
    home = str(unrelated(tmp_path / "home"))
    check_convert(convert_parser().parse_args(["-i", events, "-o", home, "--overwrite"]), False)
    check_job(parser().parse_args(["-i", events, "-o", home, "--overwrite"]), False)


def leftovers(dataset: Path) -> Path:
    """What else a re-run finds in a Parquet dataset Spark wrote: the summary files
    (``parquet.summary.metadata.level``), an S3A magic committer's and a dynamic
    overwrite's leftovers, and hidden files (``.DS_Store`` from a Finder, an editor's)."""
    for name in ("_metadata", "._metadata.crc", "_common_metadata", ".DS_Store", ".nfs0001"):
        (dataset / name).touch()
    (dataset / "__magic_job-1" / "task").mkdir(parents=True)
    (dataset / ".spark-staging-1f2e").mkdir()
    return dataset


def test_rerun_outputs_with_summary_files_committer_leftovers_and_dot_files(
    tmp_path: Path,
) -> None:
    """Re-runs were refused for Parquet summary files, S3A ``__magic*`` leftovers and
    hidden files such as ``.DS_Store`` in an earlier output."""
    events = str(write_events(tmp_path / "events.jsonl", []))
    converted = leftovers(parquet_dataset(tmp_path / "converted", partitioned=True))
    leftovers(converted / "k=1")
    check_convert(convert_parser().parse_args(["-i", events, "-o", str(converted)]), False)
    earlier_job = tmp_path / "earlier-job"
    for name in (*TABLE_NAMES, "_events"):
        leftovers(parquet_dataset(earlier_job / name))
    (earlier_job / "_checkpoint").mkdir()
    (earlier_job / "report.html").touch()
    (earlier_job / ".DS_Store").touch()  # the job leaves it be
    check_job(parser().parse_args(["-i", events, "-o", str(earlier_job)]), False)


def test_hidden_files_alone_or_hidden_directories_are_no_earlier_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_session: None
) -> None:
    """Accepting dot-files must not make a new account's home (dot-files only: convert
    would delete them) or a directory with ``.git`` or ``.ssh`` an earlier output."""
    events = str(write_events(tmp_path / "events.jsonl", []))
    skeleton = tmp_path / "new-home"
    skeleton.mkdir()
    for name in (".bashrc", ".profile"):
        (skeleton / name).write_text("keep me")
    refusal(["convert", "-i", events, "-o", str(skeleton)], capsys)
    for hidden in (".ssh", ".git"):
        output = tmp_path / f"with{hidden}"
        parquet_dataset(output / "summary")
        (output / hidden).mkdir()
        (output / "summary" / hidden).mkdir()
        refusal(["-i", events, "-o", str(output)], capsys)
        refusal(["convert", "-i", events, "-o", str(output / "summary")], capsys)
    assert (skeleton / ".bashrc").read_text() == "keep me"


@pytest.mark.spark
def test_outputs_spark_wrote_are_replaced_and_others_refused_on_any_file_system(
    spark: SparkSession, small_fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real outputs, written twice, are earlier outputs; under spark-submit (and for a
    URI) the check goes through Hadoop once the session is up, and refuses alike."""
    fleet = str(small_fleet)
    parquet, out = str(tmp_path / "fleet.parquet"), str(tmp_path / "out")
    for _ in range(2):
        assert main(["convert", "-i", fleet, "-o", parquet, "--master", "local[2]"]) == 0
        assert main(["-i", parquet, "-o", out, "--master", "local[2]"]) == 0
    capsys.readouterr()
    home = unrelated(tmp_path / "home")
    for arguments in (["convert", "-i", fleet, "-o", str(home)], ["-i", fleet, "-o", str(home)]):
        code = main(arguments, managed_session=True)
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(f"error: --output {home}: not empty and not "), err
    assert (home / "notes" / "todo.txt").read_text() == "keep me"
    overwritten = ["convert", "-i", fleet, "-o", f"file://{home}", "--overwrite"]
    assert main(overwritten, managed_session=True) == 0
    assert not (home / "notes").exists()
    assert any(home.glob("*.parquet"))


def test_the_container_memory_limit_is_read_from_cgroup_files(tmp_path: Path) -> None:
    from sidecar.analytics.arguments import cgroup_memory_limit

    v2, v1, v1_mounted, none = (tmp_path / n for n in ("v2", "v1", "v1m", "none"))
    for directory in (v2, v1, v1_mounted / "memory", none):
        directory.mkdir(parents=True)
    (v2 / "memory.max").write_text("1073741824\n")
    (v1 / "memory.limit_in_bytes").write_text("536870912\n")
    (v1_mounted / "memory" / "memory.limit_in_bytes").write_text("268435456\n")
    assert cgroup_memory_limit(v2) == 2**30
    assert cgroup_memory_limit(v1) == 2**29
    assert cgroup_memory_limit(v1_mounted) == 2**28
    assert cgroup_memory_limit(none) is None
    (v2 / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(v2) is None


def test_driver_memory_must_fit_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check compared with the host's memory only: in a 1 GiB container --driver-memory
    4g passed, and the JVM was killed for memory. The smaller of the two counts."""
    from sidecar.analytics import arguments

    (tmp_path / "memory.max").write_text(f"{2**30}\n")
    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 64 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    args = ["-i", events, "-o", str(tmp_path / "out"), "--driver-memory"]
    with pytest.raises(arguments.UsageError, match=r"--driver-memory 4g: more than .*\(1024m\)"):
        check_job(parser().parse_args([*args, "4g"]), managed=False)
    check_job(parser().parse_args([*args, "512m"]), managed=False)
    (tmp_path / "memory.max").write_text("max\n")
    check_job(parser().parse_args([*args, "4g"]), managed=False)
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 2 * 2**30)
    with pytest.raises(arguments.UsageError, match=r"\(2048m\)"):
        check_job(parser().parse_args([*args, "4g"]), managed=False)


def test_the_memory_limit_of_the_process_own_cgroup_counts(tmp_path: Path) -> None:
    """Only the root of /sys/fs/cgroup was read: a limit on the process's own cgroup (a
    systemd scope, a pod's container nested in the pod's cgroup) went unseen. The
    smallest limit from its own cgroup up to the root counts, v2 and v1 alike."""
    from sidecar.analytics.arguments import cgroup_memory_limit

    own = tmp_path / "self-cgroup"
    v2 = tmp_path / "v2"
    (v2 / "kubepods" / "pod1" / "app").mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "kubepods" / "memory.max").write_text(f"{8 * 2**30}\n")
    (v2 / "kubepods" / "pod1" / "memory.max").write_text(f"{2**30}\n")
    (v2 / "kubepods" / "pod1" / "app" / "memory.max").write_text("max\n")
    own.write_text("0::/kubepods/pod1/app\n")
    assert cgroup_memory_limit(v2, own) == 2**30
    (v2 / "kubepods" / "pod1" / "app" / "memory.max").write_text(f"{2**29}\n")
    assert cgroup_memory_limit(v2, own) == 2**29
    own.write_text("0::/elsewhere\n")  # a cgroup that is not under this mount: the root's
    assert cgroup_memory_limit(v2, own) is None

    v1 = tmp_path / "v1"
    (v1 / "memory" / "docker" / "abc").mkdir(parents=True)
    unlimited = "9223372036854771712\n"  # v1's "no limit"
    (v1 / "memory" / "memory.limit_in_bytes").write_text(unlimited)
    (v1 / "memory" / "docker" / "memory.limit_in_bytes").write_text(unlimited)
    (v1 / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{2**30}\n")
    own.write_text("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n")
    assert cgroup_memory_limit(v1, own) == 2**30


def test_driver_memory_leaves_room_for_the_jvm_and_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a heap past the whole limit was refused: 2g in a 2 GiB container passed and
    was killed for memory (the JVM's own memory and Python's come on top of the heap).
    A heap may take 80 % of the memory, leaving at least 512m."""
    from sidecar.analytics import arguments

    (tmp_path / "pod").mkdir()
    (tmp_path / "pod" / "memory.max").write_text(f"{2 * 2**30}\n")
    (tmp_path / "self-cgroup").write_text("0::/pod\n")
    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(arguments, "PROC_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 64 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    args = ["-i", events, "-o", str(tmp_path / "out"), "--driver-memory"]
    for refused in ("2g", "1537m"):
        with pytest.raises(arguments.UsageError) as raised:
            check_job(parser().parse_args([*args, refused]), managed=False)
        message = str(raised.value)
        assert message.startswith(f"--driver-memory {refused}: more than the 1536m "), message
        assert "(2048m)" in message and "\n" not in message, message
    for accepted in ("1536m", "1g"):
        check_job(parser().parse_args([*args, accepted]), managed=False)
    (tmp_path / "pod" / "memory.max").write_text(f"{8 * 2**30}\n")  # 80 % rules here
    check_job(parser().parse_args([*args, "6553m"]), managed=False)
    with pytest.raises(arguments.UsageError, match=r"more than the 6553m .*\(8192m\)"):
        check_job(parser().parse_args([*args, "6554m"]), managed=False)


def test_a_driver_memory_refusal_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_session: None,
) -> None:
    from sidecar.analytics import arguments

    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path / "no-cgroup")
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 2 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    for command in ([], ["convert"]):
        out = str(tmp_path / "out")
        err = refusal([*command, "-i", events, "-o", out, "--driver-memory", "2g"], capsys)
        assert err.startswith("error: --driver-memory 2g: more than the 1536m "), err


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            found.append(kid)
            todo.append(kid)
    return found


@pytest.mark.spark
@pytest.mark.parametrize("command", [[], ["convert"]], ids=["job", "convert"])
def test_ctrl_c_stops_spark_and_exits_130_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """Ctrl-C once Spark runs printed PySpark's tracebacks (its handler raised in the
    middle of a py4j call) and exited by SIGINT. Now: exit 130, ``interrupted``, the JVM
    gone. SIGINT goes to the whole process group, as a terminal's Ctrl-C does."""
    fleet = tmp_path / "fleet.jsonl"
    write_fleet_file(fleet, FleetSpec(groups=20, events=100_000, seed=1))
    local_dirs = tmp_path / "spark-local"
    local_dirs.mkdir()
    arguments = [*command, "-i", str(fleet), "-o", str(tmp_path / "out"), "--master", "local[2]"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar.analytics", *arguments, "--driver-memory", "1g"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "SPARK_LOCAL_DIRS": str(local_dirs)},
    )
    jvms: list[int] = []
    interrupt_when(
        proc,
        lambda: any(local_dirs.glob("blockmgr-*")),  # the SparkContext is up
        "Spark never came up",
        within=120,
        settle=1,  # into the job's first Spark jobs
        before=lambda: jvms.extend(_descendants(proc.pid)),
    )
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in jvms):
        assert time.monotonic() < deadline, "the JVM outlived the command"
        time.sleep(0.2)


_STARTING = """
import os, signal, sys, time
from sidecar.analytics.interrupt import Interrupt

class Context:
    def cancelAllJobs(self): print("cancelled", flush=True)

class Query:
    def stop(self): print("query stopped", flush=True)

class Streams:
    active = [Query()]

class Session:
    sparkContext = Context()
    streams = Streams()
    def stop(self): print("stopped", flush=True)

interrupt = Interrupt()
interrupt.hold()  # the session starts
if not sys.argv[1].startswith("once, at"):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)
    print("noted", interrupt.requested, flush=True)
if sys.argv[1] == "once, at the handover":
    interrupt._started.set()  # the session is up: the watcher hands over ...
    interrupt._watcher.join()
    os.kill(os.getpid(), signal.SIGINT)  # ... and a first press, still blocked, waits
    interrupt.install(Session())
    sys.exit(interrupt.finish())
elif sys.argv[1] == "twice":
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("still starting", flush=True)
elif sys.argv[1] == "twice, at the handover":
    interrupt._started.set()  # the session is up: the watcher hands over ...
    interrupt._watcher.join()
    os.kill(os.getpid(), signal.SIGINT)  # ... and a second press, still blocked, waits
    interrupt.install(Session())
    time.sleep(5)
    print("still starting", flush=True)
else:
    interrupt.install(Session())  # the session is up: it is stopped now
    sys.exit(interrupt.finish())
"""


_STOPPING = """
import os, signal, sys, threading, time
from sidecar.analytics.job import _guarded

class Context:
    def cancelAllJobs(self): pass

class Streams:
    active = []

class Session:
    sparkContext = Context()
    streams = Streams()
    def stop(self):
        time.sleep(5)  # Spark takes its time to stop
        print("stopped", flush=True)

def run(interrupt):
    interrupt.hold()
    interrupt.install(Session())
    os.kill(os.getpid(), signal.SIGINT)  # the first press: Spark is being stopped
    time.sleep(0.2)
    # the second press, while the command waits for Spark to stop
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    return 0

sys.exit(_guarded(run))
"""


def _interrupted(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (it presses Ctrl-C itself) and check it exits quietly with 130."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_second_ctrl_c_while_spark_stops_exits_at_once(tmp_path: Path) -> None:
    """The run ended after a first Ctrl-C, and the command put PySpark's SIGINT handler
    back before it waited (up to a minute) for Spark to stop: a second press then raised
    KeyboardInterrupt in that wait, a traceback instead of the quiet exit 130."""
    done = _interrupted(_STOPPING)
    assert "stopped" not in done.stdout  # it did not wait for Spark


@pytest.mark.parametrize(
    "presses", ["once", "twice", "twice, at the handover", "once, at the handover"]
)
def test_ctrl_c_while_the_session_starts_is_not_lost(tmp_path: Path, presses: str) -> None:
    """SIGINT was blocked while the session started (the JVM, maybe a package download:
    minutes): every Ctrl-C then was ignored, a second one too, and the run went on. Now
    the first is noted and stops the run once the session is up; a second exits now,
    also one that came in the ~0.1 s the watcher takes to hand over (still blocked, it
    reached the handler as a first press: a second stopper, and a wait for Spark)."""
    done = _interrupted(_STARTING, presses)
    if presses == "once, at the handover":  # Spark stopped once, not by two stoppers
        assert done.stdout.splitlines() == ["query stopped", "cancelled", "stopped"]
        return
    assert done.stdout.splitlines()[0] == "noted True", done.stdout
    if presses.startswith("twice"):
        assert "still starting" not in done.stdout
        assert "stopped" not in done.stdout  # exits at once, no stopper waited for
    else:
        assert done.stdout.splitlines()[1:] == ["query stopped", "cancelled", "stopped"]
        assert done.stderr.splitlines()[-1] == "interrupted", done.stderr


def test_a_keyboard_interrupt_in_a_stream_stops_it_and_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Called from Python (a notebook), PySpark's handler raises KeyboardInterrupt in the
    wait; run_stream swallowed it and returned as if the timeout had passed. Now the query
    is stopped and the interrupt raised (a stop that fails on a dying session does not
    hide it)."""
    from sidecar.analytics import streaming

    class Query:
        stops = 0

        def awaitTermination(self, timeout: int | None = None) -> None:
            raise KeyboardInterrupt

        def stop(self) -> None:
            Query.stops += 1
            raise RuntimeError("the session is gone")

    class Refresher:
        batches = 3

    monkeypatch.setattr(streaming, "start_stream", lambda spark, options: (Query(), Refresher()))
    options = streaming.StreamOptions(inputs=["kafka://h:1/t"], output="out")
    with pytest.raises(KeyboardInterrupt):
        streaming.run_stream(None, options, timeout_seconds=5)  # type: ignore[arg-type]
    assert Query.stops == 1


def test_the_default_driver_memory_fits_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the headroom rule, the default 2g was refused outright in a container of less
    than 2.5 GiB, although the user asked for nothing: the default now lowers itself to
    what fits, and says so in one line (it did so silently); what the user gives is
    checked as given."""
    from sidecar.analytics import arguments

    (tmp_path / "memory.max").write_text(f"{3 * 2**29}\n")  # 1.5 GiB
    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(arguments, "PROC_CGROUP", tmp_path / "no-such-file")
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 64 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    args = ["-i", events, "-o", str(tmp_path / "out")]
    defaulted = parser().parse_args(args)
    check_job(defaulted, managed=False)
    assert defaulted.driver_memory == "1024m"  # min(80 %, all but 512m) of 1.5 GiB
    said = capsys.readouterr().err
    assert said.startswith(
        "note: --driver-memory not given (nor spark.driver.memory in spark-defaults.conf): "
        "1024m, not the default 2g"
    ), said
    assert "(1536m)" in said and said.count("\n") == 1, said
    with pytest.raises(arguments.UsageError, match="--driver-memory 2g: more than the 1024m"):
        check_job(parser().parse_args([*args, "--driver-memory", "2g"]), managed=False)
    (tmp_path / "memory.max").write_text("max\n")
    roomy = parser().parse_args(args)
    check_job(roomy, managed=False)
    assert roomy.driver_memory == "2g"
    assert capsys.readouterr().err == ""  # nothing lowered, nothing to say
    under_submit = parser().parse_args(args)
    check_job(under_submit, managed=True)
    assert under_submit.driver_memory is None  # spark-submit's own --driver-memory rules


def test_spark_defaults_driver_memory_is_honoured_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --driver-memory the job set its own default, overriding without a word the
    spark.driver.memory an operator put in spark-defaults.conf (which spark-submit and
    every other Spark tool take). It is now taken, and checked as --driver-memory is."""
    from sidecar.analytics import arguments

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    (tmp_path / "memory.max").write_text(f"{3 * 2**30}\n")  # 3 GiB: at most a 2457m heap
    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(arguments, "PROC_CGROUP", tmp_path / "no-such-file")
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 64 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    args = ["-i", events, "-o", str(tmp_path / "out")]
    (conf / "spark-defaults.conf").write_text("spark.driver.memory   1536m\n")
    taken = parser().parse_args(args)
    check_job(taken, managed=False)
    assert taken.driver_memory == "1536m"
    given = parser().parse_args([*args, "--driver-memory", "1g"])
    check_job(given, managed=False)
    assert given.driver_memory == "1g"  # the command line still wins
    (conf / "spark-defaults.conf").write_text("spark.driver.memory 3g\n")
    with pytest.raises(
        arguments.UsageError, match=r"^spark\.driver\.memory in spark-defaults\.conf 3g: more than"
    ):
        check_job(parser().parse_args(args), managed=False)
    (conf / "spark-defaults.conf").write_text("spark.driver.memory lots\n")
    with pytest.raises(
        arguments.UsageError,
        match=r"^spark\.driver\.memory in spark-defaults\.conf: not a memory size",
    ):
        check_job(parser().parse_args(args), managed=False)


def test_a_machine_too_small_for_any_driver_is_one_line_about_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --driver-memory on a 900 MiB container, the error named a
    "--driver-memory 512m" the user never gave."""
    from sidecar.analytics import arguments

    (tmp_path / "memory.max").write_text(f"{900 * 2**20}\n")
    monkeypatch.setattr(arguments, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(arguments, "PROC_CGROUP", tmp_path / "no-such-file")
    monkeypatch.setattr(arguments, "_physical_memory", lambda: 64 * 2**30)
    events = str(write_events(tmp_path / "events.jsonl", []))
    with pytest.raises(arguments.UsageError) as raised:
        check_job(parser().parse_args(["-i", events, "-o", str(tmp_path / "out")]), False)
    message = str(raised.value)
    assert "--driver-memory" not in message and "(900m)" in message, message
    assert "least driver heap (512m)" in message and "\n" not in message, message
