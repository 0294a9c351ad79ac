"""A run's variants against its baseline: per config each variant's time, speedup and
verdict (``judge/verdicts.py``), and one verdict per variant. Copies and memsets count as
part of a call on the ncu path (``judge/copies.py``); a wrong, untrusted or unmeasured
variant gets its verdict and why, never a speedup."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import BaseModel

from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge import verdicts
from nsight_agent.judge.copies import copies_by, with_copies
from nsight_agent.judge.emulated import emulator, no_verdict
from nsight_agent.judge.run import (
    RunLike,
    checks_by,
    config_index,
    config_list,
    denormalized,
    param_names,
    variant_names,
)
from nsight_agent.judge.verdicts import VariantOverall, VariantTiming, Verdict
from nsight_agent.request import TIME_METRIC
from nsight_agent.wording import whole


class CompareConfig(BaseModel):
    config_index: int
    config: dict[str, Any]
    variants: dict[str, VariantTiming]


@dataclass(frozen=True)
class Comparison:
    """Every config's verdicts and each variant's overall one, for one metric of one run."""

    run_id: str
    metric: str
    unit: str | None
    baseline: str
    min_effect_pct: float
    configs: list[CompareConfig]
    overall: dict[str, VariantOverall]
    frame: pd.DataFrame  # the metric's rows in absolute values: what the verdicts read

    @property
    def rule(self) -> str:
        return verdicts.verdict_rule(self.min_effect_pct)


def min_effect_of(run: RunLike, override: float | None = None) -> float:
    """``override`` when given, else the minimum effect the run asked for (a stored run recorded
    before the option existed reads the default when its request is loaded)."""
    return run.request.min_effect_pct if override is None else override


def compare_run(
    run: RunLike,
    *,
    baseline: str | None = None,
    metric: str = TIME_METRIC,
    min_effect_pct: float | None = None,
    suspects: Mapping[tuple[str, int], str] | None = None,
) -> Comparison:
    """Per config: each variant's time, speedup vs the baseline and a verdict (VERDICT_RULE);
    ``min_effect_pct`` re-reads a run with another minimum effect than it asked for;
    ``suspects``: (variant, config index) whose time on this metric is not trusted, and why,
    beside the run's own."""
    frame = denormalized(run.processed)
    frame = frame[frame["Metric"] == metric]
    if frame.empty:
        raise InvalidRequestError(
            f"Run {run.run_id} has no {metric!r} rows to compare.",
            f"Metrics in this run: {', '.join(dict.fromkeys(run.processed['Metric']))}.",
        )
    variants = variant_names(frame)
    variants += [v for v in run.dropped if v not in variants]
    base = baseline or run.request.baseline or variants[0]
    if base not in variants:
        raise InvalidRequestError(
            f"Baseline {base!r} is not a variant of run {run.run_id}.",
            f"Variants: {', '.join(variants)}.",
        )
    params, configs = param_names(frame), config_list(run)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for row in frame.to_dict("records"):
        rows[(str(row["Annotation"]), config_index(configs, row, params))] = row
    rows = with_copies(rows, copies_by(run, metric))  # ncu profiles kernels only
    indices = sorted({i for _, i in rows}) or list(range(len(configs)))
    measured = _Measured(
        rows,
        checks_by(run),
        {**{(s.variant, s.config_index): s.reason for s in run.suspects}, **(suspects or {})},
        run.dropped,
    )
    effect = min_effect_of(run, min_effect_pct)
    out: list[CompareConfig] = []
    speedups: dict[str, list[float]] = {v: [] for v in variants}
    judged: dict[str, list[Verdict]] = {v: [] for v in variants}
    for idx in indices:
        entry = measured.config(variants, base, idx, effect, verdicts.effect_floor(metric))
        for name, t in entry.items():
            speedups[name] += [t.speedup] if t.speedup is not None else []
            judged[name].append(t.verdict)
        config = configs[idx] if 0 <= idx < len(configs) else {}
        out.append(CompareConfig(config_index=idx, config=config, variants=entry))
    overall = {
        name: verdicts.variant_overall(name == base, judged[name], speedups[name])
        for name in variants
    }
    unit = next((str(u) for u in frame["Unit"] if isinstance(u, str) and u), None)
    return Comparison(run.run_id, metric, unit, base, effect, out, overall, frame)


@dataclass(frozen=True)
class _Measured:
    """What a run says of each (variant, config): its row, output check, why it is suspect,
    and the variants it dropped before measuring."""

    rows: dict[tuple[str, int], dict[str, Any]]
    checks: dict[tuple[str, int], OutputCheck]
    suspects: dict[tuple[str, int], str]
    dropped: dict[str, DroppedVariant]

    def config(
        self, variants: list[str], base: str, idx: int, effect: float, floor: float
    ) -> dict[str, VariantTiming]:
        """Each variant at config ``idx``: measured against the baseline, or why it was not."""
        b = self.rows.get((base, idx), {})
        entry: dict[str, VariantTiming] = {}
        for name in variants:
            check = self.checks.get((name, idx))
            failed = check is not None and not check.ok
            r = self.rows.get((name, idx))
            t = verdicts.timing(
                r, b, is_base=name == base, failed=failed, min_effect_pct=effect, floor=floor
            )
            if check is not None and failed:
                t.check = verdicts.check_text(check)
            elif name in self.dropped:
                t = verdicts.dropped(self.dropped[name])
            elif (name, idx) in self.suspects and name != base:
                t.verdict, t.speedup = "suspect", None
                t.check = whole(self.suspects[(name, idx)])
            elif name != base and r is not None and (emulator(r) is None) != (emulator(b) is None):
                t.verdict, t.speedup = "emulated", None
                t.check = no_verdict(emulator(r), emulator(b))
            t.emulated = emulator(r)
            entry[name] = t
        return entry
