"""The ncu path's work check (engine/collection/check.py): a variant whose kernels do a small
fraction of the baseline's DRAM bytes *and* instructions is suspect; honest rewrites that cut
one of the two are not."""

from __future__ import annotations

import pandas as pd
import pytest

from nsight_agent.engine.collection import check
from nsight_agent.request import TIME_METRIC, ProfileRequest, Variant

SOURCE = "def setup(n):\n    return ()\n\ndef run():\n    return 0\n\ndef b():\n    return 0\n"


def compare(
    metrics: list[str] | None = None, names: tuple[str, ...] = ("run", "b")
) -> ProfileRequest:
    return ProfileRequest(
        source=SOURCE,
        configs={"n": [1, 2]},
        variants=[Variant(name=n, entry=n) for n in names],
        metrics=metrics or [TIME_METRIC],
    )


def frame(rows: dict[tuple[str, int], tuple[float, float]]) -> pd.DataFrame:
    """Processed rows: (annotation, n) -> (DRAM bytes, instructions), plus a time row."""
    out = []
    for (annotation, n), (dram, inst) in rows.items():
        for metric, value in ((check.DRAM_BYTES, dram), (check.INSTRUCTIONS, inst)):
            out.append({"Annotation": annotation, "n": n, "Metric": metric, "AvgValue": value})
        out.append({"Annotation": annotation, "n": n, "Metric": TIME_METRIC, "AvgValue": 1e3})
    return pd.DataFrame(out)


def test_the_work_metrics_are_collected_only_when_variants_are_compared() -> None:
    assert check.collected_metrics(compare(names=("run",))) == [TIME_METRIC]
    assert check.collected_metrics(compare()) == [TIME_METRIC, *check.WORK_METRICS]
    assert check.added_metrics(compare()) == list(check.WORK_METRICS)
    # Asked for by the user: collected once, and kept in the answer.
    asked = compare([TIME_METRIC, check.DRAM_BYTES])
    assert check.collected_metrics(asked) == [TIME_METRIC, check.DRAM_BYTES, check.INSTRUCTIONS]
    assert check.added_metrics(asked) == [check.INSTRUCTIONS]


def test_a_token_kernel_is_suspect_where_it_does_a_fraction_of_the_work() -> None:
    rows = {
        ("run", 1): (8e6, 4e6),
        ("b", 1): (8e4, 1e3),  # 1 % of the bytes, 0.025 % of the instructions
        ("run", 2): (8e6, 4e6),
        ("b", 2): (8e6, 4e6),
    }
    found = check.work_suspects(frame(rows), compare())
    assert [(s.variant, s.config_index) for s in found] == [("b", 0)]
    assert found[0].reason.startswith(
        "its kernels moved 1.0% of the baseline's DRAM bytes and executed 0.0% of its instructions"
    )


@pytest.mark.parametrize(
    ("dram", "inst"),
    [
        (0.5e6, 4e6),  # a fusion that keeps its data in cache: bytes cut, instructions not
        (8e6, 0.1e6),  # tensor cores instead of FMA: instructions cut, bytes not
        (0.8e6, 0.4e6),  # exactly 10 % of both: not under the cut
    ],
)
def test_an_honest_rewrite_that_cuts_one_kind_of_work_is_not_flagged(
    dram: float, inst: float
) -> None:
    rows = {("run", 1): (8e6, 4e6), ("b", 1): (dram, inst)}
    assert check.work_suspects(frame(rows), compare()) == []


def test_nothing_is_judged_where_the_baseline_does_almost_no_work_or_values_are_missing() -> None:
    tiny = {("run", 1): (0.9e6, 4e6), ("b", 1): (0.0, 0.0)}  # baseline under 1 MB of DRAM
    assert check.work_suspects(frame(tiny), compare()) == []
    few = {("run", 1): (8e6, 0.9e5), ("b", 1): (0.0, 0.0)}  # baseline under 1e5 instructions
    assert check.work_suspects(frame(few), compare()) == []
    nan = {("run", 1): (8e6, 4e6), ("b", 1): (float("nan"), 0.0)}
    assert check.work_suspects(frame(nan), compare()) == []
    lone = frame({("b", 1): (0.0, 0.0)})  # no baseline row at this config
    assert check.work_suspects(lone, compare()) == []
    times_only = frame({("run", 1): (8e6, 4e6), ("b", 1): (0.0, 0.0)})
    times_only = times_only[times_only["Metric"] == TIME_METRIC]
    assert check.work_suspects(times_only, compare()) == []


def test_the_rows_collected_for_the_check_leave_the_answer() -> None:
    rows = frame({("run", 1): (8e6, 4e6), ("b", 1): (8e6, 4e6)})
    kept = check.without(rows, check.added_metrics(compare()))
    assert set(kept["Metric"]) == {TIME_METRIC} and len(kept) == 2
    assert list(kept.index) == [0, 1]
    assert check.without(rows, []) is rows


def test_report_counters_are_collected_but_not_read_into_rows() -> None:
    """diagnose's one pass asks ncu for the memory tables' counters by name: the ncu command
    collects them, the rows do not need them (a kernel without one is no error)."""
    req = ProfileRequest(
        source="def run(n):\n    pass\n",
        language="torch",
        configs={"n": [1]},
        metrics=["gpu__time_duration.sum"],
        report_counters=["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"],
    )
    assert check.collected_metrics(req) == [
        "gpu__time_duration.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    ]
    assert check.row_metrics(req) == ["gpu__time_duration.sum"]
    with pytest.raises(ValueError, match="one name per list entry"):
        req.model_validate({**req.model_dump(), "report_counters": ["a.sum,b.sum"]})
