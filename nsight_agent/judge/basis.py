"""Which time a comparison judges, what that time is on a run, and where the two times point
opposite ways (``nsight_agent/time_basis.py`` defines both).

    basis_of        the basis asked for, else the run's request's (its own, or its default,
                    which gives way to the other where the run holds only that one)
    compare_bases   the comparison on that basis, and on the other where the run holds it;
                    on the per-call basis a call whose time is under half its GPU time is
                    suspect (its work escaped the events on the caller's stream)
    basis_text      what a time is on this run: its method (ncu, CUPTI, CUDA events, a CPU)
    disagreements   per variant, the configs where one basis says faster and the other
                    slower, and why: kernels launched per call (the pre-flight's count), and
                    the share of each call the GPU sat idle between kernels (1 - GPU time /
                    per-call time; "host gaps" where ``diagnose/step.host_gaps`` finds them)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsight_agent.diagnose.step import host_gaps
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge.comparison import Comparison, compare_run
from nsight_agent.judge.run import CPU_TIMER, RunLike, timing_method
from nsight_agent.judge.verdicts import VariantTiming
from nsight_agent.request import TIME_METRIC
from nsight_agent.time_basis import CALL_METRIC, TimeBasis, other

METRIC: dict[TimeBasis, str] = {"gpu": TIME_METRIC, "call": CALL_METRIC}
NAME: dict[TimeBasis, str] = {"gpu": "GPU time", "call": "per-call time"}

CALL_TEXT = (
    "each call end to end: CUDA events after an L2 flush, as KernelBench times it; launch "
    "gaps and host time count; timed in the pre-flight, outside ncu and every profiler"
)
GPU_TEXT = {
    None: "kernel durations per call (ncu), plus its copies; no launch gaps or host time",
    "cupti": "the GPU work of each call (CUPTI records); no launch gaps or host time",
    "cuda_events": "CUDA events around each call, its launch hidden by a spin kernel",
}
CPU_TEXT = "the wall time of each call (perf_counter, on the CPU), on both bases"


def basis_of(run: RunLike, asked: TimeBasis | None = None) -> tuple[TimeBasis, str | None]:
    """``asked``, else the basis the run's request asked for, else its default; a default
    the run holds no times of gives way to the other basis, with a note saying so."""
    basis = asked or run.request.basis()
    if asked or run.request.time_basis or has_basis(run, basis) or not has_basis(run, other(basis)):
        return basis, None
    note = (
        f"this run holds no {NAME[basis]}s (its pre-flight timed no call end to end): its "
        f"verdicts compare {NAME[other(basis)]}"
    )
    return other(basis), note


def basis_text(basis: TimeBasis, run: RunLike) -> str:
    method = timing_method(run, run.processed)
    if method == CPU_TIMER:
        return CPU_TEXT
    if basis == "call":
        return CALL_TEXT
    return GPU_TEXT.get(method, GPU_TEXT[None])


def has_basis(run: RunLike, basis: TimeBasis) -> bool:
    frame = run.processed
    return "Metric" in frame.columns and bool((frame["Metric"] == METRIC[basis]).any())


@dataclass(frozen=True)
class Bases:
    """One run compared on ``basis`` (``main``) and, where it holds both, on the other;
    ``escaped``: the (variant, config) whose per-call time does not hold its work."""

    basis: TimeBasis
    main: Comparison
    other: Comparison | None
    escaped: dict[tuple[str, int], str] = field(default_factory=dict)

    @property
    def other_basis(self) -> TimeBasis:
        return other(self.basis)


def compare_bases(
    run: RunLike,
    basis: TimeBasis,
    *,
    baseline: str | None = None,
    min_effect_pct: float | None = None,
) -> Bases:
    """The comparison on ``basis``; a run without its times says which basis it holds."""
    if not has_basis(run, basis):
        held = [b for b in ("gpu", "call") if has_basis(run, b)]
        raise InvalidRequestError(
            f"Run {run.run_id} holds no {NAME[basis]}s to compare: its pre-flight timed no "
            "call end to end (a counter collection, a sampled step, or no GPU)."
            if basis == "call"
            else f"Run {run.run_id} holds no GPU times to compare.",
            f"Read it with time_basis={held[0]!r}." if held else "Measure it again.",
        )
    gpu = compare_run(run, baseline=baseline, metric=TIME_METRIC, min_effect_pct=min_effect_pct)
    if not has_basis(run, "call"):
        return Bases(basis, gpu, None)
    call = compare_run(
        run, baseline=gpu.baseline, metric=CALL_METRIC, min_effect_pct=min_effect_pct
    )
    escaped = escaped_calls(gpu, call)
    if escaped:
        call = compare_run(
            run,
            baseline=gpu.baseline,
            metric=CALL_METRIC,
            min_effect_pct=min_effect_pct,
            suspects=escaped,
        )
    main, second = (gpu, call) if basis == "gpu" else (call, gpu)
    return Bases(basis, main, second, escaped)


# A call's events hold all its work unless some ran on a stream the call never joined; work
# on two streams that overlap still spans at least half its summed kernel time.
ESCAPED_SHARE = 0.5


def escaped_calls(gpu: Comparison, call: Comparison) -> dict[tuple[str, int], str]:
    """(variant, config index) whose per-call time is under ``ESCAPED_SHARE`` of its GPU
    time: its kernels ran outside the events on the caller's stream (a stream it launched
    on and never joined, as KernelBench's non-default-stream kernel does), so its per-call
    time, like KernelBench's own, does not hold its work."""
    out = {}
    for g, c in zip(gpu.configs, call.configs):
        for name, tc in c.variants.items():
            tg = g.variants.get(name)
            if tg is None or tg.time is None or tc.time is None:
                continue
            if tc.time < ESCAPED_SHARE * tg.time:
                out[(name, c.config_index)] = (
                    f"its per-call time ({tc.time / 1e3:.3g} us) is under half its GPU time "
                    f"({tg.time / 1e3:.3g} us): its kernels ran outside the events on the "
                    "caller's stream (a stream the call never joins), so the per-call time "
                    "does not hold its work"
                )
    return out


