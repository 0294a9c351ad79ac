"""The comparison (judge/verdicts.py, judge/comparison.py) held at its edges: the interval rule's boundaries, its symmetry under
swapping baseline and variant (hypothesis), the per-variant counts, and a whole comparison on a
small frame whose every number is written out here."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsight_agent import wording
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge import verdicts
from nsight_agent.judge.verdicts import config_verdict, variant_overall
from nsight_agent.service import summaries

TIME = "gpu__time_duration.sum"
US = 1000.0  # ns
# no example database in the checkout; no deadline on a loaded two-core machine
PROPERTY = settings(database=None, deadline=None)


def row(mean: float | None, lo: float | None, hi: float | None) -> dict[str, Any]:
    return {"AvgValue": mean, "CI95_Lower": lo, "CI95_Upper": hi}


# --- config_verdict ---------------------------------------------------------------------------


def test_the_interval_rule_at_its_boundaries() -> None:
    base = row(100.0, 98.0, 102.0)
    assert config_verdict(row(90.0, 88.0, 97.999), base) == "faster"
    assert config_verdict(row(90.0, 88.0, 98.0), base) == "within_noise"  # touching
    assert config_verdict(row(110.0, 102.001, 112.0), base) == "slower"
    assert config_verdict(row(110.0, 102.0, 112.0), base) == "within_noise"  # touching


def test_separated_intervals_need_the_minimum_effect_too() -> None:
    """A 1 % change with tight intervals is noise-sized: within_noise, its speedup still shown;
    5 % is slower at the default (3 %); the threshold is the request's, either way."""
    base = row(100.0, 99.9, 100.1)
    assert verdicts.MIN_EFFECT_PCT == 3.0
    assert config_verdict(row(99.0, 98.95, 99.05), base) == "within_noise"
    assert config_verdict(row(101.0, 100.95, 101.05), base) == "within_noise"
    assert config_verdict(row(105.0, 104.9, 105.1), base) == "slower"
    assert config_verdict(row(96.0, 95.9, 96.1), base) == "faster"  # 100/96 = 1.0417
    assert config_verdict(row(97.2, 97.1, 97.3), base) == "within_noise"  # 100/97.2 = 1.029
    assert config_verdict(row(99.0, 98.95, 99.05), base, 0.0) == "faster"  # intervals alone
    assert config_verdict(row(105.0, 104.9, 105.1), base, 6.0) == "within_noise"
    assert "at least 3% (options.min_effect_pct)" in verdicts.verdict_rule()
    assert "at least 6%" in verdicts.verdict_rule(6.0)


def test_a_time_change_below_the_ns_floor_is_within_noise() -> None:
    """At 1.3 us a 61 ns (4.6 %) change with separated intervals is timing jitter on the H200:
    the time metric's 100 ns floor keeps it within noise; 200 ns (15 %) is faster; a metric
    that is not a time has no floor."""
    base = row(1330.0, 1325.0, 1335.0)
    assert config_verdict(row(1269.0, 1265.0, 1273.0), base) == "faster"  # no floor given
    floor = verdicts.effect_floor(TIME)
    assert floor == 100.0 and verdicts.effect_floor("dram__bytes.sum") == 0.0
    assert config_verdict(row(1269.0, 1265.0, 1273.0), base, 3.0, floor) == "within_noise"
    assert config_verdict(row(1130.0, 1125.0, 1135.0), base, 3.0, floor) == "faster"
    assert "and 100 ns" in verdicts.verdict_rule()


def test_a_missing_bound_of_either_interval_is_within_noise() -> None:
    base = row(100.0, 98.0, 102.0)
    fast = row(50.0, 49.0, 51.0)
    for key in ("CI95_Lower", "CI95_Upper"):
        assert config_verdict({**fast, key: None}, base) == "within_noise"
        assert config_verdict(fast, {**base, key: None}) == "within_noise"
    assert config_verdict(fast, base) == "faster"


def test_no_data_when_either_mean_is_missing() -> None:
    base = row(100.0, 98.0, 102.0)
    assert config_verdict(base, row(None, 1.0, 2.0)) == "no_data"
    assert config_verdict(row(float("inf"), 1.0, 2.0), base) == "no_data"


