"""Copies count on the ncu path: ncu profiles kernels only, so the pre-flight
measures each call's copies and memsets with CUPTI and compare_variants adds them to the kernel
time a verdict reads. Here: the pre-flight's per-config median, the view on an ncu run and on a
timing run (whose clock already holds them), and on a GPU both methods agreeing on a variant
that does the baseline's kernel plus a device-to-device copy."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection.check import copies_notes
from nsight_agent.engine.collection.preflight_run import copies_per_config
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import compare_summary

TIME = "gpu__time_duration.sum"


def test_the_pre_flight_keeps_each_config_s_median_copy_time() -> None:
    calls = [
        {"variant": "copy", "config": 0, "copies_ns": 3000.0},
        {"variant": "copy", "config": 0, "copies_ns": 1000.0},
        {"variant": "copy", "config": 0, "copies_ns": 2000.0},
        {"variant": "copy", "config": 1, "copies_ns": 0.0},  # none: not recorded
        {"variant": "base", "config": 0, "copies_ns": 0.0},
        {"variant": "cpu", "config": 0, "copies_ns": None},  # not counted off a GPU
        {"variant": "old", "config": 0},  # a manifest from before the field
    ]
    assert copies_per_config({"calls": calls}) == {"copy": {0: 2000.0}}
    assert copies_per_config({}) == {}


def frame(rows: list[tuple[str, float]]) -> pd.DataFrame:
    """(variant, mean us) at one config, +-1 % intervals, stored in ns."""
    return pd.DataFrame(
        [
            {
                "Annotation": name,
                "Metric": TIME,
                "n": 1,
                "AvgValue": us * 1e3,
                "CI95_Lower": us * 990.0,
                "CI95_Upper": us * 1010.0,
                "RelativeStdDevPct": 1.0,
                "StableMeasurement": True,
                "Unit": "ns",
            }
            for name, us in rows
        ]
    )


def stand_in(copies: dict[str, dict[int, float]], facts: RunFacts) -> Any:
    """A run as the views read it: 'copy' launches a faster kernel than 'base' (40 vs 50 us)
    and copies for 30 us per call."""
    return SimpleNamespace(
        run_id="r1",
        run_dir=Path("/nonexistent"),
        request=SimpleNamespace(
            baseline="base",
            runs=5,
            ignore_kernels=[],
            min_effect_pct=3.0,
            clock_control="base",
            expanded_configs=lambda: [{"n": 1}],
            time_basis=None,
            correctness="default",
            basis=lambda: "gpu",
        ),
        processed=frame([("base", 50.0), ("copy", 40.0)]),
        raw=pd.DataFrame(),
        checks=[],
        kernels={},
        warnings=[],
        artifacts={},
        seconds=1.0,
        facts=facts,
        dropped={},
        suspects=[],
        preflight=PreflightResult(ok=True, device="cuda:0", seconds=1.0, copies_ns=copies),
    )


def test_an_ncu_run_adds_a_variant_s_copies_to_its_kernel_time() -> None:
    s = compare_summary(stand_in({"copy": {0: 30_000.0}}, facts=RunFacts()))
    copy = s.configs[0].variants["copy"]
    assert copy.verdict == "slower" and copy.time == 70_000.0, copy
    assert copy.speedup == pytest.approx(50 / 70, rel=1e-3)
    assert s.configs[0].variants["base"].time == 50_000.0
    # Without copies the same kernels read faster: the copies decided it.
    assert (
        compare_summary(stand_in({}, facts=RunFacts())).configs[0].variants["copy"].verdict
        == "faster"
    )


def test_a_timing_run_is_left_as_it_is_its_clock_holds_the_copies() -> None:
    s = compare_summary(stand_in({"copy": {0: 30_000.0}}, facts=RunFacts(method="cupti")))
    assert s.configs[0].variants["copy"].verdict == "faster"
    assert s.configs[0].variants["copy"].time == 40_000.0


def test_the_run_says_which_variants_copied_and_what_was_added() -> None:
    notes = copies_notes({"copy": {0: 30_000.0}, "both": {0: 1_500.0, 1: 2_250.0}})
    assert len(notes) == 2
    assert "'copy' also spends 30 us per call" in notes[0], notes[0]
    assert "'both' also spends 1.5-2.25 us per call" in notes[1], notes[1]
    assert "compare_variants adds them" in notes[0] and "method='timing'" in notes[0]
    assert copies_notes({}) == []


def test_another_metric_is_not_shifted() -> None:
    run = stand_in({"copy": {0: 30_000.0}}, facts=RunFacts())
    run.processed["Metric"] = "dram__bytes.sum"
    s = compare_summary(run, metric="dram__bytes.sum")
    assert s.configs[0].variants["copy"].time == 40_000.0


# The baseline's kernel, and the same kernel after a device-to-device copy of its 64 MB input
# (clone of a contiguous tensor is a cudaMemcpyAsync): same kernels, more GPU work.
COPYING = """
import torch

def setup(n, device="cpu"):
    return (torch.rand(n, device=device),)

def run(x):
    return x * 2

def copy_then_run(x):
    y = x.clone()
    return torch.mul(x, 2, out=y)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["timing", "ncu"])
def test_on_a_gpu_both_methods_call_a_variant_with_copies_slower(
    method: str, tmp_path: Path
) -> None:
    request = ProfileRequest(
        source=COPYING,
        language="torch",
        configs=[{"n": 1 << 24}],
        runs=10,
        variants=[{"name": "run"}, {"name": "copy", "entry": "copy_then_run"}],
    )
    if method == "ncu":
        run = pipeline.profile(request, runs_root=tmp_path)
        assert run.preflight is not None and run.preflight.copies_ns.get("copy"), run.preflight
        assert "run" not in run.preflight.copies_ns
        assert any("'copy' also spends" in w for w in run.warnings), run.warnings
    else:
        with WorkerPool() as pool:
            run = pipeline.time_request(request, pool, runs_root=tmp_path, device="cuda:0")
    summary = compare_summary(run)
    assert summary.overall["copy"].verdict == "slower", summary.configs[0]
