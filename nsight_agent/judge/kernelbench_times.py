"""KernelBench's numbers of a run: each variant's time per config by KernelBench's timing
definition (``KERNELBENCH_METRIC`` rows: its trials, run in the pre-flight on a GPU by
``harness/call_loop.py``), and what they are. A run without those rows (a CPU, where
KernelBench does not time) reads the times its verdicts compare, and says so."""

from __future__ import annotations

from dataclasses import dataclass, field

import nsight_agent.kernelbench as kernelbench
from nsight_agent.judge.basis import NAME, Bases, basis_text
from nsight_agent.judge.run import RunLike, config_index, config_list, denormalized, param_names
from nsight_agent.time_basis import KERNELBENCH_METRIC


@dataclass(frozen=True)
class KernelBenchTimes:
    """Per variant, its mean time (in ``unit``) at each config index that has one; the
    variants whose per-call time does not hold their work (``basis.escaped_calls``), and
    why: KernelBench's time of them is not their work's either."""

    unit: str
    by_variant: dict[str, dict[int, float]]
    timing: str
    num_correct_trials: int
    num_perf_trials: int
    untrusted: dict[str, str] = field(default_factory=dict)


def definition(trials: int) -> str:
    return (
        f"KernelBench's timing: {kernelbench.WARMUP} warm-up calls, then {trials} trials (the "
        f"first of {trials + kernelbench.DISCARD} discarded), each a synchronise, its L2 "
        "flush (a 256 MiB write), CUDA events on the caller's stream around the call and a "
        "synchronise; the mean, on one set of inputs. Run in the pre-flight, outside ncu and "
        "every profiler"
    )


def kernelbench_times(run: RunLike, bases: Bases) -> KernelBenchTimes:
    """The run's KernelBench times, else the times of ``bases``' main comparison."""
    request = run.request
    trials, correct = request.num_perf_trials, request.num_correct_trials
    untrusted = {name: why for (name, _), why in bases.escaped.items()}
    frame = denormalized(run.processed)
    rows = frame[frame["Metric"] == KERNELBENCH_METRIC] if "Metric" in frame.columns else frame
    if len(rows):
        params, configs = param_names(frame), config_list(run)
        found: dict[str, dict[int, float]] = {}
        for row in rows.to_dict("records"):
            index = config_index(configs, row, params)
            found.setdefault(str(row["Annotation"]), {})[index] = float(row["AvgValue"])
        return KernelBenchTimes("ns", found, definition(trials), correct, trials, untrusted)
    main = bases.main
    times: dict[str, dict[int, float]] = {}
    for c in main.configs:
        for name, timing in c.variants.items():
            if timing.time:
                times.setdefault(name, {})[c.config_index] = timing.time
    said = (
        f"no KernelBench trials in this run (KernelBench times on a GPU only): our "
        f"{NAME[bases.basis]}, {basis_text(bases.basis, run)}"
    )
    return KernelBenchTimes(main.unit or "ns", times, said, correct, 0, untrusted)
