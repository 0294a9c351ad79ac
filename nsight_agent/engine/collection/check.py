"""The check stage: what a run's output checks, kernel counts and work say about its rows.

Pure functions over what the harness recorded (checks, kernels per call, output bytes) and the
aggregated frame: ``OutputOK`` per row (no speedup is read off a wrong row), the warnings an
answer carries (wrong variants, several kernels summed per run, CUDA-event times too short to
trust), and the variants whose kernels cannot have done their work (``suspect``): a mean time
below what writing the outputs takes at the GPU's peak DRAM bandwidth (``floor_suspects``), or
a small fraction of the baseline's work (``work_suspects``).

The work check: when variants are compared, the ncu command also collects each kernel's DRAM
bytes and executed warp instructions (two counters beside the duration). A variant that
moves under ``WORK_FRACTION`` of the baseline's DRAM bytes *and* executes under that fraction
of its instructions, at a config where the baseline does measurable work, is ``suspect``: a
token kernel in front of a cached result looks like that; honest rewrites (fusion, in-cache
reuse, tensor cores) cut one of the two, not both by 10x. The rows the user did not ask for
are removed from the answer once read. Instructions stand in for FLOP: they count
tensor-core, integer and load/store work that FLOP counters leave out, so a rewrite that moves
work between pipes is not flagged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from nsight_agent.engine.collection.extract import ActionRecord
from nsight_agent.engine.store.records import Suspect
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.request import TIME_METRIC, ProfileRequest

DRAM_BYTES = "dram__bytes.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"
WORK_METRICS = (DRAM_BYTES, INSTRUCTIONS)
WORK_FRACTION = 0.10
# The baseline must do at least this much for a fraction of it to mean anything.
MIN_BASELINE = {DRAM_BYTES: 1e6, INSTRUCTIONS: 1e5}


# Below these, the timing path's times disagree with ncu's gpu__time_duration: CUDA events
# read high (launch and event overhead); CUPTI's activity records read short, since ncu's
# interval also holds the GPU's launch processing, a share that shrinks as the kernel grows.
# bench/fast_loop.py's agreement phase measures it; on an H100 the timing path's median reads
# 3616 ns where ncu's reads 4976 ns, 40352 ns against 41644.8 ns, 172399 ns against
# 173353.6 ns (results.agreement of bench/results/perf/2026-12-06-h100-80gb-hbm3-b6e4923.json).
SHORT_KERNEL_NS = {"cuda_events": 50_000.0, "cupti": 100_000.0}


def most_kernels_per_run(
    records: list[ActionRecord], variants: list[str], ignore: list[str]
) -> dict[str, int]:
    """Per variant, the most distinct kernels one call launched. Counted call by call: one
    config may launch another kernel than the next (a library picks an algorithm per size)
    without launching two per run."""
    per_call: dict[tuple[str, int], set[str]] = {}
    for r in records:
        if r.annotation in variants and r.call is not None and r.kernel not in ignore:
            per_call.setdefault((r.annotation, r.call), set()).add(r.kernel)
    return {
        v: max((len(k) for (a, _), k in per_call.items() if a == v), default=0) for v in variants
    }


def with_ok_column(
    processed: pd.DataFrame, request: ProfileRequest, checks: list[OutputCheck]
) -> pd.DataFrame:
    """OutputOK per row: no speedup may be read off a row whose outputs were wrong."""
    params = request.param_names()
    configs = request.expanded_configs()
    ok: dict[tuple[str, tuple[str, ...]], bool] = {}
    for c in checks:
        key = (c.variant, tuple(str(configs[c.config_index][k]) for k in params))
        ok[key] = ok.get(key, True) and c.ok
    out = processed.copy()
    out["OutputOK"] = [
        ok.get((str(row["Annotation"]), tuple(str(row[k]) for k in params)), False)
        for _, row in out.iterrows()
    ]
    return out


def ncu_run_warnings(
    request: ProfileRequest,
    checks: list[OutputCheck],
    kernels: dict[str, list[str]],
    most_per_run: dict[str, int],
    pre: PreflightResult,
) -> list[str]:
    """The warnings of an ncu run: wrong variants, kernels summed per run, pre-flight notes."""
    out = [
        f"variant {c.variant!r} is WRONG for config #{c.config_index} {c.config}: {c.message}; "
        "no speedup is claimed for it"
        for c in checks
        if not c.ok
    ]
    for variant, names in kernels.items():
        kept = [n for n in names if n not in request.ignore_kernels]
        most = most_per_run.get(variant, 0)
        if most > 1 and request.combine_kernels == "sum":
            out.append(
                f"variant {variant!r} launches up to {most} kernels per run ({', '.join(kept)}); "
                "their metrics are summed. Name helpers in ignore_kernels to drop them."
            )
    out += pre.notes + copies_notes(pre.copies_ns)
    return out


def copies_notes(copies_ns: dict[str, dict[int, float]]) -> list[str]:
    """One line per variant whose calls made copies or memsets (the pre-flight's CUPTI
    record): ncu's kernel times leave them out, compare_variants adds them."""
    out = []
    for variant, per_config in copies_ns.items():
        low, high = (f"{f(per_config.values()) / 1e3:.3g}" for f in (min, max))
        out.append(
            f"variant {variant!r} also spends {low if low == high else f'{low}-{high}'} us per "
            "call in copies/memsets (CUPTI, in the pre-flight), which ncu does not profile: its "
            "kernel times leave them out, compare_variants adds them to its verdicts and "
            "speedups (method='timing' measures both in one clock)"
        )
    return out


