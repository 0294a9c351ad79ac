"""The named bench suites, for any machine with an NVIDIA GPU and Nsight Compute.

``python -m bench run SUITE [SUITE ...]`` runs each, every step under its own time limit, and
writes ``bench/results/<suite>/<date>-<gpu>-<commit>.json`` (``bench/results.py``); ``python
-m bench list`` names them with their limits. A suite's limit is the sum of its steps' limits,
so that one suite fits one command of a machine that allows 600 s. Nothing here assumes how the
machine was obtained: run it from the repository root with the project importable (an
install, or PYTHONPATH=.). A suite that lacks what it needs (a checkout, a package, a second
GPU) writes its results file saying so instead of failing.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import suite_speed, suite_tests, suite_verdicts
from bench.results import write


@dataclass(frozen=True)
class Suite:
    """A suite: what it runs and its steps' time limits (seconds, each step's own)."""

    run: Callable[[Path], dict[str, Any]]
    limits: dict[str, int]

    @property
    def limit_s(self) -> int:
        return sum(self.limits.values())

    @property
    def about(self) -> str:
        return " ".join((self.run.__doc__ or "").split())


SUITES: dict[str, Suite] = {
    "gpu-tests": Suite(suite_tests.gpu_tests, suite_tests.GPU_TESTS_LIMITS),
    "gpu-faults": Suite(suite_tests.gpu_faults, suite_tests.GPU_FAULTS_LIMITS),
    "conformance": Suite(suite_tests.conformance, suite_tests.CONFORMANCE_LIMITS),
    "examples": Suite(suite_tests.examples, suite_tests.EXAMPLES_LIMITS),
    "mcp-session": Suite(suite_tests.mcp_session, suite_tests.MCP_SESSION_LIMITS),
    "adversarial": Suite(suite_verdicts.adversarial, suite_verdicts.ADVERSARIAL_LIMITS),
    "kernelbench": Suite(suite_verdicts.kernelbench, suite_verdicts.KERNELBENCH_LIMITS),
    "builds": Suite(suite_speed.builds, suite_speed.BUILDS_LIMITS),
    "kernelbench-timing": Suite(
        suite_verdicts.kernelbench_timing, suite_verdicts.KERNELBENCH_TIMING_LIMITS
    ),
    "effect-size": Suite(suite_verdicts.effect_size, suite_verdicts.EFFECT_SIZE_LIMITS),
    "baseline-drift": Suite(suite_verdicts.baseline_drift, suite_verdicts.BASELINE_DRIFT_LIMITS),
    "gate-under-load": Suite(suite_verdicts.gate_under_load, suite_verdicts.GATE_LIMITS),
    "perf": Suite(suite_speed.perf, suite_speed.PERF_LIMITS),
    "prelaunch": Suite(suite_speed.prelaunch, suite_speed.PRELAUNCH_LIMITS),
    "peer": Suite(suite_speed.peer, suite_speed.PEER_LIMITS),
    "section-costs": Suite(suite_speed.section_costs, suite_speed.SECTION_COSTS_LIMITS),
    "ray": Suite(suite_speed.ray, suite_speed.RAY_LIMITS),
}
# Results folders that no single suite writes: the whole KernelBench sweep takes several
# commands, merged (bench/kernelbench_sweep.py --merge ... --results bench/results).
RECORDED = {
    "kernelbench-sweep": "KernelBench's problems, every level on the timing path and samples "
    "diagnosed, read as a step and under torch.compile (bench/kernelbench_sweep.py, one phase "
    "or shard a command, merged with --merge --results bench/results).",
}
RESULTS_SHAPE = "bench/results/{suite}/<date>-<gpu>-<commit>.json"


def listing() -> list[str]:
    """One line a suite: its name, limit, results file and what it runs."""
    return [
        f"{name}: limit {s.limit_s} s; writes {RESULTS_SHAPE.format(suite=name)}; {s.about}"
        for name, s in SUITES.items()
    ]


def run(name: str, results_root: Path) -> Path:
    """One suite, its results file written; the path."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        start = time.monotonic()
        payload = SUITES[name].run(Path(tmp))
        payload["seconds"] = round(time.monotonic() - start, 1)
    payload["limit_s"] = SUITES[name].limit_s
    return write(name, payload, results_root)
