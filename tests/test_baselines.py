"""Baselines, run-to-run comparison, the regression gate and history, on real runs.

Runs are made for real on the CPU timing path (perf_counter, torch on the CPU) in a temporary
runs folder; the recorded H200 sweep stands for GPU runs made under ncu. Where a case needs a
machine we do not have (another GPU, another ncu, another timing method), a COPY of a real run
is edited and named ``standin-*``: the edit is the only thing that differs from the real run.
No assertion depends on how fast this machine is: the slow kernel sleeps 2 ms per call against
a ~20 us one, and sameness is tested on a run against itself or its exact copy.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.cli import main
from nsight_agent.engine.store import baselines, retention
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge import gate, run_diff
from nsight_agent.judge.verdicts import config_verdict
from nsight_agent.service import baselines as service
from nsight_agent.service.measure import Measuring
from nsight_agent.service.profile import profile
from nsight_agent.service.runs import list_runs
from nsight_agent.views.history import plot_history, render_history
from nsight_agent.views.run_diff import render_diff

FAST = """
import torch

def setup(n, device="cpu"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * 2.0

def other(x):
    return x + x
"""
# The same kernel plus 2 ms of sleep in every call: ~100x slower on any machine.
SLOW = FAST.replace(
    "def run(x):\n    return x * 2.0",
    "def run(x):\n    import time\n    time.sleep(0.002)\n    return x * 2.0",
)
CONFIGS = [{"n": 1000}, {"n": 4000}]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One runs folder for the module: a real fast run (baseline ``main``) and a real run of
    two variants, made on the CPU timing path."""
    root = tmp_path_factory.mktemp("runs")
    with WorkerPool() as pool:
        where = Measuring(runs_root=root, workers=pool)
        fast = profile(where, "timing", source=FAST, language="torch", configs=CONFIGS, runs=5)
        two = profile(
            where,
            "timing",
            source=FAST,
            language="torch",
            configs=CONFIGS,
            runs=5,
            variants=[{"name": "run", "entry": "run"}, {"name": "other", "entry": "other"}],
        )
        service.set_baseline("main", fast.run_id, runs_root=root)
        yield {"root": root, "fast": fast.run_id, "two": two.run_id, "pool": pool}


def standin(
    root: Path, run_id: str, new_id: str, edit: Callable[[Path, pd.DataFrame], pd.DataFrame]
) -> str:
    """A copy of a real run with one thing changed by ``edit`` (a stand-in for a run made
    somewhere we cannot run here)."""
    target = root / new_id
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / run_id, target)
    frame = pd.read_csv(target / "processed.csv")
    edit(target, frame).to_csv(target / "processed.csv", index=False)
    return new_id


def scaled(factor: float) -> Callable[[Path, pd.DataFrame], pd.DataFrame]:
    def edit(_: Path, frame: pd.DataFrame) -> pd.DataFrame:
        for col in ("AvgValue", "StdDev", "MinValue", "MaxValue", "CI95_Lower", "CI95_Upper"):
            frame[col] = frame[col] * factor
        for col in ("MedianValue", "MedianCI95_Lower", "MedianCI95_Upper"):
            if col in frame.columns:
                frame[col] = frame[col] * factor
        return frame

    return edit


def env(**fields: Any) -> Callable[[Path, pd.DataFrame], pd.DataFrame]:
    def edit(run_dir: Path, frame: pd.DataFrame) -> pd.DataFrame:
        baselines.write_environment(run_dir, fields)
        return frame

    return edit


# --- naming -------------------------------------------------------------------------------


def test_a_baseline_names_a_run_and_is_listed(store: dict[str, Any]) -> None:
    root = store["root"]
    listed = {b.name: b for b in service.list_baselines(root)}
    main_b = listed["main"]
    assert main_b.run_id == store["fast"] and main_b.variant == "run"
    assert main_b.method == "perf_counter" and main_b.gpu == "cpu"
    assert len(main_b.source_hash) == 12 and main_b.measured
    # The file lives in the runs folder, hidden from run listings.
    assert (root / baselines.BASELINES_FILE).is_file()
    assert baselines.BASELINES_FILE not in list_runs(root)["runs"]


