"""What the timing loop (``timing.py``) returns, and the statistics that fill its rows, apart
from the loop, which imports torch: a ``TimingResult`` read back where the job was sent (the
server) needs pandas only.

Rows use the processed frame's columns (``engine/collection/aggregate.py``), so
``views/compare.py`` reads them unchanged: AvgValue, StdDev and CI95_Lower/Upper are the mean,
the sample std (n-1) and mean ± 1.96·std/√n as on the ncu path, MedianValue, P20Value and
P80Value as there; MedianCI95_Lower/Upper (order statistics) are added, and the loop stops on
the median's interval; StableMeasurement is the engine's one rule (RSD < ``STABLE_RSD_PCT``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nsight_agent.engine.collection.sample_stats import median_ci as median_ci
from nsight_agent.engine.collection.sample_stats import summarize as summarize
from nsight_agent.engine.store.records import DroppedVariant, Suspect


@dataclass
class TimingResult:
    rows: list[dict[str, Any]]
    checks: list[dict[str, Any]]  # OutputCheck fields: one per (variant, config)
    order: list[tuple[int, int, str]]  # (config index, run, variant) in the order called
    method: str
    device: str
    params: list[str]
    notes: list[str] = field(default_factory=list)
    dropped: dict[str, DroppedVariant] = field(default_factory=dict)
    suspects: list[Suspect] = field(default_factory=list)
    # On a CPU: the probe before and after the runs, then the median of the loop's probes
    cpu_probe_ns: list[float] = field(default_factory=list)
    loop_probes_ns: list[float] = field(default_factory=list)  # one after each run

    def frame(self) -> pd.DataFrame:
        """The rows as a processed frame, Geomean per variant over the configs."""
        out = pd.DataFrame(self.rows)
        if not out.empty:
            out["Geomean"] = out.groupby("Annotation", sort=False)["AvgValue"].transform(
                lambda v: math.exp(sum(math.log(x) for x in v) / len(v)) if min(v) > 0 else 0.0
            )
        return out


def converged(samples: Sequence[float], ci_target_pct: float) -> bool:
    """The stopping rule: the median's 95% CI is within ``ci_target_pct`` of it."""
    n, median = len(samples), statistics.median(samples) if samples else 0.0
    lo, hi = median_ci(samples) if samples else (0.0, 0.0)
    return n > 1 and median > 0 and (hi - lo) / 2 / median * 100 <= ci_target_pct


def floors(
    written: Mapping[str, int], samples: Mapping[str, list[float]], peak: float | None
) -> dict[str, str]:
    """Variants whose median time is below what writing their outputs needs at peak DRAM
    bandwidth (bytes / peak B/s): no honest kernel is that fast."""
    if not peak:
        return {}
    out = {}
    for name, values in samples.items():
        need = written.get(name, 0) / peak * 1e9
        median = statistics.median(values)
        if median < need:
            out[name] = (
                f"its median {median / 1e3:.3g} us is below the {need / 1e3:.3g} us that "
                f"writing its {written.get(name, 0) / 1e6:.3g} MB of outputs takes at the GPU's peak DRAM "
                f"bandwidth ({peak / 1e12:.3g} TB/s): the time does not include its work"
            )
    return out
