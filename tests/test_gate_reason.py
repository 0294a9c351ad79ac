"""The regression gate's reason and its rule on synthetic sample sets (no timing here): every
config says which part of the rule decided, with its numbers; an unchanged source timed on a
busy CPU is never a regression (not comparable, or within noise); code doing more work still
is. The sample sets are drawn from seeded generators shaped like what a 2-core CPU gave
(bench/gate_under_load.py): quiet calls near one time, and under load a share of calls that
waited for another process."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.judge import gate, gate_reason
from nsight_agent.judge.run_diff import diff_runs
from tests.sampled_runs import PROBE_NS, sampled

QUIET_US = 190.0


def quiet(rng: random.Random, n: int = 200, at: float = QUIET_US) -> list[float]:
    """Calls near ``at`` (3 % spread) with a few of them descheduled (ms), as a quiet CPU."""
    out = [at * rng.lognormvariate(0, 0.03) for _ in range(n)]
    for i in rng.sample(range(n), n // 40):
        out[i] = rng.uniform(2_000, 16_000)
    return out


def loaded(rng: random.Random, waited: float, stretch: float, n: int = 200) -> list[float]:
    """The same calls on a busy CPU: a share ``waited`` of them took ``stretch`` times longer
    or a whole time slice; the others ran as on a quiet machine."""
    out = quiet(rng, n)
    for i in rng.sample(range(n), int(n * waited)):
        out[i] = out[i] * rng.uniform(1.2, stretch) if rng.random() < 0.8 else 8_000.0
    return out


def diff(tmp: Path, base: list[float], cand: list[float], probe: float = PROBE_NS) -> Any:
    b = sampled(tmp, "20261206-000000-base00000000", base, PROBE_NS)
    c = sampled(tmp, "20261206-000001-cand00000000", cand, probe)
    return diff_runs(b, c, name="main")


def test_an_unchanged_source_on_a_busy_cpu_is_never_a_regression(tmp_path: Path) -> None:
    """Over many busy machines (a share of calls waiting, each by up to 6x), probes that did
    not see it (1.28x, inside the limit): never a regression; those that would have read
    slower are refused, and say the fastest call matched."""
    rng = random.Random(0)
    base = quiet(rng)
    refused = 0
    for waited in (0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9):
        for stretch in (1.5, 3.0, 6.0):
            d = diff(tmp_path, base, loaded(rng, waited, stretch), probe=PROBE_NS * 1.28)
            assert d.regression is not True, (waited, stretch, d.configs)
            if not d.comparable:
                refused += 1
                assert d.reasons and "fastest call" in d.reasons[0], d.reasons
    assert refused, "no set was slow enough to need the rule"


def test_the_rule_that_refuses_them_reads_the_fastest_call(tmp_path: Path) -> None:
    """As measured under load: a median 2.06x the baseline's, fastest call 185 us against a
    190 us baseline. The interval rule alone says slower; the gate says not comparable."""
    rng = random.Random(1)
    base = quiet(rng)
    cand = [QUIET_US * 2.06 * rng.lognormvariate(0, 0.05) for _ in range(199)] + [185.0]
    d = diff(tmp_path, base, cand, probe=PROBE_NS * 1.28)
    assert not d.comparable and d.regression is None
    assert "fastest call (185 us)" in (d.reasons or [""])[0], d.reasons


def test_one_config_really_slower_keeps_the_regression_beside_one_that_waited(
    tmp_path: Path,
) -> None:
    """Config n=1000 only waited (its fastest call matches), n=2000 does twice the work: the
    gate does not refuse the pair on the first; the second is a regression."""
    rng = random.Random(5)
    b = sampled(tmp_path, "20261206-000000-base00000001", quiet(rng), second=quiet(rng))
    waited = [QUIET_US * 2.06 * rng.lognormvariate(0, 0.05) for _ in range(199)] + [185.0]
    doubled = [2.2 * s for s in quiet(rng)]
    c = sampled(tmp_path, "20261206-000001-cand00000001", waited, PROBE_NS * 1.28, second=doubled)
    d = diff_runs(b, c, name="main")
    assert d.comparable and d.regression is True
    assert [x.verdict for x in d.configs] == ["slower", "slower"]
    alone = sampled(tmp_path, "20261206-000002-cand00000002", waited, PROBE_NS, second=quiet(rng))
    refused = diff_runs(b, alone, name="main")
    assert (
        not refused.comparable
        and "config #0: this run's fastest call" in (refused.reasons or [""])[0]
    )


def test_code_doing_more_work_is_still_a_regression_under_the_same_load(tmp_path: Path) -> None:
    rng = random.Random(2)
    base = quiet(rng)
    doubled = [2.2 * s for s in loaded(rng, 0.5, 3.0)]
    d = diff(tmp_path, base, doubled, probe=PROBE_NS * 1.28)
    assert d.comparable and d.regression is True
    assert d.configs[0].verdict == "slower"
    reason = d.configs[0].reason or ""
    assert reason.startswith("slower: the intervals are apart") and "minimum effect" in reason


def test_a_slowdown_inside_the_cpu_drift_says_interval_overlap_and_the_limit(
    tmp_path: Path,
) -> None:
    """0.625 (1.6x slower) on a quiet CPU: within noise, and why: the widened intervals
    overlap; two CPU runs are told apart only past 1.83x; --remeasure tells smaller ones."""
    rng = random.Random(3)
    base = quiet(rng)
    d = diff(tmp_path, base, quiet(rng, at=QUIET_US * 1.6))
    c = d.configs[0]
    assert d.comparable and c.verdict == "within_noise" and d.regression is False
    assert c.speedup is not None and 0.6 < c.speedup < 0.65
    assert c.reason and c.reason.startswith("within_noise by interval overlap")
    assert "15 % between-run drift" in c.reason and "1.83x" in c.reason
    assert "--remeasure" in c.reason
    assert gate_reason.separable_ratio(gate.CPU_DRIFT_RSD_PCT) == pytest.approx(1.833, abs=1e-3)
    assert gate_reason.separable_ratio(gate.DRIFT_RSD_PCT) == pytest.approx(1.061, abs=1e-3)


def test_apart_but_small_says_minimum_effect_and_a_threshold_says_its_part(tmp_path: Path) -> None:
    rng = random.Random(4)
    tight = [100.0 + rng.uniform(-0.05, 0.05) for _ in range(200)]
    b = sampled(tmp_path, "20261206-000000-base00000000", tight, PROBE_NS)
    c = sampled(tmp_path, "20261206-000001-cand00000000", [t * 1.02 for t in tight], PROBE_NS)
    d = diff_runs(b, c, name="main", drift_pct=0.1)
    reason = d.configs[0].reason or ""
    assert d.configs[0].verdict == "within_noise", reason
    assert reason.startswith("within_noise by the minimum effect") and "3 % minimum" in reason
    slower = sampled(tmp_path, "20261206-000002-slow00000000", [t * 1.2 for t in tight], PROBE_NS)
    d = diff_runs(b, slower, name="main", drift_pct=0.1, threshold_pct=25.0)
    reason = d.configs[0].reason or ""
    assert d.configs[0].verdict == "slower" and d.regression is False
    assert "20 % slower is under the --threshold 25 %: not a regression" in reason, reason


def test_a_failing_or_missing_candidate_says_why_it_is_a_regression() -> None:
    row = {"AvgValue": 1.0, "CI95_Lower": 0.9, "CI95_Upper": 1.1}
    said = gate_reason.explain(
        "incorrect",
        row,
        row,
        unit="ns",
        drift_pct=1.5,
        min_effect_pct=3,
        floor=100,
        check="max_abs_err=0.5",
    )
    assert said.startswith("incorrect: max_abs_err=0.5") and "regression" in said
    missing = gate_reason.explain(
        "no_data", row, None, unit="ns", drift_pct=1.5, min_effect_pct=3, floor=100
    )
    assert missing.startswith("no_data")