def test_names_are_checked_and_a_run_of_several_variants_needs_one(
    store: dict[str, Any],
) -> None:
    root = store["root"]
    for bad in ("", "../x", "a b", ".hidden", "x" * 65):
        with pytest.raises(InvalidRequestError):
            service.set_baseline(bad, store["fast"], runs_root=root)
    with pytest.raises(InvalidRequestError, match="say which one"):
        service.set_baseline("pair", store["two"], runs_root=root)
    b = service.set_baseline("pair", store["two"], "other", runs_root=root)
    assert b.variant == "other"
    assert service.remove_baseline("pair", root).name == "pair"
    assert "pair" not in {x.name for x in service.list_baselines(root)}
    with pytest.raises(InvalidRequestError, match="No baseline named"):
        service.remove_baseline("pair", root)


def test_retention_keeps_a_named_run(tmp_path: Path, store: dict[str, Any]) -> None:
    root = tmp_path / "runs"
    shutil.copytree(store["root"] / store["fast"], root / "20200101-000000-aaaaaaaaaaaa")
    shutil.copytree(store["root"] / store["two"], root / "20300101-000000-bbbbbbbbbbbb")
    service.set_baseline("old", "20200101-000000-aaaaaaaaaaaa", runs_root=root)
    # Make the named run the oldest by mtime: keep=1 would remove it but for its name.
    os.utime(root / "20200101-000000-aaaaaaaaaaaa", (1, 1))
    out = retention.prune(root, keep=1, max_gb=1.0)
    assert out.removed == []
    assert (root / "20200101-000000-aaaaaaaaaaaa").is_dir()
    service.remove_baseline("old", root)
    assert retention.prune(root, keep=1, max_gb=1.0).removed == ["20200101-000000-aaaaaaaaaaaa"]


# --- comparison -----------------------------------------------------------------------------


def test_a_run_against_its_own_copy_is_within_noise(store: dict[str, Any]) -> None:
    root = store["root"]
    copy = standin(root, store["fast"], "20261201-000000-copy00000000", lambda _, f: f)
    d = service.diff(copy, "main", root)
    assert d.comparable and d.reasons is None
    assert d.statistic == "median" and d.drift_pct == gate.CPU_DRIFT_RSD_PCT  # CPU runs
    assert [c.verdict for c in d.configs] == ["within_noise", "within_noise"]
    assert d.overall is not None and d.overall.verdict == "within_noise"
    assert d.regression is False
    assert d.notes and "same source" in d.notes[0]


def test_the_interval_widens_by_the_drift_term() -> None:
    row = {"MedianValue": 1000.0, "MedianCI95_Lower": 999.0, "MedianCI95_Upper": 1001.0}
    w = run_diff.widened(row, "median", 1.5)
    assert w["CI95_Upper"] - 1000.0 == pytest.approx((1.0 + (1.96 * 15.0) ** 2) ** 0.5)
    # 4% apart: different inside one run, within noise between runs.
    other = {k: v * 1.04 for k, v in row.items()}
    assert config_verdict(plain(other), plain(row)) == "slower"
    assert config_verdict(run_diff.widened(other, "median", 1.5), w) == "within_noise"
    no_drift = run_diff.widened(other, "median", 0.0), run_diff.widened(row, "median", 0.0)
    assert config_verdict(*no_drift) == "slower"


def plain(row: dict[str, float]) -> dict[str, float]:
    """A median row as compare's rule reads it, not widened."""
    return {
        "AvgValue": row["MedianValue"],
        "CI95_Lower": row["MedianCI95_Lower"],
        "CI95_Upper": row["MedianCI95_Upper"],
    }


def test_a_much_slower_source_is_a_regression_and_faster_is_not(store: dict[str, Any]) -> None:
    root, pool = store["root"], store["pool"]
    checked = service.check_source(SLOW, "main", runs_root=root, pool=pool)
    d = checked.diff
    assert checked.remeasured is None and d.comparable and checked.regression is True
    assert [c.verdict for c in d.configs] == ["slower", "slower"]
    assert d.regression is True and d.overall is not None and d.overall.verdict == "slower"
    assert d.candidate.source_hash != d.baseline.source_hash
    store["slow"] = d.candidate.run_id
    # The environment of the check run is recorded (this process made it).
    assert (root / d.candidate.run_id / baselines.ENVIRONMENT_FILE).is_file()
    # A threshold above the slowdown lets it pass; the verdict stays 'slower'.
    lax = service.diff(d.candidate.run_id, "main", root, threshold_pct=1e6)
    assert lax.regression is False and lax.configs[0].verdict == "slower"
    # The other way round: the fast run against the slow one is faster, no regression.
    back = service.diff(store["fast"], d.candidate.run_id, root)
    assert back.overall is not None and back.overall.verdict == "faster"
    assert back.regression is False


