"""A run's facts: typed at construction, stored in result.json as ``facts`` and read back the
same, and a result.json that keeps them in the untyped ``extra`` mapping still loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import ValidationError

from nsight_agent.engine.store.facts import RanOn, RunFacts
from nsight_agent.engine.store.runs import RunResult, load_run, save_result
from nsight_agent.request import ProfileRequest

RUN_ID = "20260101-000000-abcdef"
EVERY_FACT = RunFacts(
    method="perf_counter",
    order=[(0, 0, "base"), (0, 0, "new")],
    cpu_probe_ns=[101.5, 99.0, 100.25],
    collection="cold: no pre-launched targets here",
    collected_plain="served without operator ranges",
    budget="budget 8 s: est. 7.1 s; left out WarpStateStats (est. +0.7 s)",
    budget_left_out=["WarpStateStats"],
    ncu_s=6.5,
    ncu_kernels=18,
    ncu_passes=180.0,
    profile_cuda_build={"cache_hit": True, "seconds": 0.25},
    executor=RanOn(node="gpu-7", gpu="1", pid=4242, started=1.5, ended=9.25),
)


def stored_run(root: Path, facts: RunFacts) -> Path:
    """A passed run with these facts saved the way the pipeline saves one."""
    run_dir = root / RUN_ID
    run_dir.mkdir(parents=True)
    request = ProfileRequest(source="def setup(n, device):\n    return ()\n", configs=[{"n": 1}])
    (run_dir / "request.json").write_text(request.model_dump_json())
    frame = pd.DataFrame({"Annotation": ["run"], "n": [1], "AvgValue": [1.5]})
    save_result(
        RunResult(
            run_id=RUN_ID,
            run_dir=run_dir,
            request=request,
            processed=frame,
            raw=frame,
            checks=[],
            kernels={"run": []},
            warnings=[],
            artifacts={},
            seconds=1.0,
            facts=facts,
        )
    )
    return run_dir


def rewrite_result(run_dir: Path, **fields: Any) -> None:
    data = json.loads((run_dir / "result.json").read_text())
    data.pop("facts", None)
    (run_dir / "result.json").write_text(json.dumps({**data, **fields}))


def test_every_fact_comes_back_from_the_store_as_it_went_in(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path, EVERY_FACT)
    stored = json.loads((run_dir / "result.json").read_text())
    assert "extra" not in stored and set(stored["facts"]) == set(RunFacts.model_fields)
    loaded = load_run(RUN_ID, runs_root=tmp_path).facts
    assert loaded == EVERY_FACT
    assert loaded.order[0] == (0, 0, "base")  # a tuple again, not JSON's list


def test_the_store_keeps_only_the_facts_a_run_recorded(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path, RunFacts(collection="pre-launched", ncu_s=2.0))
    stored = json.loads((run_dir / "result.json").read_text())
    assert stored["facts"] == {"collection": "pre-launched", "ncu_s": 2.0}
    assert load_run(RUN_ID, runs_root=tmp_path).facts.budget_left_out == []


def test_a_result_json_with_the_untyped_extra_mapping_loads(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path, RunFacts())
    extra = {
        "method": "cupti",
        "order": [[0, 1, "base"], [0, 1, "new"]],
        "cpu_probe_ns": [],
        "collection": "pre-launched",
        "budget_left_out": ["Occupancy"],
        "ncu_passes": 12,
        "profile_cuda_build": None,
        "retired_fact": {"anything": 1},  # known to no field: dropped quietly
    }
    rewrite_result(run_dir, extra=extra)
    facts = load_run(RUN_ID, runs_root=tmp_path).facts
    assert facts.method == "cupti" and facts.order == [(0, 1, "base"), (0, 1, "new")]
    assert facts.collection == "pre-launched" and facts.budget_left_out == ["Occupancy"]
    assert facts.ncu_passes == 12.0 and facts.ncu_s is None and facts.executor is None


def test_a_stored_fact_that_cannot_be_read_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    run_dir = stored_run(tmp_path, RunFacts())
    rewrite_result(run_dir, facts={"method": "sundial", "ncu_s": "slow", "collection": "cold"})
    facts = load_run(RUN_ID, runs_root=tmp_path).facts
    assert (facts.method, facts.ncu_s, facts.collection) == (None, None, "cold")
    rewrite_result(run_dir, facts=["not", "a", "mapping"])
    assert load_run(RUN_ID, runs_root=tmp_path).facts == RunFacts()


def test_a_misspelt_or_mistyped_fact_is_refused_where_it_is_written() -> None:
    with pytest.raises(ValidationError, match="colection"):
        RunFacts(colection="pre-launched")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="method"):
        RunFacts(method="stopwatch")  # type: ignore[arg-type]
    facts = RunFacts()
    with pytest.raises(ValidationError, match="budget_left_out"):
        facts.budget_left_out = "WarpStateStats"  # type: ignore[assignment]
    with pytest.raises(ValidationError, match="ncu_second"):
        facts.ncu_seconds = 2.0  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="pid"):
        RanOn(node="n", gpu="0", pid="main", started=0.0, ended=1.0)  # type: ignore[arg-type]


def test_every_fact_says_what_it_is() -> None:
    undocumented = [n for n, f in RunFacts.model_fields.items() if not f.description]
    assert not undocumented, undocumented
