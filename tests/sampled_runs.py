"""Runs made of given samples, for the judge's rules without timing anything: the timing
path's own statistics (``timing_result.summarize``) over synthetic sample sets, in the frame
and record the judge reads of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.records import RunFiles
from nsight_agent.engine.worker.timing_result import summarize
from nsight_agent.request import TIME_METRIC, ProfileRequest, Variant

SOURCE = "import torch\n\ndef setup(n, device='cpu'):\n    return (torch.ones(n),)\n\ndef run(x):\n    return x * 2\n"
PROBE_NS = 92_000.0  # the CPU speed probe of a quiet 2-core machine


@dataclass
class SampledRun:
    """A CPU timing run made of given samples: what the judge reads of a run, nothing else."""

    run_id: str
    run_dir: Path
    request: ProfileRequest
    processed: pd.DataFrame
    facts: RunFacts
    raw: pd.DataFrame = field(default_factory=pd.DataFrame)
    checks: list[Any] = field(default_factory=list)
    kernels: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    artifacts: dict[str, Path] = field(default_factory=dict)
    seconds: float = 1.0
    preflight: None = None
    dropped: dict[str, Any] = field(default_factory=dict)
    suspects: list[Any] = field(default_factory=list)

    @property
    def files(self) -> RunFiles:
        return RunFiles.in_folder(self.run_dir)


def sampled(
    tmp: Path,
    run_id: str,
    samples_us: list[float] | dict[str, list[float]],
    probe_ns: float = PROBE_NS,
    emulated: dict[str, str] | None = None,
    second: list[float] | None = None,
) -> SampledRun:
    """A run of config n=1000 whose variants (the first is the baseline; a list alone is
    variant "run") took ``samples_us``; ``emulated``: the emulator of some of them;
    ``second``: variant "run"'s samples at a second config, n=2000."""
    by_variant = samples_us if isinstance(samples_us, dict) else {"run": samples_us}
    sets = [(1000, name, samples) for name, samples in by_variant.items()]
    sets += [(2000, "run", second)] if second is not None else []
    rows = []
    for n, name, samples in sets:
        row: dict[str, Any] = {"Annotation": name, "Metric": TIME_METRIC, "n": n}
        row |= summarize([s * 1e3 for s in samples], 1.5)
        row |= {"Unit": "ns", "Method": "perf_counter", "GPU": None, "Host": "h"}
        row |= {"OutputOK": True, "Emulated": (emulated or {}).get(name)}
        rows.append(row)
    folder = tmp / run_id
    folder.mkdir(parents=True, exist_ok=True)
    variants = [Variant(name=n, entry="run") for n in by_variant] if len(by_variant) > 1 else []
    configs = [{"n": n} for n in dict.fromkeys(n for n, _, _ in sets)]
    request = ProfileRequest(
        source=SOURCE, language="torch", configs=configs, runs=5, variants=variants
    )
    facts = RunFacts(method="perf_counter", cpu_probe_ns=[probe_ns, probe_ns, probe_ns])
    return SampledRun(run_id, folder, request, pd.DataFrame(rows), facts)