def test_other_gpu_method_or_configs_are_not_comparable(store: dict[str, Any]) -> None:
    root = store["root"]

    def gpu(_: Path, f: pd.DataFrame) -> pd.DataFrame:
        f["GPU"] = "NVIDIA A100-SXM4-80GB (stand-in)"
        return f

    def method(_: Path, f: pd.DataFrame) -> pd.DataFrame:
        f["Method"] = "cuda_events"
        return f

    def configs(run_dir: Path, f: pd.DataFrame) -> pd.DataFrame:
        request = json.loads((run_dir / "request.json").read_text())
        request["configs"] = [{"n": 1000}, {"n": 8000}]
        (run_dir / "request.json").write_text(json.dumps(request))
        f.loc[f["n"] == 4000, "n"] = 8000
        return f

    cases = {"GPU model differs": gpu, "method differs": method, "configs differ": configs}
    for i, (why, edit) in enumerate(cases.items()):
        other = standin(root, store["fast"], f"20261201-00000{i}-standin{i:05d}", edit)
        d = service.diff(other, "main", root)
        assert not d.comparable and d.overall is None and not d.configs, why
        assert d.reasons and any(why in r for r in d.reasons), (why, d.reasons)
        assert d.todo and "compare_variants" in d.todo
        assert "NOT COMPARABLE" in render_diff(d)


def test_recorded_h200_runs_compare_and_refuse_another_ncu(tmp_path: Path, sweep: Any) -> None:
    """The recorded H200 sweep (ncu, 3 runs a config) against a copy of itself, a copy 10 %
    slower, and copies that say another ncu version or driver was used."""
    sweep.run(tmp_path, run_id="20261129-000000-h200sweep000")
    service.set_baseline("h200", "20261129-000000-h200sweep000", "triton_add", tmp_path)
    same = standin(tmp_path, "20261129-000000-h200sweep000", "20261129-000001-copy", scaled(1.0))
    d = service.diff(f"{same}@triton_add", "h200", tmp_path)
    assert d.comparable and d.candidate.gpu == "NVIDIA H200" and d.candidate.method == "ncu"
    assert {c.verdict for c in d.configs} == {"within_noise"}
    # Nothing recorded the driver or ncu of the sweep: said, not assumed.
    assert d.unverified and any("ncu version" in u for u in d.unverified)

    slow = standin(tmp_path, "20261129-000000-h200sweep000", "20261129-000002-slow10", scaled(1.1))
    d = service.diff(f"{slow}@triton_add", "h200", tmp_path)
    # The largest config's interval is tight (5248 ± 36 ns): 10 % is beyond drift and noise
    # there; the small configs (3 runs, ± 13 %) cannot tell.
    assert d.configs[2].verdict == "slower" and d.regression is True
    assert d.overall is not None and d.overall.verdict in ("slower", "mixed")

    base_env = {"driver_version": "580.159.04", "ncu_version": "2025.3.1.0"}
    baselines.write_environment(tmp_path / "20261129-000000-h200sweep000", base_env)
    newer = standin(
        tmp_path,
        "20261129-000000-h200sweep000",
        "20261129-000003-ncu2026",
        env(driver_version="580.159.04", ncu_version="2026.2.1.0"),
    )
    d = service.diff(f"{newer}@triton_add", "h200", tmp_path)
    assert not d.comparable and d.reasons == [
        "ncu version differs: baseline 2025.3.1.0, this run 2026.2.1.0"
    ]
    driver = standin(
        tmp_path,
        "20261129-000000-h200sweep000",
        "20261129-000004-driver",
        env(driver_version="590.10.01", ncu_version="2025.3.1.0"),
    )
    d = service.diff(f"{driver}@triton_add", "h200", tmp_path)
    assert not d.comparable and d.reasons and "driver differs" in d.reasons[0]
    assert not d.unverified  # both recorded now


