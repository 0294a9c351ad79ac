"""The judge package: a run's diagnosis is its report's with what the run knows (its sources'
kernels, its budget, a timed call's wall), the harness's module names read from the request
without rendering, and the gate's rule on a within-run comparison."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from nsight_agent.engine.harness.render import spec_for
from nsight_agent.judge import builds, diagnosis, gate, reading
from nsight_agent.judge.comparison import CompareConfig
from nsight_agent.judge.verdicts import VariantTiming, Verdict
from nsight_agent.request import ProfileRequest
from nsight_agent.views.diagnosis import report_diagnosis

KERNEL = "def setup(n, device):\n    return ()\n\n\ndef run():\n    return {name!r}\n"


def test_a_run_s_diagnosis_is_its_report_s_with_its_budget_and_a_timed_wall(
    sweep: Any, tmp_path: Path
) -> None:
    run = sweep.run(tmp_path)
    run.facts = run.facts.model_copy(
        update={"budget": "budget 5 s: kept SpeedOfLight", "ncu_s": 2.04, "budget_left_out": ["X"]}
    )
    plain = diagnosis.diagnose_report(reading.read_report(run.run_dir / "report.ncu-rep"))
    judged = diagnosis.diagnose_run(run)
    assert [(k.name, k.op, k.share_pct) for k in judged.full] == [
        (k.name, k.op, k.share_pct) for k in plain.full
    ]
    assert judged.kernels_total == plain.kernels_total and plain.budget is None
    assert judged.budget == (
        "budget 5 s: kept SpeedOfLight; ncu took 2.0 s; what they would add: each kernel's deeper"
    )
    timing = SimpleNamespace(processed=pd.DataFrame({"AvgValue": [1000.0, 3000.0, float("nan")]}))
    assert diagnosis.step_wall_ns(timing) == 3000.0  # the largest config's: the one diagnosed
    timed = diagnosis.diagnose_run(run, timing=timing)  # two kernels: a step, with a wall
    assert timed.step is not None and timed.step.wall_us == 3.0
    assert judged.step is not None and judged.step.wall_us is None


def test_the_answer_pages_what_the_judge_decided(sweep: Any, tmp_path: Path) -> None:
    run = sweep.run(tmp_path)
    judged = diagnosis.diagnose_run(run, offset=1, limit=1, one_line=1)
    d = report_diagnosis(judged, "diagnose_kernel(run_id='r', offset={offset})")
    assert [k.diagnosis for k in d.kernels] == [k.diagnosis for k in judged.full]
    assert d.page.offset == 1 and d.page.limit == 1 and d.page.total == judged.kernels_total == 2
    assert d.page.truncated is not None and "diagnose_kernel(run_id='r', offset=0)" in (
        d.page.truncated
    )  # the page before this one
    assert [o.kernel for o in d.others or []] == [k.name[:80] for k in judged.brief]
    assert len(d.others or []) == 1 and d.step == judged.step


@pytest.mark.parametrize(
    "variants",
    [
        [],
        [{"name": "a", "entry": "run"}, {"name": "b", "entry": "run"}],
        [
            {"name": "base", "entry": "run"},
            {"name": "mine", "entry": "run", "source": KERNEL.format(name="mine")},
            {"name": "same", "entry": "run", "source": KERNEL.format(name="main")},
            {"name": "again", "entry": "run", "source": KERNEL.format(name="mine")},
        ],
    ],
)
def test_the_builds_name_each_module_s_variants_as_the_harness_names_them(
    variants: list[dict[str, Any]],
) -> None:
    request = ProfileRequest(
        source=KERNEL.format(name="main"), entry="run", variants=variants, configs=[{"n": 1}]
    )
    spec, _ = spec_for(request, Path())
    rendered: dict[str, list[str]] = {}
    for v in spec["variants"]:
        rendered.setdefault(v["module"], []).append(v["name"])
    assert builds.variants_by_module(request) == rendered


def _config(index: int, verdict: Verdict, speedup: float | None) -> CompareConfig:
    timing = {
        "baseline": VariantTiming(time=100.0, verdict="baseline"),
        "candidate": VariantTiming(time=100.0, verdict=verdict, speedup=speedup),
    }
    return CompareConfig(config_index=index, config={"n": index}, variants=timing)


def test_the_gate_reads_a_within_run_comparison_by_its_rule() -> None:
    quiet = [_config(0, "within_noise", 1.0), _config(1, "faster", 1.5)]
    assert not gate.within_run_regression(quiet, "candidate", None)
    slower = [*quiet, _config(2, "slower", 0.8)]  # 25 % slower
    assert gate.within_run_regression(slower, "candidate", None)
    assert gate.within_run_regression(slower, "candidate", 20.0)
    assert not gate.within_run_regression(slower, "candidate", 30.0)
    assert gate.within_run_regression([*quiet, _config(2, "incorrect", None)], "candidate", 99.0)
    assert not gate.within_run_regression(slower, "absent", None)
