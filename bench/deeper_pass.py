"""What the diagnosis's passes cost, beside ncu's own ``full`` set, on a GPU with ncu.

``diagnose`` from source profiles once with every section its checks read (``one``); it used
to profile twice (``staged=True`` still does): a cheap first pass, then only the sections that
diagnosis asks for. For a compute-bound kernel under no FLOP roof it adds
ComputeWorkloadAnalysis (the SM pipes' issue rates, ``pipe_at_roof``) on top of the usual four. This measures, per probe kernel
(``bench/probes/ncu_passthrough.py``), the wall time of one ``profile`` call with:

- ``first``: the first pass's sections;
- ``second``: the second pass as ``diagnose`` asks for it now;
- ``second_no_cwa``: the same without ComputeWorkloadAnalysis (what it cost to add);
- ``one``: the one run ``diagnose`` makes now (is its headline the staged second pass's?);
- ``peer_full``: every section of ncu's ``full`` set, which a user without the tool runs.

Each is timed ``--reps`` times (median kept; each call also prints its time as it ends); the
ratios are printed and written to ``DIR/deeper_pass.json``. One run and one warm-up per config,
as ``diagnose`` collects, but without the torch operator ranges it records (these probes launch
one Triton kernel and no torch operator around it).

    python3 -m bench.deeper_pass [--out DIR] [--reps 1] [--entries run_sfu ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nsight_agent.diagnose.kernel import COMPUTE_SECTION
from nsight_agent.judge.diagnosis import diagnose_report
from nsight_agent.judge.reading import read_report
from nsight_agent.service.diagnose import FIRST_PASS_METRICS, FIRST_PASS_SECTIONS, ONE_PASS_SECTIONS
from nsight_agent.service.measure import Measuring, RunResult
from nsight_agent.service.profile import profile
from nsight_agent.service.runs import report_of

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "bench" / "probes" / "ncu_passthrough.py"
ENTRIES = ("run_sfu", "run_hash", "run_barrier")
CONFIGS = [{"n": 1 << 20}]
# ncu 2025.3's ``full`` set (shared/reference/ncu-2025.3.1-sets.txt), less the NVLink
# sections, which need NVLink and add nothing on one GPU.
FULL_SET = [
    "ComputeWorkloadAnalysis",
    "InstructionStats",
    "LaunchStats",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Chart",
    "MemoryWorkloadAnalysis_Tables",
    "NumaAffinity",
    "Occupancy",
    "PmSampling",
    "SchedulerStats",
    "SourceCounters",
    "SpeedOfLight",
    "SpeedOfLight_HierarchicalDoubleRooflineChart",
    "SpeedOfLight_HierarchicalHalfRooflineChart",
    "SpeedOfLight_HierarchicalSingleRooflineChart",
    "SpeedOfLight_HierarchicalTensorRooflineChart",
    "SpeedOfLight_RooflineChart",
    "WarpStateStats",
    "WorkloadDistribution",
]


def probe_run(
    runs: Path, entry: str, sections: list[str], metrics: list[str], calls: int = 1
) -> RunResult:
    """One cold ncu ``profile`` call of a probe kernel: ``calls`` measured calls, one warm-up,
    as ``diagnose`` collects (also ``bench/section_costs.py``'s run)."""
    return profile(
        Measuring(runs_root=runs),
        "ncu",
        source=PROBES.read_text(),
        entry=entry,
        configs=CONFIGS,
        metrics=metrics,
        sections=sections,
        runs=calls,
        warmup=1,
    )


def _timed(runs: Path, entry: str, sections: list[str], reps: int) -> tuple[float, RunResult]:
    """Median wall seconds of ``reps`` profile calls (``reps >= 1``), and the last run."""
    walls: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        run = probe_run(runs, entry, sections, FIRST_PASS_METRICS)
        walls.append(time.perf_counter() - start)
        print(f"  {entry}, {len(sections)} sections: {walls[-1]:.1f} s", flush=True)
    return statistics.median(walls), run  # a run that fails raises, naming its stage


def _headline(run: RunResult) -> str:
    """The first kernel's headline in the run's report."""
    return diagnose_report(read_report(report_of(run))).full[0].diagnosis.headline


def measure(entry: str, reps: int) -> dict[str, Any]:
    runs = Path(tempfile.mkdtemp(prefix="deeper-pass-"))
    first, first_run = _timed(runs, entry, FIRST_PASS_SECTIONS, reps)
    d = diagnose_report(read_report(report_of(first_run)))
    extra = d.deeper_sections
    second_sections = [*FIRST_PASS_SECTIONS, *extra]
    row: dict[str, Any] = {
        "entry": entry,
        "headline_first": d.full[0].diagnosis.headline if d.full else None,
        "deeper": extra,
        "first_s": round(first, 2),
    }
    second, second_run = _timed(runs, entry, second_sections, reps)
    row["second_s"] = round(second, 2)
    row["headline_second"] = _headline(second_run)
    if COMPUTE_SECTION in extra:
        without = [s for s in second_sections if s != COMPUTE_SECTION]
        row["second_no_cwa_s"] = round(_timed(runs, entry, without, reps)[0], 2)
        row["cwa_added_pct"] = round(100.0 * (second / row["second_no_cwa_s"] - 1.0), 1)
    one, one_run = _timed(runs, entry, ONE_PASS_SECTIONS, reps)
    row["one_s"] = round(one, 2)
    row["headline_one"] = _headline(one_run)
    row["same_headline"] = row["headline_one"] == row["headline_second"]
    row["staged_over_one"] = round((first + second) / one, 2)
    peer, _ = _timed(runs, entry, FULL_SET, reps)
    row["peer_full_s"] = round(peer, 2)
    row["both_passes_over_full"] = round((first + second) / peer, 2)
    row["one_over_full"] = round(one / peer, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--entries", nargs="+", default=list(ENTRIES), choices=ENTRIES)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for entry in args.entries:  # each row kept as it comes: a long run may be cut short
        rows.append(measure(entry, args.reps))
        print(json.dumps(rows[-1]), flush=True)
        (args.out / "deeper_pass.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