interval = st.tuples(
    st.floats(min_value=1.0, max_value=1e9, allow_nan=False),
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
)


def _as_row(iv: tuple[float, float]) -> dict[str, Any]:
    mean, half = iv
    return row(mean, mean - half, mean + half)


MIRROR = {"faster": "slower", "slower": "faster", "within_noise": "within_noise"}


@PROPERTY
@given(interval, interval)
def test_the_verdict_mirrors_when_baseline_and_variant_swap(
    a: tuple[float, float], b: tuple[float, float]
) -> None:
    forward = config_verdict(_as_row(a), _as_row(b))
    assert config_verdict(_as_row(b), _as_row(a)) == MIRROR[forward]
    assert config_verdict(_as_row(a), _as_row(a)) == "within_noise"


@PROPERTY
@given(interval, interval)
def test_faster_means_the_whole_interval_is_below(
    a: tuple[float, float], b: tuple[float, float]
) -> None:
    verdict = config_verdict(_as_row(a), _as_row(b))
    (ma, ha), (mb, hb) = a, b
    if verdict == "faster":
        assert ma + ha < mb - hb * (1 - 1e-11)
    if verdict == "slower":
        assert ma - ha > mb + hb * (1 - 1e-11)


# --- variant_overall --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "faster", "slower", "expected"),
    [
        (["slower", "slower", "slower"], 0, 3, "slower"),
        (["slower", "within_noise"], 0, 1, "mixed"),
        (["faster", "faster", "slower"], 2, 1, "mixed"),
        (["within_noise", "within_noise"], 0, 0, "within_noise"),
        (["faster", "no_data"], 1, 0, "mixed"),
    ],
)
def test_overall_counts_and_verdict(
    verdicts: list[Any], faster: int, slower: int, expected: str
) -> None:
    out = variant_overall(False, verdicts, [1.0] * len(verdicts))
    assert (out.configs_faster, out.configs_slower, out.verdict) == (faster, slower, expected)


def test_the_baseline_and_an_incorrect_variant_have_no_geomean() -> None:
    base = variant_overall(True, ["baseline", "baseline"], [2.0, 2.0])
    assert (base.verdict, base.geomean_speedup) == ("baseline", None)
    wrong = variant_overall(False, ["slower", "incorrect"], [0.5])
    assert (wrong.verdict, wrong.geomean_speedup, wrong.configs_slower) == ("incorrect", None, 1)
    nothing = variant_overall(False, ["no_data", "no_data"], [])
    assert (nothing.verdict, nothing.geomean_speedup) == ("no_data", None)


@PROPERTY
@given(
    st.lists(st.sampled_from(["faster", "slower", "within_noise", "no_data"]), min_size=1),
)
def test_overall_mirrors_when_every_config_mirrors(verdicts: list[Any]) -> None:
    mirrored = [MIRROR.get(v, v) for v in verdicts]
    a = variant_overall(False, verdicts, [1.0])
    b = variant_overall(False, mirrored, [1.0])
    assert (a.configs_faster, a.configs_slower) == (b.configs_slower, b.configs_faster)
    assert b.verdict == {"faster": "slower", "slower": "faster"}.get(a.verdict, a.verdict)


def test_geomean_skips_nonpositive_and_infinite_speedups() -> None:
    out = variant_overall(False, ["faster"] * 4, [4.0, 0.0, float("inf"), 1.0])
    assert out.geomean_speedup == 2.0
    assert variant_overall(False, ["faster"], [0.0]).geomean_speedup is None


# --- compare_summary on a frame written out here ----------------------------------------------


def frame(rows: list[tuple[str, int, float, float]]) -> pd.DataFrame:
    """(variant, n, mean, 95% half-width) rows as the pipeline's processed frame has them; the
    numbers are microseconds, stored in ns (above the rule's 100 ns floor)."""
    return pd.DataFrame(
        [
            {
                "Annotation": name,
                "Metric": TIME,
                "n": n,
                "AvgValue": mean * US,
                "CI95_Lower": (mean - half) * US,
                "CI95_Upper": (mean + half) * US,
                "RelativeStdDevPct": 1.0,
                "StableMeasurement": True,
                "Unit": "ns",
            }
            for name, n, mean, half in rows
        ]
    )


