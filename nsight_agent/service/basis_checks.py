"""The validation stage's checks of the time basis and of KernelBench's trial counts: a value
that cannot apply to the request is refused with where it does, never ignored.

- ``time_basis="call"`` needs the calls timed end to end, which the pre-flight does only
  where a call's time is measured and judged whole (``harness/render.call_runs``): not for a
  counter collection (sections, a skill), a sampled step (``sample_launches``), nor with
  kernels left out of the time (``ignore_kernels``) or kept apart (``combine_kernels="none"``):
  a per-call time holds every kernel of the call, once.
- ``num_correct_trials`` and ``num_perf_trials`` count KernelBench's trials, which run only
  under ``correctness="kernelbench"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import nsight_agent.kernelbench as kernelbench
from nsight_agent.errors import Problem
from nsight_agent.request import TIME_METRIC

CALL = "time_basis='call' compares each call timed end to end"
KERNELBENCH_TRIALS = {
    "num_correct_trials": kernelbench.TRIALS,
    "num_perf_trials": kernelbench.PERF_TRIALS,
}


def basis_problems(fields: Mapping[str, Any]) -> list[Problem]:
    """Each problem of ``fields`` (a request's, skill merged into metrics and sections) with
    its time basis and KernelBench's trial counts."""
    problems = []
    if fields.get("time_basis") == "call":
        problems += [
            Problem("option_basis", name, f"{CALL}, and {why}", hint=_hint(name))
            for name, why in _call_conflicts(fields)
        ]
    if fields.get("correctness") != "kernelbench":
        for name, default in KERNELBENCH_TRIALS.items():
            value = fields.get(name)
            if value is not None and value != default:
                problems.append(
                    Problem(
                        "option_basis",
                        name,
                        f"{name}={value!r} counts KernelBench's trials, which run only under "
                        "correctness='kernelbench'",
                        hint=f"Add correctness='kernelbench', or drop {name}.",
                    )
                )
    return problems


def _call_conflicts(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    if fields.get("sections"):
        found.append(("sections", "a counter collection (sections) times no call end to end"))
    if TIME_METRIC not in (fields.get("metrics") or [TIME_METRIC]):
        found.append(("metrics", f"a run without {TIME_METRIC} times no call"))
    if fields.get("sample_launches"):
        found.append(("sample_launches", "a sampled step times no call end to end"))
    if fields.get("ignore_kernels"):
        found.append(("ignore_kernels", "a call's time holds every kernel it launched"))
    if fields.get("combine_kernels") == "none":
        found.append(("combine_kernels", "a call has one time, not one per kernel"))
    return found


def _hint(name: str) -> str:
    return f"Use time_basis='gpu' (the kernels' time), or drop {name}."
