"""The driver JVM's collector: added where nobody chose one, never on top of a choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.analytics.session import (
    DRIVER_JAVA_OPTIONS,
    THROUGHPUT_COLLECTOR,
    driver_java_options,
    site_default,
)


def test_nothing_chosen_gets_the_throughput_collector() -> None:
    assert driver_java_options(None, {}, None) == THROUGHPUT_COLLECTOR


def test_callers_options_are_kept_and_extended() -> None:
    given = "-Dlog4j.configurationFile=/etc/log4j2.xml -Djava.io.tmpdir=/scratch"
    assert driver_java_options(given, {}, "-Dsite=1") == f"{given} {THROUGHPUT_COLLECTOR}"


def test_site_options_are_kept_when_the_caller_gives_none() -> None:
    assert driver_java_options(None, {}, "-Dsite=1") == f"-Dsite=1 {THROUGHPUT_COLLECTOR}"


@pytest.mark.parametrize("where", ["given", "site"])
def test_a_chosen_collector_wins(where: str) -> None:
    chosen = "-XX:+UseG1GC -Xss4m"
    given, site = (chosen, None) if where == "given" else (None, chosen)
    # The caller's own options go through untouched; the site's are left to spark-submit.
    assert driver_java_options(given, {}, site) == given


@pytest.mark.parametrize(
    "variable", ["JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS"]
)
def test_a_collector_in_the_environment_wins(variable: str) -> None:
    # Two collectors and the JVM refuses to start ("Multiple garbage collectors selected").
    environ = {variable: "-XX:+UseZGC"}
    assert driver_java_options(None, environ, None) is None
    assert driver_java_options("-Dx=1", environ, None) == "-Dx=1"


def test_site_default_reads_spark_defaults_conf(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.master local[2]\n"
        f"{DRIVER_JAVA_OPTIONS}   -Dsite=1 -Dother=2\nspark.eventLog.enabled=true\n"
    )
    environ = {"SPARK_CONF_DIR": str(tmp_path)}
    assert site_default(DRIVER_JAVA_OPTIONS, environ) == "-Dsite=1 -Dother=2"
    assert site_default("spark.eventLog.enabled", environ) == "true"
    assert site_default("spark.executor.memory", environ) is None
    assert site_default(DRIVER_JAVA_OPTIONS, {"SPARK_CONF_DIR": str(tmp_path / "none")}) is None
