"""``ProfileResults``: what ``analyze.kernel`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas (a slow import) loads with the report's rows, not with `import nsight`
    import pandas as pd


@dataclass
class ProfileResults:
    """Processed (one row per annotation, metric and config) and raw (one per run) frames."""

    processed: pd.DataFrame
    raw: pd.DataFrame
    param_names: list[str]
    metrics: list[str]
    artifacts: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0
    # Where ``seconds`` went, by stage (api/analyze.py's stage_split); empty if unknown.
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def to_dataframe(self) -> pd.DataFrame:
        """nsight-python's processed frame (AvgValue, StdDev, ... Geomean); a copy."""
        return self.processed.copy()

    def raw_dataframe(self) -> pd.DataFrame:
        """One row per (annotation, config, run, metric): the values before aggregation."""
        return self.raw.copy()

    def __repr__(self) -> str:
        n = len(self.processed)
        return f"ProfileResults({n} rows, metrics={self.metrics}, artifacts={list(self.artifacts)})"
