"""The work check of the ncu path: a variant whose kernels do a small fraction of the
baseline's work did not compute its result in the kernels measured.

When variants are compared, the ncu command also collects each kernel's DRAM bytes and
executed warp instructions (one pass with the duration on the H200). A variant that moves
under ``WORK_FRACTION`` of the baseline's DRAM bytes *and* executes under that fraction of its
instructions, at a config where the baseline does measurable work, is ``suspect``: a token
kernel in front of a cached result looks like that; honest rewrites (fusion, in-cache reuse,
tensor cores) cut one of the two, not both by 10x. The rows the user did not ask for are
removed from the answer once read.

Instructions stand in for FLOP: they count tensor-core, integer and load/store work that
FLOP counters leave out, so a rewrite that moves work between pipes is not flagged.
"""

from __future__ import annotations

import pandas as pd

from nsight_agent.engine.collection import outputs
from nsight_agent.engine.store.records import Suspect
from nsight_agent.request import TIME_METRIC, ProfileRequest

DRAM_BYTES = "dram__bytes.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"
WORK_METRICS = (DRAM_BYTES, INSTRUCTIONS)
WORK_FRACTION = 0.10
# The baseline must do at least this much for a fraction of it to mean anything.
MIN_BASELINE = {DRAM_BYTES: 1e6, INSTRUCTIONS: 1e5}


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
    config_of = outputs.config_index(request)
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