def check(variant: str, config_index: int, ok: bool, **fields: Any) -> OutputCheck:
    return OutputCheck(variant=variant, config_index=config_index, config={}, ok=ok, **fields)


def fake_run(
    processed: pd.DataFrame, checks: list[OutputCheck] | None = None, **request: Any
) -> Any:
    configs = [{"n": n} for n in dict.fromkeys(processed["n"])]
    return SimpleNamespace(
        run_id="r1",
        run_dir=Path("/nonexistent"),
        request=SimpleNamespace(
            **{"baseline": None, "runs": 3, "ignore_kernels": [], "min_effect_pct": 3.0, **request},
            expanded_configs=lambda: configs,
            clock_control="base",
            time_basis=None,
            correctness="default",
            basis=lambda: "gpu",
        ),
        processed=processed,
        raw=pd.DataFrame(),
        checks=checks or [],
        kernels={},
        warnings=[],
        artifacts={},
        seconds=1.23456,
        facts=RunFacts(),
        dropped={},
        suspects=[],
        preflight=None,
    )


ROWS = [
    ("base", 1, 100.0, 1.0),
    ("fast", 1, 50.0, 1.0),
    ("slow", 1, 200.0, 1.0),
    ("base", 2, 100.0, 1.0),
    ("fast", 2, 40.0, 1.0),
    ("slow", 2, 250.0, 1.0),
    ("base", 3, 100.0, 1.0),
    ("fast", 3, 100.5, 1.0),
    ("slow", 3, 400.0, 1.0),
]


def test_a_comparison_counts_configs_and_takes_speedups_from_means() -> None:
    s = summaries.compare_summary(fake_run(frame(ROWS)), baseline="base")
    assert (s.baseline, s.metric, s.unit, s.seconds, s.run_id) == ("base", TIME, "ns", 1.23, "r1")
    assert [c.config for c in s.configs] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [c.config_index for c in s.configs] == [0, 1, 2]
    fast = [c.variants["fast"] for c in s.configs]
    assert [v.verdict for v in fast] == ["faster", "faster", "within_noise"]
    assert [v.speedup for v in fast] == [2.0, 2.5, 0.995]
    assert [v.time for v in fast] == [50.0 * US, 40.0 * US, 100.5 * US]
    slow = [c.variants["slow"] for c in s.configs]
    assert [v.verdict for v in slow] == ["slower"] * 3
    assert [v.speedup for v in slow] == [0.5, 0.4, 0.25]
    assert all(c.variants["base"].verdict == "baseline" for c in s.configs)
    assert all(c.variants["base"].speedup is None for c in s.configs)
    o = s.overall
    assert (o["fast"].verdict, o["fast"].configs_faster, o["fast"].configs_slower) == (
        "mixed",
        2,
        0,
    )
    assert (o["slow"].verdict, o["slow"].configs_faster, o["slow"].configs_slower) == (
        "slower",
        0,
        3,
    )
    assert o["slow"].geomean_speedup == pytest.approx((0.5 * 0.4 * 0.25) ** (1 / 3), rel=1e-3)
    assert o["base"].verdict == "baseline" and o["base"].geomean_speedup is None
    assert s.warnings is None and s.artifacts is None


def test_the_run_s_minimum_effect_decides_and_a_re_read_may_change_it() -> None:
    """Config 3's 'fast' is 0.5 % slower with separated intervals (half-widths 0.1): noise-sized
    at the default, slower when the run asked for no minimum, and re-readable either way."""
    rows = [(n, v, t, 0.1) for n, v, t, _ in ROWS]
    rows = [(name, n, mean, half) for name, n, mean, half in rows]
    s = summaries.compare_summary(fake_run(frame(rows)), baseline="base")
    assert s.configs[2].variants["fast"].verdict == "within_noise"
    assert s.configs[2].variants["fast"].speedup == pytest.approx(100 / 100.5, rel=1e-3)
    assert s.overall["fast"].verdict == "mixed"  # two configs faster, one within noise
    assert "at least 3%" in s.rule
    strict = summaries.compare_summary(fake_run(frame(rows), min_effect_pct=0.0), baseline="base")
    assert strict.configs[2].variants["fast"].verdict == "slower"
    assert "at least 0%" in strict.rule
    again = summaries.compare_summary(fake_run(frame(rows)), baseline="base", min_effect_pct=0.0)
    assert again.configs[2].variants["fast"].verdict == "slower"


