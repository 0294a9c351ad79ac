"""pipe_at_roof: a compute-bound kernel at the issue roof of a pipe the FLOP counters miss.

The probes (``bench/probes/ncu_passthrough.py``, recorded on the H200 with the deeper pass, which
adds ComputeWorkloadAnalysis) are the kernels the rule was written for: a ``MUFU.SIN`` loop
and an xorshift loop, which a diagnosis without the rule headlines with ncu's local estimates
("fp32 non-fused instructions", "achieved occupancy"). ``collatz_cuda`` is a held-out planted kernel
the rule was not written on; ``logistic_map_cuda`` is in the tuning set, since this rule was changed for it
(docs/DIAGNOSIS.md)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.diagnose import checks_compute as cc
from nsight_agent.diagnose.kernel import COMPUTE_SECTION, KernelDiagnosis, diagnose_action
from nsight_agent.engine.collection import extract
from tests.fakes import FakeAction
from tests.fixture_reports import unpacked
from tests.test_diagnose_causes import BASE, rule

FIXTURES = Path(__file__).parent / "fixtures"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"


@functools.cache
def action(name: str) -> Any:
    """The one kernel of a report in tests/fixtures."""
    (only,) = extract.iter_actions(extract.load(unpacked(FIXTURES / name)))
    return only


def diagnosed(name: str) -> KernelDiagnosis:
    return diagnose_action(action(name))


@pytest.mark.parametrize(
    ("report", "pipe", "name"),
    [("probes/probe_sfu.ncu-rep.xz", "xu", "XU"), ("probes/probe_hash.ncu-rep.xz", "alu", "ALU")],
)
def test_a_kernel_at_a_non_flop_pipe_is_at_that_roof(report: str, pipe: str, name: str) -> None:
    d = diagnosed(report)
    assert d.bound.bound == "compute-bound" and d.bound.roof is None  # no FLOP roof
    top = d.causes[0]
    assert (top.id, top.kind) == ("pipe_at_roof", "roof")
    assert top.ev[0].m == cc.PIPE_ISSUE.format(pipe) and top.ev[0].v >= 70.0
    assert d.headline.startswith(f"at {top.ev[0].v:.0f}% of the {name} pipe's issue roof")
    # Not ncu's local estimates about units that are not the limit.
    assert not any(c.id == "ncu_rule" for c in d.causes), d.headline
    assert "non-fused" not in d.headline and "occupancy" not in d.headline


def test_the_held_out_collatz_kernel_keeps_its_divergence_first() -> None:
    d = diagnosed("planted/collatz_cuda.ncu-rep")
    assert [c.id for c in d.causes] == ["warp_divergence", "pipe_at_roof"]
    assert d.causes[1].ev[0].m == cc.PIPE_ISSUE.format("alu")
    assert d.headline.endswith("; warp divergence first")


def test_fp64_in_float_code_relieves_the_xu_roof_its_conversions_fill() -> None:
    d = diagnosed("planted/logistic_map_cuda.ncu-rep")
    assert [c.id for c in d.causes] == ["slow_precision", "pipe_at_roof"]
    assert d.causes[1].ev[0].m == cc.PIPE_ISSUE.format("xu")


def test_a_compute_bound_first_pass_asks_for_the_pipes_first() -> None:
    d = diagnosed("probes/probe_sfu_first_pass.ncu-rep.xz")
    assert COMPUTE_SECTION not in d.collected
    assert d.deeper is not None and next(iter(d.deeper)) == COMPUTE_SECTION
    assert len(d.deeper) == 5  # on top of the usual four
    # SM at 90 %: ncu's achieved-occupancy estimate (local 71 %) is no cause of this kernel,
    # whose XU pipe the deeper pass finds at 97 % (the headline before was that estimate).
    assert (d.bound.compute_pct or 0.0) > 80.0
    assert d.headline == "compute-bound: no cause found in the metrics collected"
    assert d.unmapped and d.unmapped[0].startswith("AchievedOccupancy")


def _kernel(**metrics: float) -> dict[str, float]:
    return {**BASE, SM: 92.0, MEM: 2.0, **metrics}


def test_no_pipe_roof_for_a_memory_bound_kernel_or_under_the_roof_pct() -> None:
    busy_alu = cc.PIPE_ISSUE.format("alu")
    memory = diagnose_action(FakeAction({**BASE, SM: 40.0, MEM: 92.0, busy_alu: 95.0}))
    assert all(c.id != "pipe_at_roof" for c in memory.causes)
    assert COMPUTE_SECTION not in (memory.deeper or {})
    under = diagnose_action(FakeAction(_kernel(**{busy_alu: 69.0})))
    assert all(c.id != "pipe_at_roof" for c in under.causes)
    at = diagnose_action(FakeAction(_kernel(**{busy_alu: 71.0})))
    assert at.causes[-1].id == "pipe_at_roof"


def test_a_partial_last_wave_stays_beside_the_pipe_roof() -> None:
    """The pipe's rate is over the SMs' active cycles: SMs idle in the tail add to it."""
    adu = cc.PIPE_ISSUE.format("adu")
    tail = {"launch__waves_per_multiprocessor": 1.01, "launch__grid_size": 133.0, adu: 96.5}
    d = diagnose_action(
        FakeAction(_kernel(**tail), [rule("LaunchConfiguration", "Tail Effect", 50.0)])
    )
    assert [c.id for c in d.causes] == ["tail_effect", "pipe_at_roof"]
    assert "barriers" in (d.causes[1].note or "")
