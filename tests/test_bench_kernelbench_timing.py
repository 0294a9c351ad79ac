"""bench/kernelbench_timing.py on the CPU: which problems it takes and in what order, the
candidates it writes, the peer's answer among KernelBench's own prints, each problem's two
sides and their ratios, and the summary. The run itself needs a GPU and the KernelBench
checkout (``python -m bench run kernelbench-timing``)."""

from __future__ import annotations

import argparse
import ast
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bench import kernelbench_peer as peer
from bench import kernelbench_timing as bench

TINY = (Path(__file__).parent / "fixtures" / "kernelbench" / "problem_linear_relu.py").read_text()


def test_the_recorded_compile_problems_come_level_2_first_levels_in_turn() -> None:
    problems = bench.recorded_problems(Path("/kb"))
    assert len(problems) == 20
    levels = [p.level for p in problems]
    assert levels[:16] == [2, 1] * 8 and levels[16:] == [1] * 4
    assert problems[0].path == Path("/kb/KernelBench/level2") / problems[0].file


@pytest.mark.parametrize("kind", sorted(bench.TAILS))
def test_each_candidate_is_the_problem_with_a_model_new(kind: str) -> None:
    tree = ast.parse(bench.candidate_source(TINY, kind))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert {"Model", "ModelNew"} <= classes


def test_the_peer_s_answer_is_found_among_kernelbench_s_own_lines() -> None:
    read, write = os.pipe()
    with os.fdopen(write, "w") as out:
        out.write("[Profiling] Using device: cuda:0\n")
        out.write(peer.MARK + '{"new": {"mean_ms": 1.0, "trials": 3}}\n')
    with os.fdopen(read) as stream:
        lines = peer.reader(stream)
        soon = time.monotonic() + 30
        assert peer._answer(lines, soon) == {"new": {"mean_ms": 1.0, "trials": 3}}
        assert peer._answer(lines, soon) is None  # its end: no answer


def args(**extra: Any) -> argparse.Namespace:
    return bench.parse(["--kb", "/kb", *(a for k, v in extra.items() for a in (k, str(v)))])


def test_a_problem_s_limit_shrinks_with_the_budget_left() -> None:
    a = args(**{"--budget-s": 300, "--problem-timeout-s": 240})
    assert bench.limit_s(a, 0.0) == 150.0
    assert bench.limit_s(a, 290.0) == 30.0
    assert bench.limit_s(args(**{"--budget-s": 1000}), 0.0) == 240.0


def test_both_sides_of_a_problem_alternate_and_give_their_ratios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []

    def ours(*_: Any) -> dict[str, Any]:
        order.append("ours")
        return {"ours_speedup": 2.2, "ours_runtime_ms": 1.0, "ours_ref_runtime_ms": 2.2}

    def theirs(*_: Any) -> dict[str, Any]:
        order.append("kernelbench")
        return {"kb_speedup": 2.0, "kb_runtime_ms": 1.1, "kb_ref_runtime_ms": 0.05}

    monkeypatch.setattr(bench, "ours", ours)
    monkeypatch.setattr(bench, "theirs", theirs)
    problem = bench.sweep.Problem(2, Path("/kb/2_X.py"))
    first = bench.one(None, None, problem, 0, args(), 60.0)  # type: ignore[arg-type]
    second = bench.one(None, None, problem, 1, args(), 60.0)  # type: ignore[arg-type]
    assert order == ["ours", "kernelbench", "kernelbench", "ours"]
    assert first["first"] == "ours" and second["first"] == "kernelbench"
    assert first["speedup_ratio"] == pytest.approx(1.1)
    assert first["runtime_ratio"] == pytest.approx(1.0 / 1.1)
    assert first["honest"] is False  # KernelBench's reference under 0.1 ms

    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(bench, "theirs", broken)
    failed = bench.one(None, None, problem, 0, args(), 60.0)  # type: ignore[arg-type]
    assert failed["status"] == "failed" and failed["cause"].startswith("kernelbench: Runtime")
    assert failed["ours_speedup"] == 2.2 and failed["speedup_ratio"] is None


def test_the_summary_counts_agreement_and_disagreements_said() -> None:
    rows = [
        {
            "status": "ok",
            "speedup_ratio": 1.05,
            "honest": True,
            "bases_opposite": True,
            "said": True,
        },
        {"status": "ok", "speedup_ratio": 0.8, "honest": False, "bases_opposite": False},
        {"status": "failed", "speedup_ratio": None},
        {"status": "not_run"},
    ]
    s = bench.summary(rows)
    assert (s["problems"], s["ran"], s["ok"]) == (4, 3, 2)
    assert s["speedup"] == {
        "n": 2,
        "median_abs_dev_pct": 12.5,
        "max_abs_dev_pct": 20.0,
        "within_10pct": 1,
    }
    assert s["speedup_honest"]["n"] == 1 and s["speedup_honest"]["within_10pct"] == 1
    assert (s["bases_opposite"], s["bases_opposite_said"]) == (1, 1)
