"""Relations of the aggregation that hold for every input, checked with hypothesis.

Aggregation (``engine/collection/aggregate.py``) turns one row per (annotation, call, metric)
into one row per (annotation, metric, config). What it answers must not depend on the order the
runs came in, must be the statistics of each group's values and nothing else, and must refuse a
group whose runs were measured on different GPUs or clocks in whatever order they arrive.
Config expansion sizes and the mirror of verdicts under a swap of baseline and variant are in
``tests/test_judging_request.py`` and ``tests/test_judging_compare.py``.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsight_agent.engine.collection.aggregate import STABLE_RSD_PCT, aggregate
from nsight_agent.errors import ExtractionError

# 25 examples (the aggregation is slow), unless HYPOTHESIS_EXPLORE asks for more (conftest.py).
PROPERTY = settings(
    database=None,
    deadline=None,
    max_examples=25 if settings.default.derandomize else settings.default.max_examples,
)
STATS = ["AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns", "Geomean"]
SETTING = ["Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit"]

finite = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)


@st.composite
def raw_frames(draw: Any, gpus: tuple[str, ...] = ("NVIDIA H200",)) -> pd.DataFrame:
    """A raw frame as extract.raw_frame writes it: annotations x configs x runs x metrics; a
    failed run has NaN values, no GPU ("") and no clocks (NaN)."""
    annotations = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True))
    metrics = draw(
        st.lists(st.sampled_from(["t", "dram", "sm"]), min_size=1, max_size=2, unique=True)
    )
    sizes = draw(st.lists(st.integers(1, 1 << 20), min_size=1, max_size=3, unique=True))
    runs = draw(st.integers(1, 4))
    rows = []
    for ann in annotations:
        for n in sizes:
            for run in range(runs):
                failed = draw(st.booleans()) and draw(st.booleans())  # about a quarter
                gpu = draw(st.sampled_from(gpus))
                for m in metrics:
                    rows.append(
                        {
                            "Annotation": ann,
                            "Value": math.nan if failed else draw(finite),
                            "Metric": m,
                            "Kernel": "" if failed else f"k_{ann}",
                            "GPU": "" if failed else gpu,
                            "Host": "host",
                            "ComputeClock": math.nan if failed else 1980.0,
                            "MemoryClock": math.nan if failed else 3201.0,
                            "Unit": "ns",
                            "n": n,
                            "_run": run,
                        }
                    )
    return pd.DataFrame(rows)


def _raw(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["_run"])


def _by_group(out: pd.DataFrame) -> pd.DataFrame:
    return out.sort_values(["Annotation", "Metric", "n"]).reset_index(drop=True)


def _noise(*frames: pd.DataFrame) -> float:
    """Float noise at the frames' largest magnitude: the spread of nearly equal values is a
    difference of large sums, so its error is relative to the values, not to itself (seen:
    StdDev 7.071067811794e-06 vs ...872e-06 summed in another order; 4.66e-10 vs 3.49e-10
    after scaling)."""
    largest = max(float(f[["MinValue", "MaxValue"]].abs().max().max()) for f in frames)
    return 1e-12 * max(1.0, largest if math.isfinite(largest) else 1.0)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, atol=_noise(a, b))


@PROPERTY
@given(raw_frames(), st.randoms(use_true_random=False))
def test_aggregation_does_not_depend_on_the_order_of_the_rows(
    frame: pd.DataFrame, rnd: Any
) -> None:
    """Any order of the rows: the same groups with the same statistics (only the order of the
    output rows follows the first appearance of each group)."""
    order = list(range(len(frame)))
    rnd.shuffle(order)
    first = aggregate(_raw(frame), ["n"])
    shuffled = aggregate(_raw(frame.iloc[order]), ["n"])
    _same(_by_group(first), _by_group(shuffled))


@PROPERTY
@given(raw_frames(), st.randoms(use_true_random=False))
def test_reordering_runs_inside_each_config_changes_nothing(frame: pd.DataFrame, rnd: Any) -> None:
    """Runs of one config in another order (the groups first seen in the same order): the
    output is identical, row order included."""
    runs = sorted(frame["_run"].unique())
    rnd.shuffle(runs)
    rank = {r: i for i, r in enumerate(runs)}
    keys = ["Annotation", "n"]
    block = frame.groupby(keys, sort=False).ngroup()
    reordered = frame.assign(_block=block, _rank=frame["_run"].map(rank)).sort_values(
        ["_block", "_rank"], kind="stable"
    )
    _same(
        aggregate(_raw(frame), ["n"]),
        aggregate(_raw(reordered.drop(columns=["_block", "_rank"])), ["n"]),
    )


@PROPERTY
@given(raw_frames())
def test_each_group_holds_the_statistics_of_its_own_values(frame: pd.DataFrame) -> None:
    out = aggregate(_raw(frame), ["n"])
    assert len(out) == len(frame.groupby(["Annotation", "Metric", "n"]))
    assert out["NumRuns"].sum() == frame["Value"].notna().sum()
    for row in out.itertuples():
        mine = frame[
            (frame.Annotation == row.Annotation) & (frame.Metric == row.Metric) & (frame.n == row.n)
        ]["Value"].dropna()
        assert row.NumRuns == len(mine)
        if mine.empty:
            assert math.isnan(row.AvgValue)
            continue
        assert row.AvgValue == pytest.approx(statistics.fmean(mine), rel=1e-12)
        assert row.MinValue == mine.min() and row.MaxValue == mine.max()
        assert row.MinValue <= row.AvgValue * (1 + 1e-12) and row.AvgValue <= row.MaxValue * (
            1 + 1e-12
        )
        if len(mine) > 1:
            assert row.StdDev == pytest.approx(statistics.stdev(mine), rel=1e-9, abs=1e-9)
            assert row.CI95_Lower <= row.AvgValue <= row.CI95_Upper
            assert row.StableMeasurement == (row.RelativeStdDevPct < STABLE_RSD_PCT)
        assert row.GPU == "NVIDIA H200" and row.ComputeClock == 1980.0


@PROPERTY
@given(raw_frames(), st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_every_value_scales_averages_and_geomeans(frame: pd.DataFrame, c: float) -> None:
    """Units (ns -> us) must not change the shape of the answer: every mean, bound and geomean
    scales by the same factor; counts and stability do not change."""
    base = aggregate(_raw(frame), ["n"])
    scaled = aggregate(_raw(frame.assign(Value=frame["Value"] * c)), ["n"])
    noise = _noise(base, scaled)
    for col in ["AvgValue", "StdDev", "MinValue", "MaxValue", "Geomean", "CI95_Lower"]:
        np.testing.assert_allclose(scaled[col], base[col] * c, rtol=1e-9, atol=noise)
    assert scaled["NumRuns"].tolist() == base["NumRuns"].tolist()
    # Equal values give an RSD of float noise (2e-14 %, seen) that scaling can make exactly 0.
    np.testing.assert_allclose(
        scaled["RelativeStdDevPct"], base["RelativeStdDevPct"], rtol=1e-6, atol=1e-9
    )


@PROPERTY
@given(raw_frames())
def test_normalising_against_an_annotation_makes_it_one(frame: pd.DataFrame) -> None:
    first = frame["Annotation"].iloc[0]
    out = aggregate(_raw(frame), ["n"], normalize_against=first)
    plain = aggregate(_raw(frame), ["n"])
    own = out[out.Annotation == first]
    measured = own[own["NormalizationValue"].notna() & (own["NormalizationValue"] != 0)]
    assert (measured["AvgValue"] == 1.0).all()
    merged = plain.merge(
        plain[plain.Annotation == first][["Metric", "n", "AvgValue"]].rename(
            columns={"AvgValue": "base"}
        ),
        on=["Metric", "n"],
    )
    for row in out.itertuples():
        want = merged[
            (merged.Annotation == row.Annotation)
            & (merged.Metric == row.Metric)
            & (merged.n == row.n)
        ].iloc[0]
        if math.isnan(want.AvgValue) or math.isnan(want.base) or want.base == 0:
            continue
        assert row.AvgValue == pytest.approx(want.AvgValue / want.base, rel=1e-12)


# ------------------------------------------------------------- one GPU, one clock setting


@PROPERTY
@given(raw_frames(gpus=("NVIDIA H200", "NVIDIA H100 80GB HBM3")), st.randoms(use_true_random=False))
def test_runs_on_two_gpus_are_refused_in_any_order(frame: pd.DataFrame, rnd: Any) -> None:
    """A group with rows from two GPUs raises, whatever the order; a frame where every group
    has one GPU (failed runs, with none, aside) aggregates."""
    present = frame[frame["GPU"] != ""]
    mixed = (present.groupby(["Annotation", "Metric", "n"])["GPU"].nunique() > 1).any()
    order = list(range(len(frame)))
    rnd.shuffle(order)
    for candidate in (frame, frame.iloc[order]):
        if mixed:
            with pytest.raises(ExtractionError, match="different GPUs"):
                aggregate(_raw(candidate), ["n"])
        else:
            aggregate(_raw(candidate), ["n"])


@PROPERTY
@given(
    raw_frames(),
    st.sampled_from(["ComputeClock", "MemoryClock"]),
    st.floats(min_value=100.0, max_value=5000.0),
)
def test_one_run_at_another_clock_is_refused(
    frame: pd.DataFrame, column: str, clock: float
) -> None:
    ok = frame.index[frame["GPU"] != ""]
    if len(ok) == 0 or clock == frame.loc[ok[0], column]:
        return
    # one run (all of its metric rows) of one config measured at another clock
    first = frame.loc[ok[0]]
    same_run = (
        (frame.Annotation == first.Annotation) & (frame.n == first.n) & (frame._run == first._run)
    )
    others = frame[
        (frame.Annotation == first.Annotation)
        & (frame.n == first.n)
        & ~same_run
        & (frame.GPU != "")
    ]
    changed = frame.copy()
    changed.loc[same_run, column] = clock
    what = "SM clocks" if column == "ComputeClock" else "memory clocks"
    if others.empty:  # the only measured run of its config: nothing to disagree with
        aggregate(_raw(changed), ["n"])
    else:
        with pytest.raises(ExtractionError, match=what):
            aggregate(_raw(changed), ["n"])


def test_the_refusal_names_the_group_and_the_values() -> None:
    frame = pd.DataFrame(
        {
            "Annotation": ["fused"] * 3, "Value": [1.0, 2.0, 3.0], "Metric": ["t"] * 3,
            "Kernel": ["k"] * 3, "GPU": ["NVIDIA H200", "", "NVIDIA H100"], "Host": ["h"] * 3,
            "ComputeClock": [1980.0, math.nan, 1980.0], "MemoryClock": [3201.0] * 3,
            "Unit": ["ns"] * 3, "n": [np.int64(4096)] * 3,
        }
    )  # fmt: skip
    with pytest.raises(ExtractionError) as err:
        aggregate(frame, ["n"])
    text = str(err.value)
    assert "different GPUs (annotation 'fused', metric 't', n=4096): 'NVIDIA H200', " in text
    assert "'NVIDIA H100'. Averaging them would describe none of them." in text
    assert "Hint: Profile each GPU and clock setting in a run of its own" in text
    # the failed run (no GPU, no clock) alone never disagrees
    ok = frame.assign(GPU=["NVIDIA H200", "", "NVIDIA H200"])
    out = aggregate(ok, ["n"])
    assert out.GPU.tolist() == ["NVIDIA H200"] and out.ComputeClock.tolist() == [1980.0]
    assert out.NumRuns.tolist() == [3]


@pytest.mark.parametrize(
    ("column", "values", "what"),
    [
        ("Host", ["a", "b"], "hosts"),
        ("Unit", ["ns", "us"], "units"),
        ("MemoryClock", [3201.0, 2619.0], "memory clocks"),
    ],
)
def test_other_settings_that_must_agree(column: str, values: list[Any], what: str) -> None:
    frame = pd.DataFrame(
        {
            "Annotation": ["a"] * 2, "Value": [1.0, 2.0], "Metric": ["t"] * 2, "Kernel": ["k"] * 2,
            "GPU": ["g"] * 2, "Host": ["h"] * 2, "ComputeClock": [1980.0] * 2,
            "MemoryClock": [3201.0] * 2, "Unit": ["ns"] * 2, "n": [1, 1],
        }
    )  # fmt: skip
    frame[column] = values
    with pytest.raises(ExtractionError, match=f"different {what}"):
        aggregate(frame, ["n"])
    # the same two values in two configs are two groups: no disagreement
    aggregate(frame.assign(n=[1, 2]), ["n"])
    # ... and the kernel name is not a setting: runs may name their kernel differently
    aggregate(frame.assign(**{column: values[:1] * 2}, Kernel=["k1", "k2"]), ["n"])
    assert column in SETTING
