"""The bench runner's results files: where they land, what they hold, and the suites by name."""

from __future__ import annotations

import json
from pathlib import Path

from bench import results, suites
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


def test_every_suite_is_listed_by_name(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["list"]) == 0
    listed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(suites.SUITES)
    assert set(listed) == {
        "gpu-tests",
        "conformance",
        "examples",
        "adversarial",
        "builds",
        "kernelbench",
    }


def test_the_kernelbench_sample_names_recorded_problems() -> None:
    """Each sampled problem has a row in the recorded sweep, so the new run sits beside it."""
    timing, diagnose = suites._recorded("timing"), suites._recorded("diagnose")
    assert all(any(f == name for _, f in timing) for name in suites.KB_TIMING_SAMPLE)
    assert all(any(f == name for _, f in diagnose) for name in suites.KB_DIAGNOSE_SAMPLE)