OPPOSITE = {("faster", "slower"), ("slower", "faster")}


def disagreements(bases: Bases, run: RunLike) -> list[str]:
    """Per variant, where its GPU-time and per-call verdicts point opposite ways, and why."""
    if bases.other is None:
        return []
    by_basis = {bases.basis: bases.main, other(bases.basis): bases.other}
    gpu, call = by_basis["gpu"], by_basis["call"]
    base = gpu.baseline
    out = []
    for name in gpu.overall:
        if name == base:
            continue
        found = []
        for g, c in zip(gpu.configs, call.configs):
            tg, tc = g.variants.get(name), c.variants.get(name)
            if tg and tc and (tg.verdict, tc.verdict) in OPPOSITE:
                found.append((g.config_index, tg, tc))
        if found:
            out.append(_why(name, base, found, gpu, call, run))
    return out


def _why(
    name: str,
    base: str,
    found: list[tuple[int, VariantTiming, VariantTiming]],
    gpu: Comparison,
    call: Comparison,
    run: RunLike,
) -> str:
    index, tg, tc = found[0]
    configs = len(gpu.configs)
    where = f"config #{index}" if len(found) == 1 else f"{len(found)} of {configs} configs"
    said = (
        f"{name}: GPU time and per-call time disagree at {where}: GPU time says {tg.verdict} "
        f"x{tg.speedup}, per-call time {tc.verdict} x{tc.speedup} (config #{index})"
    )
    kernels = run.preflight.kernel_counts if run.preflight is not None else {}
    kb, kv = kernels.get(base, {}).get(index), kernels.get(name, {}).get(index)
    if kb is not None and kv is not None:
        said += f"; per call {base} launches {kb} kernel(s), {name} {kv}"
    idle = []
    for who in (base, name):
        g = _time(gpu, index, who)
        c = _time(call, index, who)
        if g and c and c > 0:
            share = max(0.0, 100.0 * (1.0 - g / c))
            gaps = " (host gaps)" if host_gaps(g, c) is not None else ""
            idle.append(f"{share:.0f}% of {who}'s call{gaps}")
    if idle:
        said += "; the GPU sat idle between kernels for " + " and ".join(idle)
    reason = (
        "its kernels take longer, but its calls lose less time between them (launches, host work)"
        if tc.verdict == "faster"
        else "its kernels take less time, but its calls lose more between them (launches, "
        "host work)"
    )
    return f"{said}: {reason}"


def _time(comparison: Comparison, index: int, name: str) -> float | None:
    for c in comparison.configs:
        if c.config_index == index and name in c.variants:
            return c.variants[name].time
    return None
