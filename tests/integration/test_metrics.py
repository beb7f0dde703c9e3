"""A real sidecar's scrape follows Prometheus' conventions (issue 12.5).

``promtool check metrics`` is the referee; the same rules are also checked here with the
client library's parser, so a machine without promtool still catches the common ones.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar import __version__
from tests.support.sidecars import REPO, Sidecar, wait_until

pytestmark = pytest.mark.kafka


def _promtool() -> str | None:
    local = REPO / ".tools" / "bin" / "promtool"
    return str(local) if local.exists() else shutil.which("promtool")


def _scrape(sidecar: Sidecar) -> str:
    answer = sidecar.admin.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return answer.text


def test_the_scrape_follows_prometheus_conventions(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    sidecar = sidecar_factory(group_id, topic_factory(2))
    sidecar.wait_stable()
    # librdkafka's statistics (every second here) add the broker and coordinator series.
    wait_until(lambda: "librdkafka_broker_up" in _scrape(sidecar), 30, "librdkafka statistics")
    text = _scrape(sidecar)
    families = {f.name: f for f in text_string_to_metric_families(text)}

    for family in families.values():
        labelled = {label for sample in family.samples for label in sample.labels}
        if "quantile" in labelled:
            assert family.type == "summary", family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
    counters = {
        "rebalance_sidecar_rebalances",
        "rebalance_sidecar_failed_rebalances",
        "rebalance_sidecar_librdkafka_rebalances",
        "process_cpu_seconds",
    }
    for name in counters:
        assert families[name].type == "counter", name
    for name in ("process_resident_memory_bytes", "process_open_fds", "python_info"):
        assert name in families, name
    (info,) = families["rebalance_sidecar_build_info"].samples
    assert info.name == "rebalance_sidecar_build_info" and info.value == 1
    assert info.labels == {
        "version": __version__,
        "group": group_id,
        "protocol": "eager",
        "group_protocol": "classic",
    }
    for name in (  # the contract's names are still there
        "rebalance_sidecar_rebalance_duration_seconds",
        "rebalance_sidecar_last_rebalance_timestamp_seconds",
        "rebalance_sidecar_assigned_partitions",
        "rebalance_sidecar_generation_id",
        "rebalance_sidecar_partitions_revoked_callback_seconds",
        "rebalance_sidecar_journal_pending_events",
        "rebalance_sidecar_journal_used_bytes",
    ):
        assert name in families, name


def test_promtool_finds_nothing_to_complain_about(
    sidecar_factory: Callable[..., Sidecar], topic_factory: Callable[[int], str], group_id: str
) -> None:
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/check-deploy.sh builds .tools/bin)")
    sidecar = sidecar_factory(group_id, topic_factory(2))
    sidecar.wait_stable()
    wait_until(lambda: "librdkafka_broker_up" in _scrape(sidecar), 30, "librdkafka statistics")
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=_scrape(sidecar),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked.stderr
