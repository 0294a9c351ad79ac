"""Tables people expect: the median and the 20th/80th percentiles beside the mean and std
(frames, JSON, MCP, text), ``runs`` listing date, source, method, status and verdict, a
KernelBench problem's config column reading its sizes, a one-variant table naming its
variant, and a report whose step view never contradicts its own rows."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mcp import Client
from rich.console import Console

from nsight_agent import cli, kernelbench
from nsight_agent.cli import tables
from nsight_agent.engine.collection import aggregate
from nsight_agent.engine.pipeline import RunResult, save_result
from nsight_agent.engine.store import run_status
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.worker.timing_result import summarize
from nsight_agent.server.app import build_server
from nsight_agent.service import runs as run_store
from nsight_agent.service import summaries
from nsight_agent.views import text
from tests.fixture_reports import unpacked

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEM = FIXTURES / "kernelbench" / "problem_linear_relu.py"
NSIGHT_PYTHON = [
    "Annotation", "Metric", "n", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns",
    "Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit", "CI95_Lower", "CI95_Upper",
    "RelativeStdDevPct", "StableMeasurement", "Normalized", "Geomean",
]  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- median and percentiles -------------------------------------------------------------------


def test_the_frames_add_the_median_and_percentiles_after_nsight_pythons_columns() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0]
    raw = pd.DataFrame(
        {"Annotation": "a", "Metric": "t", "n": 1, "Value": values, "Kernel": "k", "GPU": "g"}
        | {"Host": "h", "ComputeClock": 1, "MemoryClock": 1, "Unit": "ns"}
    )
    frame = aggregate.aggregate(raw, ["n"])
    assert list(frame.columns) == [*NSIGHT_PYTHON, "MedianValue", "P20Value", "P80Value"]
    row = frame.iloc[0]
    assert row["MedianValue"] == np.median(values)
    assert row["P20Value"] == pytest.approx(np.percentile(values, 20))
    assert row["P80Value"] == pytest.approx(np.percentile(values, 80))
    # normalized against itself, the mean is 1 and the percentiles stay absolute
    normalized = aggregate.aggregate(raw, ["n"], normalize_against="a").iloc[0]
    assert normalized["AvgValue"] == 1.0 and normalized["P80Value"] == row["P80Value"]
    timed = summarize(values, 1.5)  # the timing path's rows, by the same rule
    assert timed["P20Value"] == pytest.approx(np.percentile(values, 20))
    assert timed["P80Value"] == pytest.approx(np.percentile(values, 80))
    assert summarize([3.0], 1.5)["P20Value"] == 3.0


@pytest.mark.anyio
async def test_profile_answers_carry_median_and_percentiles(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path)
    async with Client(build_server(tmp_path)) as client:
        answer = await client.call_tool("get_run", {"run_id": run.run_id})
    assert not answer.is_error
    frame = run.processed.set_index(["Annotation", "n"])
    for result in answer.structured_content["results"]:
        row = frame.loc[(result["variant"], result["config"]["n"])]
        stat = result["stats"]["gpu__time_duration.sum"]
        assert stat["median"] == pytest.approx(row["MedianValue"], rel=1e-3)
        assert stat["p20"] == pytest.approx(row["P20Value"], rel=1e-3)
        assert stat["p80"] == pytest.approx(row["P80Value"], rel=1e-3)
        assert stat["p20"] <= stat["median"] <= stat["p80"]
    said = answer.content[0].text  # type: ignore[union-attr]
    assert re.search(r"\(median [\d.]+ us, p20-p80 [\d.]+ us-[\d.]+ us, n=3", said), said


def test_a_comparison_shows_each_cells_median_and_percentiles_beside_its_mean(
    sweep: Any, tmp_path: Path
) -> None:
    run = sweep.run(tmp_path)
    s = summaries.compare_summary(run)
    frame = run.processed.set_index(["Annotation", "n"])
    for c in s.configs:
        for name, cell in c.variants.items():
            row = frame.loc[(name, c.config["n"])]
            assert cell.median == pytest.approx(row["MedianValue"], rel=1e-3)
            assert cell.p20 == pytest.approx(row["P20Value"], rel=1e-3)
            assert cell.p80 == pytest.approx(row["P80Value"], rel=1e-3)
            assert cell.time == pytest.approx(row["AvgValue"], rel=1e-3)
    first = s.configs[0].variants
    said = text.render_compare(s)
    for name, cell in first.items():
        assert f"{name} {text.readable(cell.time, s.unit)} (median " in said, said
    console = Console(width=240, record=True)
    console.print(tables.compare(s))
    header = next(line for line in console.export_text().splitlines() if "median" in line)
    words = [w for w in re.split(r"[┃│\s]+", header) if w]
    assert words == [
        "config",
        "variant",
        "mean",
        "median",
        "p20",
        "-",
        "p80",
        "rsd",
        "speedup",
        "verdict",
    ], header


def test_a_one_variant_table_names_its_variant(sweep: Any, tmp_path: Path) -> None:
    name = sweep.variants()[0]
    run = sweep.run(tmp_path, variants=[name])
    s = summaries.profile_summary(run)
    assert all(r.variant is None for r in s.results)  # the JSON leaves it unsaid
    header, *lines = text.render_table(s).splitlines()
    rows = [line for line in lines if not line.startswith("warning: ")]
    assert header.split()[:10] == [
        "variant", "config", "metric", "avg", "std", "median", "p20", "p80", "min", "max",
    ]  # fmt: skip
    assert rows and all(line.split()[0] == name for line in rows), rows
    console = Console(width=240, record=True)
    console.print(tables.profile(s))
    assert console.export_text().count(name) >= len(s.results)


# --- KernelBench sizes ------------------------------------------------------------------------


def test_a_problems_sizes_are_the_constants_its_inputs_read() -> None:
    assert kernelbench.sizes(PROBLEM.read_text()) == {"batch_size": 8, "features": 64}
    source = (
        "class Model:\n    pass\n\nbatch = 4\ndim = 16384\ndim2: int = dim * 2\nunused = 3\n"
        "shape = (batch, dim)\nname = 'xy'\n\n"
        "def get_inputs():\n    return [randn(*shape), randn(batch, dim2), name, unused_call()]\n"
    )
    # a tuple is not a config value (a config could not send it back); a call is never run
    assert kernelbench.sizes(source) == {"batch": 4, "dim2": 32768, "name": "xy"}
    assert kernelbench.sizes("def setup(n, device):\n    return ()\n") == {}


def test_a_kernelbench_comparison_shows_its_sizes_in_the_config_column(
    sweep: Any, tmp_path: Path
) -> None:
    run = sweep.run(tmp_path)
    run.request = run.request.model_copy(
        update={"language": "kernelbench", "source": PROBLEM.read_text()}
    )
    s = summaries.compare_summary(run)
    assert s.configs[0].config == {"batch_size": 8, "features": 64, "n": 4096}
    assert "batch_size=8,features=64,n=4096: " in text.render_compare(s)


def test_a_kernelbench_profile_reads_its_sizes_and_the_run_is_listed_by_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end on this machine (the timing path): the piped table's config column, the
    median columns, the variant named, and `runs` naming the file the run profiled."""
    root = ["--runs-root", str(tmp_path)]
    assert cli.main(["profile", str(PROBLEM), "--method", "timing", "--runs", "3", *root]) == 0
    header, row, *_ = capsys.readouterr().out.splitlines()
    assert header.split()[3:8] == ["avg", "std", "median", "p20", "p80"]
    assert row.split()[:2] == ["ref", "batch_size=8,features=64"], row
    assert cli.main(["runs", "list", *root]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["run", "id", "date", "source", "method", "status", "verdict"]
    assert "problem_linear_relu.py" in listed[1] and "timing (perf_counter)" in listed[1]


# --- runs list --------------------------------------------------------------------------------


def _timing_copy(run: RunResult, run_id: str) -> None:
    run.run_id, run.run_dir = run_id, run.run_dir.parent / run_id
    run.run_dir.mkdir()
    (run.run_dir / "request.json").write_text(run.request.model_dump_json())
    run.facts = RunFacts(method="cupti")
    save_result(run)


def test_runs_lists_date_source_method_status_and_verdict(
    sweep: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compared = sweep.run(tmp_path, run_id="20261201-100000-compare")
    one = sweep.run(tmp_path, variants=[sweep.variants()[0]], run_id="20261201-110000-one")
    run_status.write_status(compared.run_dir, compared.run_id, "passed")
    run_store.name_source(compared.run_dir, "add.py")  # as the command line records it
    _timing_copy(one, "20261201-120000-timing")
    failed = tmp_path / "20261201-130000-failed"
    failed.mkdir()
    run_status.write_status(failed, failed.name, "failed", stage="pre-flight", message="boom")
    (tmp_path / "20261201-140000-partial").mkdir()
    (tmp_path / "20261201-140000-partial" / "request.json").write_text("{}")
    assert cli.main(["runs", "list", "--runs-root", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"# {tmp_path}")
    header, *lines = out.splitlines()
    assert re.split(r"\s{2,}", header) == [
        "run id",
        "date",
        "source",
        "method",
        "status",
        "verdict",
    ]
    rows = {line.split()[0]: re.split(r"\s{2,}", line) for line in lines}
    assert list(rows) == [
        "20261201-140000-partial", "20261201-130000-failed", "20261201-120000-timing",
        "20261201-110000-one", "20261201-100000-compare",
    ]  # fmt: skip
    overall = summaries.compare_summary(compared).overall
    verdict = ", ".join(f"{n} {o.verdict}" for n, o in overall.items() if o.verdict != "baseline")
    started = json.loads((compared.run_dir / "status.json").read_text())["started"]
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    assert rows["20261201-100000-compare"][1:] == [when, "add.py", "ncu", "passed", verdict]
    # no status.json: the date its id was made with, and the kernels it saw for a source name
    assert rows["20261201-110000-one"][1:5] == ["2026-12-01 11:00", "add_kernel", "ncu", "passed"]
    assert rows["20261201-110000-one"][5] in ("stable", "unstable (1 of 3)", "unstable (2 of 3)")
    assert rows["20261201-120000-timing"][3] == "timing (cupti)"
    assert rows["20261201-130000-failed"][4:] == ["failed at pre-flight", "-"]
    assert rows["20261201-140000-partial"][2:] == ["-", "-", "passed", "-"]


# --- report's step view and its rows ----------------------------------------------------------


@pytest.mark.parametrize(
    "report",
    [
        FIXTURES / "engine" / "two_kernels" / "report.ncu-rep",
        FIXTURES / "engine" / "sweep" / "report.ncu-rep",
        FIXTURES / "steps" / "step_chain.ncu-rep.xz",
    ],
)
def test_report_never_contradicts_its_own_rows(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: "bound unknown (SOL 100%)" and gain 0% over rows reading "SOL compute -% memory
    -%": a kernel without speed-of-light metrics is not at its roof, its distance is unknown."""
    assert cli.main(["report", str(unpacked(report)), "--limit", "50"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"SOL compute (\S+)% memory (\S+)%", out)
    groups = re.findall(r"^  \S.{33} \S+\s+\S+%\s+\S+\s+(\S+)\s+.*\(SOL (\S+)%\)$", out, re.M)
    assert rows and groups, out
    measured = any(c != "-" for c, _ in rows)
    for gain, sol in groups:
        if not measured:
            assert (gain, sol) == ("-", "-"), out
        else:
            assert sol != "-" and gain.endswith("%"), out
