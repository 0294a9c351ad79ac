"""The regression gate holds under load: CPU runs carry a speed probe and
runs made at other machine speeds are not compared (exit 3, never 1); the drift a CPU run is
allowed is the CPU's, measured; a slower candidate far noisier than its baseline is not a
regression on that alone; a source doing far more work still is. Stand-in copies of one real
CPU run, each with one thing changed (its probe, its times, its spread)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.cli import main
from nsight_agent.engine.worker import timer
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.judge import gate
from nsight_agent.service import baselines as service
from nsight_agent.service.measure import Measuring
from nsight_agent.service.profile import profile

SOURCE = """
import torch

def setup(n, device="cpu"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * 2.0
"""
QUIET_NS = 150_000.0  # a probe on the quiet 2-core machine


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One real CPU timing run, named baseline 'main', its probe set to a quiet machine's."""
    root = tmp_path_factory.mktemp("runs")
    with WorkerPool() as pool:
        run = profile(
            Measuring(runs_root=root, workers=pool),
            "timing",
            source=SOURCE,
            language="torch",
            configs=[{"n": 1000}, {"n": 4000}],
            runs=5,
        )
    edit_result(root / run.run_id, cpu_probe_ns=[QUIET_NS, QUIET_NS])
    service.set_baseline("main", run.run_id, runs_root=root)
    yield root, run.run_id


def edit_result(run_dir: Path, **facts: Any) -> None:
    data = json.loads((run_dir / "result.json").read_text())
    data["facts"].update(facts)
    (run_dir / "result.json").write_text(json.dumps(data))


def copy(root: Path, run_id: str, new_id: str, *, times: float = 1.0, rsd: float | None = None,
         probe: float | None = QUIET_NS) -> str:  # fmt: skip
    """A copy of the real run: times scaled, its spread set, its probe set (None: none)."""
    target = root / new_id
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / run_id, target)
    frame = pd.read_csv(target / "processed.csv")
    for col in ("AvgValue", "StdDev", "MinValue", "MaxValue", "CI95_Lower", "CI95_Upper",
                "MedianValue", "MedianCI95_Lower", "MedianCI95_Upper"):  # fmt: skip
        frame[col] = frame[col] * times
    if rsd is not None:
        frame["RelativeStdDevPct"] = rsd
    frame.to_csv(target / "processed.csv", index=False)
    edit_result(target, cpu_probe_ns=[probe, probe] if probe else [])
    return new_id


def test_the_probe_measures_a_fixed_workload_and_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(timer.CPU_PROBE_ENV, "1")
    start = time.perf_counter_ns()
    ns = timer.cpu_probe_ns(span_ns=20_000_000)
    elapsed = time.perf_counter_ns() - start
    # one call's median time: positive and within the probe's own wall, whatever the load
    assert ns is not None and 0 < ns <= elapsed
    monkeypatch.setenv(timer.CPU_PROBE_ENV, "0")
    assert timer.cpu_probe_ns() is None