def test_swapping_the_baseline_mirrors_every_verdict() -> None:
    forward = summaries.compare_summary(fake_run(frame(ROWS)), baseline="base")
    backward = summaries.compare_summary(fake_run(frame(ROWS)), baseline="slow")
    for f, b in zip(forward.configs, backward.configs):
        assert b.variants["base"].verdict == MIRROR[f.variants["slow"].verdict]
        speedups = (f.variants["slow"].speedup, b.variants["base"].speedup)
        assert speedups[0] is not None and speedups[1] is not None
        assert speedups[0] * speedups[1] == pytest.approx(1.0, rel=1e-3)
    assert backward.overall["base"].configs_faster == forward.overall["slow"].configs_slower


def test_the_baseline_comes_from_the_request_then_the_first_variant() -> None:
    assert summaries.compare_summary(fake_run(frame(ROWS), baseline="slow")).baseline == "slow"
    assert summaries.compare_summary(fake_run(frame(ROWS))).baseline == "base"
    with pytest.raises(InvalidRequestError, match="'nope' is not a variant"):
        summaries.compare_summary(fake_run(frame(ROWS)), baseline="nope")
    with pytest.raises(InvalidRequestError, match=r"no 'dram__bytes\.sum' rows"):
        summaries.compare_summary(fake_run(frame(ROWS)), metric="dram__bytes.sum")


def test_a_failed_check_makes_the_config_incorrect_with_its_text() -> None:
    bad = check(
        variant="fast",
        config_index=1,
        ok=False,
        message="mismatch",
        max_abs_err=0.123456,
        max_rel_err=None,
    )
    good = check(variant="slow", config_index=1, ok=True, message="ok")
    s = summaries.compare_summary(fake_run(frame(ROWS), [bad, good]), baseline="base")
    v = s.configs[1].variants["fast"]
    assert (v.verdict, v.speedup, v.time, v.check) == (
        "incorrect",
        None,
        40.0 * US,
        "mismatch; max_abs_err=0.123",
    )
    assert s.configs[0].variants["fast"].verdict == "faster"
    assert s.configs[1].variants["slow"].check is None
    assert s.overall["fast"].verdict == "incorrect"
    assert s.overall["fast"].geomean_speedup is None


def test_a_variant_missing_at_a_config_is_no_data_or_incorrect() -> None:
    rows = [r for r in ROWS if not (r[0] == "fast" and r[1] == 2)]
    s = summaries.compare_summary(fake_run(frame(rows)), baseline="base")
    assert s.configs[1].variants["fast"].verdict == "no_data"
    assert s.configs[1].variants["fast"].time is None
    crashed = check(variant="fast", config_index=1, ok=False, message="")
    s = summaries.compare_summary(fake_run(frame(rows), [crashed]), baseline="base")
    v = s.configs[1].variants["fast"]
    assert (v.verdict, v.check) == ("incorrect", "output differs from the baseline")


def test_paging_keeps_the_overall_verdict_of_every_config() -> None:
    s = summaries.compare_summary(fake_run(frame(ROWS)), baseline="base", offset=1, limit=1)
    assert [c.config_index for c in s.configs] == [1]
    assert s.page.total == 3 and s.page.truncated is not None
    assert s.overall["slow"].configs_slower == 3


def test_the_hints_name_what_the_run_has() -> None:
    with pytest.raises(InvalidRequestError) as info:
        summaries.compare_summary(fake_run(frame(ROWS)), baseline="nope")
    assert info.value.hint == "Variants: base, fast, slow."
    with pytest.raises(InvalidRequestError) as info:
        summaries.compare_summary(fake_run(frame(ROWS)), metric="x")
    assert info.value.hint == f"Metrics in this run: {TIME}."


