"""The bench runner's results files: where they land, what they hold, and the suites by name."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from bench import kernelbench_sweep, results, steps, suite_verdicts, suites
from bench.__main__ import main


def test_a_results_file_holds_the_environment_and_the_figures(tmp_path: Path) -> None:
    path = results.write("demo-suite", {"inputs": {"n": 1}, "figure": 2.5}, tmp_path)
    assert path.parent == tmp_path / "demo-suite"
    env = results.environment()
    assert (
        path.name
        == f"{env['date'][:10]}-{results.slug(env['gpu'])}-"
        + env["commit"].replace("+", "-")
        + ".json"
    )
    data = json.loads(path.read_text())
    assert data["suite"] == "demo-suite" and data["figure"] == 2.5
    assert set(data["environment"]) >= {"date", "commit", "gpu", "driver", "ncu", "python"}
    assert results.latest("demo-suite", tmp_path) == data
    assert results.latest("demo-suite", tmp_path, before=path) is None


def test_gpu_names_become_short_file_names() -> None:
    assert results.slug("NVIDIA H200") == "h200"
    assert results.slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert results.slug(None) == "cpu"


def test_every_suite_is_listed_with_its_limit_and_results_file(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(suites.SUITES)
    for name, line in zip(suites.SUITES, lines, strict=True):
        limit = suites.SUITES[name].limit_s
        assert f"limit {limit} s; writes bench/results/{name}/<date>-<gpu>-<commit>.json; " in line
        assert 0 < limit <= 540, f"{name}: one suite must fit one 600 s command"
    assert {
        "gpu-tests",
        "conformance",
        "examples",
        "mcp-session",
        "adversarial",
        "kernelbench",
        "perf",
        "prelaunch",
        "effect-size",
        "section-costs",
        "gate-under-load",
    } <= set(suites.SUITES)


def test_testing_md_names_every_suite_with_its_limit() -> None:
    text = (results.ROOT / "docs" / "TESTING.md").read_text().split("## The bench suites")[1]
    for name, suite in suites.SUITES.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")), "")
        assert f"| {suite.limit_s} s |" in row, name


FILE_NAME = re.compile(r"\d{4}-\d\d-\d\d-[a-z0-9-]+-([0-9a-f]{7}(-dirty)?|unrecorded)\.json")


def test_every_results_file_is_a_suite_s_and_names_where_it_ran() -> None:
    folders = [p for p in results.RESULTS.iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        assert folder.name in suites.SUITES or folder.name in suites.RECORDED, folder.name
        for path in folder.iterdir():
            assert FILE_NAME.fullmatch(path.name), path
            data = json.loads(path.read_text())
            assert data["suite"] == folder.name
            assert path.name == results.file_name(data["environment"])
            assert set(data["environment"]) >= {"date", "commit", "gpu", "driver", "ncu", "python"}


def test_the_kernelbench_sample_names_recorded_problems() -> None:
    """Each sampled problem has a row in the recorded sweep, so the new run sits beside it."""
    timing = suite_verdicts.recorded_sweep("timing")
    diagnose = suite_verdicts.recorded_sweep("diagnose")
    assert all(any(f == name for _, f in timing) for name in suite_verdicts.KB_TIMING_SAMPLE)
    assert all(any(f == name for _, f in diagnose) for name in suite_verdicts.KB_DIAGNOSE_SAMPLE)


def test_a_merged_sweep_becomes_a_results_file_with_the_runs_environment(tmp_path: Path) -> None:
    row = {"phase": "timing", "index": 0, "level": 1, "status": "ok", "cause": None, "seconds": 1.0}
    metas = [
        {
            "date": "2026-01-01 10:00 UTC",
            "commit": "1111111",
            "gpu": "NVIDIA H200, 580.1",
            "ncu": "Version 2025.3.1.0",
            "python": "3.12.3",
            "torch": "2.11.0",
        },
        {
            "date": "2026-01-02 11:00 UTC",
            "commit": "2222222",
            "gpu": "NVIDIA H200, 580.1",
            "ncu": "Version 2025.3.1.0",
            "python": "3.12.3",
        },
    ]
    parts = []
    for k, meta in enumerate(metas):
        part = tmp_path / f"part{k}.json"
        part.write_text(json.dumps({"meta": meta, "rows": [{**row, "file": f"{k}_P.py"}]}))
        parts.append(str(part))
    out = ["--out", str(tmp_path / "merged"), "--results", str(tmp_path / "results")]
    assert kernelbench_sweep.main([*out, "--merge", *parts]) == 0
    (path,) = (tmp_path / "results" / "kernelbench-sweep").iterdir()
    assert path.name == "2026-01-02-h200-2222222.json"
    data = json.loads(path.read_text())
    assert data["environment"] == {
        "date": "2026-01-02 11:00 UTC",
        "commit": "2222222",
        "gpu": "NVIDIA H200",
        "driver": "580.1",
        "ncu": "Version 2025.3.1.0",
        "python": "3.12.3",
        "torch": results.UNRECORDED,
        "commits": ["1111111", "2222222"],
    }
    assert [r["file"] for r in data["rows"]] == ["0_P.py", "1_P.py"]


def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    argv = ["bash", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"]
    done = steps.command(argv, 2)
    assert done["rc"] == 124 and "started" in done["stdout"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)
    found = steps.script(argv, 1, tmp_path / "never.json")
    assert found["results"] is None and found["run"]["rc"] == 124


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split()[2] == "Z")  # a zombie is gone


def test_a_pytest_step_keeps_each_failures_traceback_and_starts_nothing_past_its_limit(
    tmp_path: Path,
) -> None:
    cases = tmp_path / "test_cases.py"
    cases.write_text(
        "import time\n\nimport pytest\n\n\n"
        "@pytest.mark.gpu_fault\ndef test_wrong() -> None:\n    assert 1 + 1 == 3, 'planted'\n\n\n"
        "@pytest.mark.gpu_fault\ndef test_slow() -> None:\n    time.sleep(4)\n\n\n"
        "@pytest.mark.gpu_fault\ndef test_late() -> None:\n    pass\n"
    )
    limit = steps.SESSION_MARGIN_S + 3  # pytest starts no test 3 s after it began
    step = steps.pytest_step(
        tmp_path, "cases", "gpu_fault", ["-p", "no:randomly", str(cases)], limit
    )
    by_name = {c["test"].rsplit("::", 1)[-1]: c for c in step["tests"]}
    assert by_name["test_wrong"]["outcome"] == "failed"
    assert "planted" in by_name["test_wrong"]["why"] and "assert" in by_name["test_wrong"]["why"]
    assert by_name["test_slow"]["outcome"] == "passed" and "why" not in by_name["test_slow"]
    assert "test_late" not in by_name and step["rc"] != 124


def test_run_within_starts_no_suite_whose_limit_no_longer_fits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def quick(scratch: Path) -> dict[str, Any]:
        """A stand-in suite."""
        ran.append("quick")
        return {}

    def long(scratch: Path) -> dict[str, Any]:
        """A stand-in suite too long for what is left."""
        ran.append("long")
        return {}

    stand_ins = {
        "quick": suites.Suite(quick, {"step": 10}),
        "long": suites.Suite(long, {"step": 500}),
    }
    monkeypatch.setattr(suites, "SUITES", stand_ins)
    out = ["--results", str(tmp_path)]
    assert main(["run", "quick", "long", "quick", *out, "--within", "100"]) == 3
    assert ran == ["quick", "quick"]
    assert "not started: long (limit 500 s, 100 s left)" in capsys.readouterr().out
    assert len(list((tmp_path / "quick").glob("*.json"))) >= 1 and not (tmp_path / "long").exists()
    assert main(["run", "quick", *out]) == 0


def test_a_scripts_data_is_printed_and_kept_under_out_only_when_out_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {"medians_s": {"wall": 2.26}, "rounds": [1, 2]}
    results.emit(data, None, "probe.json")
    assert json.loads(capsys.readouterr().out) == data
    assert list(tmp_path.iterdir()) == []
    results.emit(data, tmp_path / "out", "probe.json")
    assert json.loads(capsys.readouterr().out) == data
    assert json.loads((tmp_path / "out" / "probe.json").read_text()) == data
