"""``docs/benchmarks.md``: machine, command, targets, then one part per section."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from bench.common import REPO, SectionResult, Table

# Kept by hand: what the numbers mean, what is ours, what to change. Included verbatim.
FINDINGS = REPO / "bench" / "findings.md"
HANDOVER = REPO / "docs" / "handover.md"

INTRO = """\
What the sidecar costs, measured against baselines **in the same run** on the same
machine, so the ratios mean something even where the absolute numbers are this
machine's. Regenerate with the command below (`python -m bench --help`); the harness
lives in `bench/` and a smoke test (`tests/bench/`) keeps it running. The targets are
benchmarks, not test assertions (issue 7). A load average above the core count (see
"Machine") means other work shared the 2 cores during the run: tails (p95, p99) and the
HTTP figures carry that noise, baselines included.
"""


def render(
    results: list[SectionResult],
    machine: dict[str, str],
    command: str,
    sizes: Mapping[str, object],
    load_tool: str,
    seconds: float,
    findings: bool = True,
    finished: dt.datetime | None = None,
) -> str:
    """The report; ``finished`` is when the run ended (now, unless re-rendering an old run)."""
    when = (finished or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    out: list[str] = ["# Benchmarks", "", INTRO]
    out += ["## Run", ""]
    out += [f"- command: `{command}` ({seconds:.0f} s, {when})"]
    out += ["- sizes: " + ", ".join(f"{k}={_size(v)}" for k, v in sizes.items())]
    out += [f"- HTTP load generator: {_load_tool(load_tool)}"]
    out += ["", "## Machine", "", *_table(Table(["", ""], [[k, v] for k, v in machine.items()]))]
    targets = [t for r in results for t in r.targets]
    if targets:
        out += ["", "## Targets", ""]
        rows = [[t.what, t.goal, t.measured, "met" if t.met else "**missed**"] for t in targets]
        out += _table(Table(["target", "goal", "measured", ""], rows))
    if findings and FINDINGS.exists():
        out += ["", FINDINGS.read_text().strip()]
    if findings:  # the main report; the handover run writes docs/handover.md itself
        out += _handover()
    for result in results:
        out += ["", f"## {result.title}", "", result.method, ""]
        for table in result.tables:
            if table.caption:
                out += [table.caption, ""]
            out += [*_table(table), ""]
        for note in result.notes:
            out += [f"- {note}"]
        if result.notes:
            out += [""]
    return "\n".join(out).rstrip() + "\n"


def _size(value: object) -> str:
    """A size as the run's ``Sizes`` prints it (JSON turns its tuples into lists)."""
    return str(tuple(value)) if isinstance(value, list) else str(value)


def _handover() -> list[str]:
    """The data-level comparison (``--only handover``, its own longer run): its results and
    targets as that run wrote them to ``docs/handover.md``."""
    if not HANDOVER.exists():
        return []
    text = HANDOVER.read_text()
    try:
        results = text[text.index("## Results") : text.index("## Reading the table")]
    except ValueError:
        return []
    body = results.replace("## Results", "", 1).replace("## Targets", "### Targets", 1).strip()
    return [
        "",
        "## Handover at the data level (from `python -m bench --only handover`)",
        "",
        "Gaps, duplicates and split-state windows per record, against an in-process Java "
        "`ConsumerRebalanceListener` and Dapr, in one run of its own; method, reading and "
        "limits: [handover.md](handover.md).",
        "",
        body,
    ]


def _load_tool(tool: str) -> str:
    if tool == "wrk":
        return "`wrk` (one thread, Debian package), on the same 2 cores as the server"
    return "the harness's raw-asyncio generator (`bench/loads.py`, its own process)"


def _table(table: Table) -> list[str]:
    lines = ["| " + " | ".join(table.columns) + " |"]
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return lines
