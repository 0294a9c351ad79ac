"""The timing loop's settings (``TimingOptions``), apart from the loop itself, which imports
torch: the server builds a ``TimeJob`` with them without torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingOptions:
    """How the timing loop (``timing.time_variants``) runs."""

    min_runs: int = 10
    max_runs: int = 200
    ci_target_pct: float = 1.5
    warmup_min: int = 3
    warmup_max: int = 50
    steady_pct: float = 5.0
    max_seconds: float = 20.0  # per config, the timed runs
    flush_l2: bool = True
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None
    skip: tuple[str, ...] = ()  # variants dropped before (at the pre-flight)
    vary_inputs: bool = True
    tolerances: dict[str, tuple[float, float]] | None = None  # (rtol, atol) by dtype name
    peak_dram_bytes_per_s: float | None = None  # default: NVML's, on a GPU
    on_run: Callable[[int, int], None] | None = None  # (config, run) done; set in the worker