def test_spread_units_warnings_and_artifacts_are_passed_on(tmp_path: Path) -> None:
    rows = frame(ROWS)
    rows["RelativeStdDevPct"] = 1.23456
    rows["Unit"] = math.nan
    run = fake_run(rows)
    run.warnings = ["something the pipeline said"]
    (tmp_path / "report.ncu-rep").write_bytes(b"")
    run.artifacts = {"report": tmp_path / "report.ncu-rep", "gone": tmp_path / "gone.csv"}
    s = summaries.compare_summary(run, baseline="base")
    assert s.configs[0].variants["fast"].rsd_pct == 1.23
    assert s.unit is None
    assert s.warnings == ["something the pipeline said"]
    assert s.artifacts == ["report"]


def test_a_variant_without_a_time_has_no_speedup() -> None:
    rows = frame(ROWS)
    rows.loc[(rows["Annotation"] == "fast") & (rows["n"] == 1), "AvgValue"] = math.nan
    v = summaries.compare_summary(fake_run(rows), baseline="base").configs[0].variants["fast"]
    assert (v.time, v.speedup, v.verdict) == (None, None, "no_data")


def test_a_config_without_the_baseline_is_no_data() -> None:
    rows = [r for r in ROWS if not (r[0] == "base" and r[1] == 2)]
    s = summaries.compare_summary(fake_run(frame(rows)), baseline="base")
    v = s.configs[1].variants["fast"]
    assert (v.time, v.speedup, v.verdict) == (40.0 * US, None, "no_data")


def test_a_row_outside_the_requested_configs_has_an_empty_config() -> None:
    run = fake_run(frame(ROWS))
    run.request.expanded_configs = lambda: [{"n": 1}, {"n": 2}]
    s = summaries.compare_summary(run, baseline="base")
    assert [(c.config_index, c.config) for c in s.configs] == [
        (-1, {}),
        (0, {"n": 1}),
        (1, {"n": 2}),
    ]


def test_twenty_configs_a_page_by_default() -> None:
    rows = [(name, n, 100.0, 1.0) for n in range(21) for name in ("base", "fast")]
    s = summaries.compare_summary(fake_run(frame(rows)), baseline="base")
    assert len(s.configs) == 20 and s.page.total == 21 and s.page.limit == 20


def test_check_text_defaults_both_errors_and_keeps_the_message_whole() -> None:
    bare = check(variant="fast", config_index=0, ok=False)
    s = summaries.compare_summary(fake_run(frame(ROWS), [bare]), baseline="base")
    assert s.configs[0].variants["fast"].check == "output differs from the baseline"
    both = check(
        variant="fast", config_index=0, ok=False, message="m", max_abs_err=1.0, max_rel_err=0.5
    )
    s = summaries.compare_summary(fake_run(frame(ROWS), [both]), baseline="base")
    assert s.configs[0].variants["fast"].check == "m; max_abs_err=1.0; max_rel_err=0.5"
    long = check(variant="fast", config_index=0, ok=False, message="x" * 400)
    s = summaries.compare_summary(fake_run(frame(ROWS), [long]), baseline="base")
    assert s.configs[0].variants["fast"].check == "x" * 400  # whole, never cut mid-word
    huge = check(variant="fast", config_index=0, ok=False, message="word " * 2000)
    s = summaries.compare_summary(fake_run(frame(ROWS), [huge]), baseline="base")
    said = s.configs[0].variants["fast"].check or ""
    assert len(said) < 2 * wording.MESSAGE_CHARS and said.endswith("holds the whole message]")
    assert said.split(" [cut")[0].rstrip(".").endswith("word")


def test_the_metric_hint_lists_every_metric() -> None:
    rows = frame(ROWS)
    other = rows.assign(Metric="dram__bytes.sum")
    with pytest.raises(InvalidRequestError) as info:
        summaries.compare_summary(fake_run(pd.concat([rows, other])), metric="x")
    assert info.value.hint == f"Metrics in this run: {TIME}, dram__bytes.sum."