def test_a_cpu_timing_run_records_its_probe_before_after_and_during(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(timer.CPU_PROBE_ENV, "1")  # before the worker starts: it inherits it
    with WorkerPool() as pool:
        run = profile(
            Measuring(runs_root=tmp_path, workers=pool),
            "timing",
            source=SOURCE,
            language="torch",
            configs=[{"n": 1000}],
            runs=5,
        )
    probes = run.facts.cpu_probe_ns  # before, after, and the median of one per run
    assert len(probes) == 3 and all(p > 0 for p in probes), probes


def test_a_machine_running_at_another_speed_is_not_compared(real: tuple[Path, str]) -> None:
    """The unchanged source, 18x slower beside two busy processes (as measured on the 2-core
    machine): not comparable, with the probes' times, and never a regression."""
    root, run_id = real
    loaded = copy(root, run_id, "20261204-000001-loaded000000", times=18.0, probe=8_000_000.0)
    d = service.diff(loaded, "main", root)
    assert not d.comparable and d.regression is None and not d.configs
    assert d.reasons and "the machine ran 53.3x slower" in d.reasons[0], d.reasons
    assert "8000 us a call now, 150 us then" in d.reasons[0]
    assert main(["diff", loaded, "main", "--runs-root", str(root)]) == 3
    # Faster is refused the same way (a baseline made on a busy machine).
    fast = copy(root, run_id, "20261204-000002-fastmach0000", probe=QUIET_NS / 2)
    assert "2x faster" in (service.diff(fast, "main", root).reasons or [""])[0]


def test_within_the_limit_the_runs_compare_and_a_cpu_drift_passes(real: tuple[Path, str]) -> None:
    """1.4x the probe is still comparable; a 20 % slower re-run of unchanged code is within
    the CPU's drift (15 %, measured), no regression; 3x the time is."""
    root, run_id = real
    drifted = copy(root, run_id, "20261204-000003-drift0000000", times=1.2, probe=QUIET_NS * 1.4)
    d = service.diff(drifted, "main", root)
    assert d.comparable and d.drift_pct == gate.CPU_DRIFT_RSD_PCT
    assert [c.verdict for c in d.configs] == ["within_noise"] * 2 and d.regression is False
    slower = copy(root, run_id, "20261204-000004-slower000000", times=3.0)
    d = service.diff(slower, "main", root)
    assert d.comparable and d.regression is True
    assert [c.verdict for c in d.configs] == ["slower"] * 2


def test_a_slower_candidate_far_noisier_than_its_baseline_is_not_a_regression(
    real: tuple[Path, str],
) -> None:
    root, run_id = real
    base_rsd = pd.read_csv(root / run_id / "processed.csv")["RelativeStdDevPct"].median()
    noisy_rsd = max(base_rsd, gate.NOISE_FLOOR_PCT) * gate.NOISE_RATIO_LIMIT * 2
    noisy = copy(root, run_id, "20261204-000005-noisy0000000", times=3.0, rsd=noisy_rsd)
    d = service.diff(noisy, "main", root)
    assert not d.comparable and d.regression is None
    assert d.reasons and "spread is" in d.reasons[0] and "noisier machine" in d.reasons[0]
    assert main(["diff", noisy, "main", "--runs-root", str(root)]) == 3
    # As noisy but not slower: compared, no regression (noise alone refuses nothing).
    calm = copy(root, run_id, "20261204-000006-noisyfast000", times=1.0, rsd=noisy_rsd)
    assert service.diff(calm, "main", root).comparable


def test_runs_without_probes_are_compared_and_say_so(real: tuple[Path, str]) -> None:
    root, run_id = real
    bare = copy(root, run_id, "20261204-000007-noprobe00000", probe=None)
    d = service.diff(bare, "main", root)
    assert d.comparable
    assert d.unverified and any("CPU probe not recorded" in u for u in d.unverified)


def test_the_rule_decides_at_its_limits() -> None:
    quiet = [QUIET_NS, QUIET_NS * 1.1]
    assert gate.machine_speed(quiet, [QUIET_NS * 1.6]) == (None, None)
    why, _ = gate.machine_speed(quiet, [QUIET_NS * 1.66])
    assert why and "1.51x slower" in why
    rows = [{"RelativeStdDevPct": 1.0}, {"RelativeStdDevPct": 3.0}]
    assert gate.noisier(rows, [{"RelativeStdDevPct": 8.0}]) is None  # 8 / max(2, 2) = 4
    assert gate.noisier(rows, [{"RelativeStdDevPct": 8.1}]) is not None
    assert gate.drift_for("cpu", "cpu") == gate.CPU_DRIFT_RSD_PCT
    assert gate.drift_for("NVIDIA H200", "NVIDIA H200") == gate.DRIFT_RSD_PCT
    assert gate.regressed("slower", 0.5, None) and not gate.regressed("slower", 0.5, 150.0)
    assert gate.regressed("error", None, None) and not gate.regressed("within_noise", 1.0, None)


def test_probes_that_match_at_their_busiest_but_not_while_timed_are_not_compared() -> None:
    """A baseline with a busy start (8 ms) but quiet runs (150 us) against a re-run loaded
    throughout: the slowest probes match, the probes made while the calls ran do not."""
    slow, unknown = gate.machine_speed([8e6, 160e3, 150e3], [8e6, 8.1e6, 7.9e6])
    assert unknown is None and slow is not None
    assert "52.7x slower while its calls were timed" in slow, slow
    assert "7900 us a call now, 150 us then" in slow
    # The same speed at both readings compares; so do runs recorded with two probes only.
    assert gate.machine_speed([150e3, 160e3, 155e3], [170e3, 150e3, 160e3]) == (None, None)
    assert gate.machine_speed([8e6, 150e3], [8e6, 8e6]) == (None, None)