def test_history_of_a_baseline_and_its_plot(store: dict[str, Any], tmp_path: Path) -> None:
    root = store["root"]
    if "slow" not in store:
        pytest.skip("needs the slow check run of the gate test")
    h = service.history("main", root)
    ids = [p.run_id for p in h.points]
    assert ids == sorted(ids) and store["fast"] in ids and store["slow"] in ids
    by_id = {p.run_id: p for p in h.points}
    assert by_id[store["fast"]].verdict == "reference"
    assert by_id[store["slow"]].verdict == "slower"
    assert by_id[store["slow"]].geomean_speedup is not None
    assert all(len(p.times) == len(CONFIGS) for p in h.points)
    # The other run of the same source (variant 'run' of the two-variant run) is in it too.
    assert store["two"] in ids
    text = render_history(h)
    assert "reference" in text and "slower" in text
    # headers and times with their unit, never raw nanoseconds in scientific notation
    assert "time per config" in text.splitlines()[2] and "e+0" not in text, text
    assert any(u in text for u in (" ns", " us", " ms")), text
    target = tmp_path / "history.png"
    plot_history(h, str(target))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # By source hash: the same kernel's runs, against the oldest.
    by_hash = service.history(h.points[0].source_hash[:8], root)
    assert by_hash.baseline is None and by_hash.points[0].verdict == "reference"
    with pytest.raises(InvalidRequestError):
        service.history("zz", root)


# --- the gate through the real CLI ----------------------------------------------------------


def test_check_exit_codes(store: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    root = str(store["root"])
    fast, slow = tmp_path / "fast.py", tmp_path / "slow.py"
    fast.write_text(FAST)
    slow.write_text(SLOW)
    # 2: usage (unknown baseline; a negative threshold; no --baseline at all).
    assert main(["check", str(fast), "--baseline", "nope", "--runs-root", root]) == 2
    assert main(["check", str(fast), "--baseline", "main", "--threshold", "-1",
                 "--runs-root", root]) == 2  # fmt: skip
    with pytest.raises(SystemExit) as usage:
        main(["check", str(fast)])
    assert usage.value.code == 2
    # 1: regression, with the table.
    capsys.readouterr()
    assert main(["check", str(slow), "--baseline", "main", "--runs-root", root]) == 1
    out = capsys.readouterr().out
    assert "slower" in out and "regression (beyond the drift): True" in out
    named = {b.name: b for b in service.list_baselines(Path(root))}
    slow_run = named["main"].checks[-1]
    # 0: no regression (the fast source against a baseline of the slow one).
    assert main(["baseline", "set", "slow", slow_run, "--runs-root", root]) == 0
    capsys.readouterr()
    assert main(["check", str(fast), "--baseline", "slow", "--runs-root", root, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparable"] is True and data["regression"] is False
    assert data["overall"]["verdict"] == "faster"
    # 3: not comparable (a baseline whose record says another GPU), reasons printed.
    other = standin(
        Path(root),
        store["fast"],
        "20261201-000009-standingpu00",
        lambda _, f: f.assign(GPU="NVIDIA A100-SXM4-80GB (stand-in)"),
    )
    assert main(["baseline", "set", "standin-a100", other, "--runs-root", root]) == 0
    capsys.readouterr()
    assert main(["check", str(fast), "--baseline", "standin-a100", "--runs-root", root]) == 3
    out = capsys.readouterr().out
    assert "NOT COMPARABLE" in out and "GPU model differs" in out


def test_check_remeasures_both_when_not_comparable(
    store: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    root = store["root"]
    other = standin(
        root,
        store["fast"],
        "20261201-000010-standingpu01",
        lambda _, f: f.assign(GPU="NVIDIA A100-SXM4-80GB (stand-in)"),
    )
    service.set_baseline("standin-remeasure", other, runs_root=root)
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW)
    code = main(
        ["check", str(slow), "--baseline", "standin-remeasure", "--remeasure",
         "--runs-root", str(root)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "re-measured both in run" in out
    # The slow source timed beside the stored fast one, in one run: slower, so exit 1.
    assert code == 1 and "slower" in out


def test_baseline_and_diff_commands(store: dict[str, Any], capsys: Any) -> None:
    root = str(store["root"])
    capsys.readouterr()
    assert main(["baseline", "list", "--runs-root", root]) == 0
    assert "main" in capsys.readouterr().out
    assert main(["baseline", "list", "--runs-root", root, "--json"]) == 0
    assert any(b["name"] == "main" for b in json.loads(capsys.readouterr().out))
    assert main(["diff", store["fast"], "main", "--runs-root", root]) == 0
    assert "within_noise" in capsys.readouterr().out
    assert main(["baseline", "set", "x", "--runs-root", root]) == 2
    assert main(["history", "main", "--runs-root", root]) == 0
    assert "reference" in capsys.readouterr().out