def short_kernel_warning(frame: Any, method: str) -> list[str]:
    """One warning when the timing path's medians are short enough to differ from ncu's."""
    limit = SHORT_KERNEL_NS.get(method)
    if limit is None or "MedianValue" not in getattr(frame, "columns", ()):
        return []
    short = [float(v) for v in frame["MedianValue"] if float(v) < limit]
    if not short:
        return []
    how = (
        "CUDA-event times this short read above ncu's kernel duration, the more so the "
        "shorter the kernel (launch and event overhead)"
        if method == "cuda_events"
        else "CUPTI records read about a microsecond shorter than ncu's kernel duration "
        "(ncu's interval includes the GPU's launch processing): a larger share the shorter "
        "the kernel"
    )
    return [
        f"{len(short)} row(s) under {limit / 1e3:.0f} us (shortest {min(short) / 1e3:.1f} us): "
        f"{how}; compare them with method='ncu'"
    ]


def config_index(request: ProfileRequest) -> Callable[[Any], int | None]:
    """A processed row's config index in the request (its parameter values, compared as
    text), None for a row of no config of the request."""
    params = request.param_names()
    index = {tuple(str(c[k]) for k in params): i for i, c in enumerate(request.expanded_configs())}
    return lambda row: index.get(tuple(str(row[k]) for k in params))


def floor_suspects(
    processed: pd.DataFrame,
    request: ProfileRequest,
    out_bytes: list[dict[str, int]],
    peak_bytes_per_s: float | None,
) -> list[Suspect]:
    """The physical floor on the ncu path: a (variant, config) whose mean kernel time is below
    what writing its outputs takes at the GPU's peak DRAM bandwidth did not do its work in
    the kernels measured (a result cached or computed elsewhere). ``out_bytes``: per config,
    each variant's output bytes (the harness's manifest)."""
    if not peak_bytes_per_s or processed.empty or "AvgValue" not in processed:
        return []
    config_of = config_index(request)
    found = []
    for _, row in processed[processed["Metric"] == TIME_METRIC].iterrows():
        ci = config_of(row)
        if ci is None or ci >= len(out_bytes):
            continue
        variant = str(row["Annotation"])
        written = out_bytes[ci].get(variant, 0)
        need_ns = written / peak_bytes_per_s * 1e9
        if float(row["AvgValue"]) < need_ns:
            found.append(
                Suspect(
                    variant=variant,
                    config_index=ci,
                    reason=f"its kernels took {float(row['AvgValue']) / 1e3:.3g} us, below "
                    f"the {need_ns / 1e3:.3g} us that writing its {written / 1e6:.3g} MB of "
                    f"outputs takes at the GPU's peak DRAM bandwidth "
                    f"({peak_bytes_per_s / 1e12:.3g} TB/s): the work is not in the kernels "
                    "measured",
                )
            )
    return found


def first_per_config(suspects: list[Suspect]) -> list[Suspect]:
    """One reason per (variant, config): the first found (the pre-flight's, then the run's)."""
    seen: dict[tuple[str, int], Suspect] = {}
    for s in suspects:
        seen.setdefault((s.variant, s.config_index), s)
    return list(seen.values())


def collected_metrics(request: ProfileRequest) -> list[str]:
    """What the ncu command collects: the request's metrics and report counters, plus the
    work metrics when variants are compared."""
    asked = row_metrics(request)
    return asked + [m for m in request.report_counters if m not in asked]


def row_metrics(request: ProfileRequest) -> list[str]:
    """What is read into rows: the request's metrics, plus the work metrics when variants are
    compared (not the report counters, which only the report's reader reads)."""
    asked = list(request.metrics) or [TIME_METRIC]
    if len(request.effective_variants()) < 2:
        return asked
    return asked + [m for m in WORK_METRICS if m not in asked]


def added_metrics(request: ProfileRequest) -> list[str]:
    """The work metrics collected for the check only (not asked for by the request)."""
    asked = set(request.metrics) or {TIME_METRIC}
    return [m for m in row_metrics(request) if m not in asked]


def work_suspects(processed: pd.DataFrame, request: ProfileRequest) -> list[Suspect]:
    """(variant, config) pairs whose kernels did under ``WORK_FRACTION`` of the baseline's
    DRAM bytes and instructions; the reason names both fractions."""
    if processed.empty or not set(WORK_METRICS) <= set(processed.get("Metric", [])):
        return []
    config_of = config_index(request)
    baseline = request.baseline_name()
    values: dict[tuple[str, int], dict[str, float]] = {}
    for _, row in processed[processed["Metric"].isin(WORK_METRICS)].iterrows():
        ci = config_of(row)
        if ci is not None:
            value = float(row["AvgValue"])
            values.setdefault((str(row["Annotation"]), ci), {})[str(row["Metric"])] = value
    found = []
    for (variant, ci), mine in sorted(values.items()):
        base = values.get((baseline, ci), {})
        if variant == baseline or any(m not in base or m not in mine for m in WORK_METRICS):
            continue
        if any(base[m] < MIN_BASELINE[m] for m in WORK_METRICS):
            continue
        fractions = {m: mine[m] / base[m] for m in WORK_METRICS}
        if all(f < WORK_FRACTION for f in fractions.values()):
            found.append(
                Suspect(
                    variant=variant,
                    config_index=ci,
                    reason=f"its kernels moved {fractions[DRAM_BYTES]:.1%} of the baseline's "
                    f"DRAM bytes and executed {fractions[INSTRUCTIONS]:.1%} of its "
                    "instructions: the work is not in the kernels measured (a cached or "
                    "precomputed result?)",
                )
            )
    return found


def without(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """``frame`` without the rows of ``metrics`` (collected for a check, not asked for)."""
    if not metrics or frame.empty or "Metric" not in frame:
        return frame
    return frame[~frame["Metric"].isin(metrics)].reset_index(drop=True)
